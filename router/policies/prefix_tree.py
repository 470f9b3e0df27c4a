"""An approximate radix tree of prompts, per replica, for prefix-cache affinity.

The prompt is cut into fixed blocks of ``block_chars`` characters; block i's key is a hash of
(key of block i-1, text of block i), so a key names a whole prefix, as a radix-tree node does, and
looking a prompt up is a walk down the chain of keys until no replica is known for a key. Each key
maps to the replicas that were sent that prefix, in a bounded LRU (oldest prefixes forgotten first),
which stands in for the replicas' own cache eviction. Approximate: a tail shorter than one block is
not remembered, and a hash collision (64-bit) may claim a false match."""

from __future__ import annotations

import collections
import dataclasses


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
        self._nodes: collections.OrderedDict[int, set[str]] = collections.OrderedDict()

    def _keys(self, prompt: str):
        key = 0
        size = self.block_chars
        for start in range(0, len(prompt) - size + 1, size):
            key = hash((key, prompt[start:start + size]))
            yield key

    def match(self, prompt: str, replica_ids: set[str]) -> Match | None:
        """The longest cached prefix of ``prompt`` among ``replica_ids`` (None: none holds a block)."""
        nodes = self._nodes
        everyone = len(replica_ids)
        alive = set(replica_ids)
        depth = shared = 0
        for key in self._keys(prompt):
            holders = nodes.get(key)
            if not holders:
                break
            still = alive & holders
            if not still:
                break
            depth += self.block_chars
            if len(still) == everyone:
                shared = depth
            alive = still
            nodes.move_to_end(key)
        if not depth:
            return None
        return Match(depth, frozenset(alive), shared)

    def insert(self, prompt: str, replica_id: str) -> None:
        nodes = self._nodes
        for key in self._keys(prompt):
            holders = nodes.get(key)
            if holders is None:
                nodes[key] = {replica_id}
            else:
                holders.add(replica_id)
                nodes.move_to_end(key)
        while len(nodes) > self.max_blocks:
            nodes.popitem(last=False)

    def forget(self, replica_ids: set[str]) -> None:
        dead = []
        for k, holders in self._nodes.items():
            holders.difference_update(replica_ids)
            if not holders:
                dead.append(k)
        for k in dead:
            del self._nodes[k]

    def __len__(self) -> int:
        return len(self._nodes)
