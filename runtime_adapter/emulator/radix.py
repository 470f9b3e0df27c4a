"""A prefix cache over token sequences with SGLang RadixCache semantics: the longest cached prefix
of a prompt is reused (its prefill is skipped), finished prompts are inserted, and when the cache
exceeds its token capacity the least recently used leaves are evicted first.

Counts are exact to the token (the ``cached_tokens`` SGLang reports), but the cost is per node, not
per token: the tree is compressed (a node holds a run of tokens, as SGLang's RadixCache does), a
node's children are keyed by their first token, and an edge is compared with one slice comparison
(C speed), so a 100k-token prompt costs a handful of list operations rather than 100k dict steps.
A match that stops inside an edge splits it, so the matched part is touched for LRU and the rest
keeps its older access time. Eviction trims the least recently used leaf from its end, token-exact,
and drops it once empty (its parent may then become a leaf)."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Sequence


class _Node:
    __slots__ = ("alive", "children", "key", "last_access", "parent")

    def __init__(self, parent: _Node | None, key: list[Hashable]) -> None:
        self.children: dict[Hashable, _Node] = {}
        self.parent = parent
        self.key = key  # the run of tokens on the edge from the parent to this node
        self.last_access = 0
        self.alive = True


def _common_length(a: Sequence[Hashable], start: int, b: list[Hashable]) -> int:
    """Length of the common prefix of ``a[start:]`` and ``b``, with slice comparisons (C speed):
    a whole-edge check first, then a binary search for the first difference."""
    n = min(len(a) - start, len(b))
    # Slicing copies (and touches every token's refcount): skip it where the whole list is meant.
    head = a if start == 0 and n == len(a) else a[start:start + n]
    if head == (b if n == len(b) else b[:n]):
        return n
    lo, hi = 1, n - 1  # b[:lo] is known to match (children are keyed by their first token)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[start + lo:start + mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PrefixCache:
    """Compressed prefix tree with LRU leaf eviction; ``size_tokens`` is the tokens held."""

    def __init__(self, capacity_tokens: int) -> None:
        if capacity_tokens < 0:
            raise ValueError(f"capacity_tokens={capacity_tokens} must be >= 0")
        self.capacity_tokens = capacity_tokens
        self.size_tokens = 0
        self.nodes = 0
        self._root = _Node(None, [])
        self._tick = itertools.count(1)
        self._leaves: list[tuple[int, int, _Node]] = []
        self._seq = itertools.count()

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut ``node``'s edge after ``at`` tokens: a new head node takes the first ``at`` tokens and
        ``node`` (with its children, access time and heap entries) keeps the rest below it."""
        parent = node.parent
        assert parent is not None
        head = _Node(parent, node.key[:at])
        head.last_access = node.last_access
        parent.children[head.key[0]] = head
        node.key = node.key[at:]
        node.parent = head
        head.children[node.key[0]] = node
        self.nodes += 1
        return head

    def _walk(self, tokens: Sequence[Hashable], now: int) -> tuple[_Node, int]:
        """Follow ``tokens`` down the tree, touching each node on the way and splitting an edge the
        prompt leaves halfway; returns the deepest node reached and the tokens matched."""
        node, n, total = self._root, 0, len(tokens)
        while n < total:
            child = node.children.get(tokens[n])
            if child is None:
                break
            k = _common_length(tokens, n, child.key)
            if k < len(child.key):
                child = self._split(child, k)
            child.last_access = now
            node, n = child, n + k
        return node, n

    def match(self, tokens: Sequence[Hashable]) -> int:
        """Length of the longest cached prefix of ``tokens`` (touches it for LRU)."""
        now = next(self._tick)
        node, n = self._walk(tokens, now)
        if n and not node.children:
            self._push_leaf(now, node)
        return n

    def peek(self, tokens: Sequence[Hashable]) -> int:
        """What ``match`` would return, without touching anything (for what-if lookups)."""
        node, n, total = self._root, 0, len(tokens)
        while n < total:
            child = node.children.get(tokens[n])
            if child is None:
                break
            k = _common_length(tokens, n, child.key)
            n += k
            if k < len(child.key):
                break
            node = child
        return n

    def _push_leaf(self, stamp: int, node: _Node) -> None:
        heapq.heappush(self._leaves, (stamp, next(self._seq), node))
        # Touches leave stale entries behind; rebuild from the live leaves before they pile up.
        if len(self._leaves) > 2 * self.nodes + 1024:
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
        if len(tokens) > self.capacity_tokens:
            tokens = tokens[: self.capacity_tokens]
        now = next(self._tick)
        node, n = self._walk(tokens, now)
        if n < len(tokens):
            leaf = _Node(node, list(tokens[n:]))
            leaf.last_access = now
            node.children[leaf.key[0]] = leaf
            self.size_tokens += len(leaf.key)
            self.nodes += 1
            node = leaf
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
            take = min(self.size_tokens - keep_tokens, len(node.key))
            if take < len(node.key):
                del node.key[len(node.key) - take:]  # trim the tail in place; the node stays a leaf
                heapq.heappush(self._leaves, (stamp, next(self._seq), node))
            else:
                parent = node.parent
                assert parent is not None
                del parent.children[node.key[0]]
                node.alive = False
                self.nodes -= 1
                if parent is not self._root and not parent.children:
                    heapq.heappush(self._leaves, (parent.last_access, next(self._seq), parent))
            self.size_tokens -= take
            evicted += take
        return evicted

    def reset(self) -> None:
        self._root = _Node(None, [])
        self._leaves.clear()
        self.size_tokens = 0
        self.nodes = 0
