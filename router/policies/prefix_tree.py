"""An approximate radix tree of prompts, per replica, for prefix-cache affinity.

The prompt is cut into fixed blocks of ``block_chars`` characters; block i's key is a hash of
(key of block i-1, text of block i), so a key names a whole prefix, as a radix-tree node does, and
looking a prompt up is a walk down the chain of keys until no replica is known for a key. Each key
maps to the replicas that were sent that prefix (a bit mask over replicas, so the walk is integer
arithmetic and the table holds no per-key objects), in a bounded LRU (oldest prefixes forgotten
first), which stands in for the replicas' own cache eviction. A request's keys are computed once
(``keys``) and serve both the lookup and the insert. Approximate: a tail shorter than one block is
not remembered, and a hash collision (64-bit) may claim a false match."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class Match:
    """The result of a lookup among a set of replicas.

    ``chars``: the longest prefix any of them holds; ``replicas``: every replica holding that
    longest prefix (all of them: ties are the caller's to break, by load); ``shared_chars``: the
    prefix that every replica looked up holds (a system prompt seen everywhere), which sending the
    request to any of them reuses equally."""

    chars: int
    replicas: frozenset[str]
    shared_chars: int

    @property
    def gain_chars(self) -> int:
        """What the best replicas hold beyond what every replica holds."""
        return self.chars - self.shared_chars


class PrefixTree:
    def __init__(self, block_chars: int = 64, max_blocks: int = 1 << 18):
        self.block_chars = block_chars
        self.max_blocks = max_blocks
        self._nodes: collections.OrderedDict[int, int] = collections.OrderedDict()  # key -> replica bits
        self._bit: dict[str, int] = {}  # replica id -> its bit
        self._free_bits: list[int] = []

    def keys(self, prompt: str) -> list[int]:
        """The chain of block keys of ``prompt`` (one per whole block)."""
        out = []
        key = 0
        size = self.block_chars
        for start in range(0, len(prompt) - size + 1, size):
            key = hash((key, prompt[start:start + size]))
            out.append(key)
        return out

    def _bit_of(self, replica_id: str) -> int:
        bit = self._bit.get(replica_id)
        if bit is None:
            bit = self._free_bits.pop() if self._free_bits else 1 << len(self._bit)
            self._bit[replica_id] = bit
        return bit

    def _mask(self, replica_ids: Iterable[str]) -> int:
        mask = 0
        for rid in replica_ids:
            mask |= self._bit_of(rid)
        return mask

    def match(self, prompt: str | Sequence[int], replica_ids: set[str]) -> Match | None:
        """The longest cached prefix of ``prompt`` (text, or its ``keys``) among ``replica_ids``
        (None: none of them holds a block)."""
        keys = self.keys(prompt) if isinstance(prompt, str) else prompt
        nodes = self._nodes
        everyone = self._mask(replica_ids)
        alive = everyone
        depth = shared = 0
        for key in keys:
            still = alive & nodes.get(key, 0)
            if not still:
                break
            depth += 1
            if still == everyone:
                shared = depth
            alive = still
            nodes.move_to_end(key)
        if not depth:
            return None
        holders = frozenset(rid for rid in replica_ids if self._bit[rid] & alive)
        return Match(depth * self.block_chars, holders, shared * self.block_chars)

    def insert(self, prompt: str | Sequence[int], replica_id: str) -> None:
        """Remember that ``replica_id`` was sent ``prompt`` (text, or its ``keys``)."""
        keys = self.keys(prompt) if isinstance(prompt, str) else prompt
        nodes = self._nodes
        bit = self._bit_of(replica_id)
        get = nodes.get
        touch = nodes.move_to_end
        for key in keys:
            holders = get(key)
            if holders is None:
                nodes[key] = bit
            else:
                nodes[key] = holders | bit
                touch(key)
        while len(nodes) > self.max_blocks:
            nodes.popitem(last=False)

    def forget(self, replica_ids: set[str]) -> None:
        gone = 0
        for rid in replica_ids:
            bit = self._bit.pop(rid, None)
            if bit is not None:
                gone |= bit
                self._free_bits.append(bit)
        if not gone:
            return
        keep = ~gone
        for k, holders in list(self._nodes.items()):
            if holders & gone:
                if holders & keep:
                    self._nodes[k] = holders & keep  # an existing key: its LRU place is kept
                else:
                    del self._nodes[k]

    def __len__(self) -> int:
        return len(self._nodes)
