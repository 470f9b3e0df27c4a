"""The emulator's prefix cache: longest-prefix reuse and LRU eviction within a token capacity."""

from __future__ import annotations

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
