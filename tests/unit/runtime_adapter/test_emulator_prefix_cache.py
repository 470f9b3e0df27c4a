"""The emulator's prefix cache: longest-prefix reuse and LRU eviction within a token capacity."""

from __future__ import annotations

import random

from runtime_adapter.emulator import radix


def test_longest_prefix_is_matched():
    """A prompt sharing a cached prefix matches exactly that many tokens."""
    cache = radix.PrefixCache(1000)
    cache.insert(["sys", "a", "b", "c"])
    assert cache.match(["sys", "a", "b", "x"]) == 3
    assert cache.match(["other"]) == 0
    assert cache.size_tokens == 4


def test_shared_prefixes_are_stored_once():
    """Two prompts with a common system prompt hold the common part once."""
    cache = radix.PrefixCache(1000)
    cache.insert(["s1", "s2", "u1"])
    cache.insert(["s1", "s2", "u2"])
    assert cache.size_tokens == 4


def test_least_recently_used_leaves_are_evicted_first():
    """Past capacity, the least recently used branch goes first and a recently used one stays."""
    cache = radix.PrefixCache(6)
    cache.insert(["a1", "a2", "a3"])
    cache.insert(["b1", "b2", "b3"])
    cache.match(["a1", "a2", "a3"])  # a is now more recent than b
    cache.insert(["c1", "c2", "c3"])
    assert cache.size_tokens <= 6
    assert cache.match(["a1", "a2", "a3"]) == 3
    assert cache.match(["b1", "b2", "b3"]) == 0


def test_zero_capacity_caches_nothing():
    """A cache with no room never hits."""
    cache = radix.PrefixCache(0)
    cache.insert(["a", "b"])
    assert cache.match(["a", "b"]) == 0


def test_many_touches_do_not_grow_without_bound():
    """Repeated matches of the same prompt keep the bookkeeping bounded."""
    cache = radix.PrefixCache(10_000)
    cache.insert(["x", "y"])
    for _ in range(20_000):
        cache.match(["x", "y"])
    assert len(cache._leaves) < 2_000


def test_partial_match_touches_only_the_matched_part():
    """A prompt that leaves a cached edge halfway refreshes only the shared part: the unshared rest
    is now the least recently used and is trimmed first, token by token, while the shared part and
    the newer prompts stay."""
    cache = radix.PrefixCache(9)
    cache.insert(["s1", "s2", "a1", "a2"])
    cache.insert(["b1", "b2", "b3"])
    assert cache.match(["s1", "s2", "x"]) == 2  # s1 s2 now newer than b; a1 a2 the oldest
    cache.insert(["c1", "c2", "c3"])  # 10 tokens in 9: one goes, the oldest leaf's last token
    assert cache.size_tokens == 9
    assert cache.match(["b1", "b2", "b3"]) == 3
    assert cache.match(["s1", "s2", "a1", "a2"]) == 3


def test_long_prompt_costs_nodes_not_tokens():
    """A 100k-token prompt is held as one node, and a second sharing half of it adds two more."""
    cache = radix.PrefixCache(1_000_000)
    first = [f"t{i}" for i in range(100_000)]
    cache.insert(first)
    assert (cache.nodes, cache.size_tokens) == (1, 100_000)
    second = first[:50_000] + [f"u{i}" for i in range(50_000)]
    assert cache.match(second) == 50_000
    cache.insert(second)
    assert (cache.nodes, cache.size_tokens) == (3, 150_000)
    assert cache.match(first) == 100_000 and cache.match(second) == 100_000


class _Reference:
    """The cache's contract, token by token: every cached prefix with its last access; a match
    touches the prefixes it uses; eviction removes the least recently used leaf token."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.stamp: dict[tuple, int] = {}
        self.tick = 0

    def peek(self, tokens) -> int:
        n = 0
        while n < len(tokens) and tuple(tokens[:n + 1]) in self.stamp:
            n += 1
        return n

    def match(self, tokens) -> int:
        self.tick += 1
        n = 0
        while n < len(tokens) and tuple(tokens[:n + 1]) in self.stamp:
            n += 1
            self.stamp[tuple(tokens[:n])] = self.tick
        return n

    def insert(self, tokens) -> None:
        if self.capacity == 0:
            return
        self.tick += 1
        for i in range(1, min(len(tokens), self.capacity) + 1):
            self.stamp[tuple(tokens[:i])] = self.tick
        self.evict(self.capacity)

    def evict(self, keep: int) -> int:
        gone = 0
        while len(self.stamp) > keep:
            parents = {k[:-1] for k in self.stamp}
            leaf = min((k for k in self.stamp if k not in parents), key=self.stamp.__getitem__)
            del self.stamp[leaf]
            gone += 1
        return gone


def test_cache_agrees_with_the_token_level_contract():
    """Matches, sizes and evictions equal a token-by-token LRU prefix tree's over 500 seeded random
    runs of matches, inserts, evictions and capacity changes on prompts with shared prefixes."""
    rng = random.Random(7)
    for _ in range(500):
        capacity = rng.randint(0, 40)
        cache, ref = radix.PrefixCache(capacity), _Reference(capacity)
        for _ in range(40):
            op = rng.choice(("match", "insert", "insert", "evict", "shrink"))
            tokens = [rng.choice("abc") for _ in range(rng.randint(0, 14))]
            k = rng.randint(0, 30)
            if op == "match":
                assert cache.peek(tokens) == ref.peek(tokens)
                assert cache.match(tokens) == ref.match(tokens)
            elif op == "insert":
                cache.insert(tokens)
                ref.insert(tokens)
            elif op == "evict":
                assert cache.evict(k) == ref.evict(k)
            else:
                cache.capacity_tokens = ref.capacity = k
            assert cache.size_tokens == len(ref.stamp)
