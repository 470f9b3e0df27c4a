"""A prefix cache over token sequences with SGLang RadixCache semantics: the longest cached prefix
of a prompt is reused (its prefill is skipped), finished prompts are inserted, and when the cache
exceeds its token capacity the least recently used leaves are evicted first."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Sequence


class _Node:
    __slots__ = ("children", "parent", "key", "last_access", "alive")

    def __init__(self, parent: _Node | None, key: Hashable | None) -> None:
        self.children: dict[Hashable, _Node] = {}
        self.parent = parent
        self.key = key
        self.last_access = 0
        self.alive = True


class PrefixCache:
    """Token-granular prefix tree with LRU leaf eviction; ``size_tokens`` is the tokens held."""

    def __init__(self, capacity_tokens: int) -> None:
        if capacity_tokens < 0:
            raise ValueError(f"capacity_tokens={capacity_tokens} must be >= 0")
        self.capacity_tokens = capacity_tokens
        self.size_tokens = 0
        self._root = _Node(None, None)
        self._tick = itertools.count(1)
        self._leaves: list[tuple[int, int, _Node]] = []
        self._seq = itertools.count()

    def match(self, tokens: Sequence[Hashable]) -> int:
        """Length of the longest cached prefix of ``tokens`` (touches it for LRU)."""
        node, n = self._root, 0
        now = next(self._tick)
        for tok in tokens:
            child = node.children.get(tok)
            if child is None:
                break
            child.last_access = now
            node, n = child, n + 1
        if n and not node.children:
            self._push_leaf(now, node)
        return n

    def _push_leaf(self, stamp: int, node: _Node) -> None:
        heapq.heappush(self._leaves, (stamp, next(self._seq), node))
        # Touches leave stale entries behind; rebuild from the live leaves before they pile up.
        if len(self._leaves) > 2 * self.size_tokens + 1024:
            self._leaves = [(n.last_access, next(self._seq), n) for n in self._live_leaves()]
            heapq.heapify(self._leaves)

    def _live_leaves(self) -> list[_Node]:
        out, stack = [], list(self._root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                out.append(node)
        return out

    def insert(self, tokens: Sequence[Hashable]) -> None:
        """Cache ``tokens`` (a finished prefill), evicting LRU leaves beyond the capacity."""
        if self.capacity_tokens == 0:
            return
        node = self._root
        now = next(self._tick)
        for tok in tokens[: self.capacity_tokens]:
            child = node.children.get(tok)
            if child is None:
                child = _Node(node, tok)
                node.children[tok] = child
                self.size_tokens += 1
            child.last_access = now
            node = child
        if node is not self._root and not node.children:
            self._push_leaf(now, node)
        self.evict(self.capacity_tokens)

    def evict(self, keep_tokens: int) -> int:
        """Evict LRU leaves until at most ``keep_tokens`` remain; returns tokens evicted."""
        evicted = 0
        while self.size_tokens > keep_tokens and self._leaves:
            stamp, _seq, node = heapq.heappop(self._leaves)
            if not node.alive or node.children or stamp != node.last_access:
                if node.alive and not node.children and stamp != node.last_access:
                    heapq.heappush(self._leaves, (node.last_access, next(self._seq), node))
                continue
            parent = node.parent
            assert parent is not None
            del parent.children[node.key]
            node.alive = False
            self.size_tokens -= 1
            evicted += 1
            if parent is not self._root and not parent.children:
                heapq.heappush(self._leaves, (parent.last_access, next(self._seq), parent))
        return evicted

    def reset(self) -> None:
        self._root = _Node(None, None)
        self._leaves.clear()
        self.size_tokens = 0
