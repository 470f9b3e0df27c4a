"""The StateStore contract, run against SQLite and a real Redis (see conftest)."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.state import base


async def test_put_get_items_delete(store):
    """Writes are visible to get and items; deletes remove; collections are separate."""
    await store.write([base.Put("a", "k1", "v1"), base.Put("a", "k2", "v2"), base.Put("b", "k1", "other")])
    assert await store.get("a", "k1") == "v1"
    assert await store.items("a") == {"k1": "v1", "k2": "v2"}
    await store.write([base.Delete("a", "k1"), base.Put("a", "k2", "v2b")])
    assert await store.items("a") == {"k2": "v2b"}
    assert await store.get("b", "k1") == "other"
    assert await store.get("a", "missing") is None
    assert await store.items("empty") == {}


async def test_insert_only_when_absent(store):
    """insert stores a value once; a second insert of the same key is refused and changes nothing."""
    assert await store.insert("d", "x", "first") is True
    assert await store.insert("d", "x", "second") is False
    assert await store.get("d", "x") == "first"


async def test_counters_increase(store):
    """incr starts at 1 and adds one per call, independently per counter."""
    assert [await store.incr("c") for _ in range(3)] == [1, 2, 3]
    assert await store.incr("other") == 1


async def test_counter_is_atomic_under_concurrency(store):
    """Concurrent increments never hand out the same value twice."""
    values = await asyncio.gather(*(store.incr("race") for _ in range(50)))
    assert sorted(values) == list(range(1, 51))


async def test_lease_is_exclusive_and_tokens_increase(store):
    """Only one holder has the lease; a later term gets a strictly higher fencing token."""
    first = await store.acquire_lease("a", 5.0, {"grpc": "127.0.0.1:1"})
    assert first is not None and first.holder == "a"
    assert await store.acquire_lease("b", 5.0, {}) is None
    again = await store.acquire_lease("a", 5.0, {})
    assert again is not None and again.token == first.token
    current = await store.lease()
    assert current is not None and current.holder == "a" and current.meta == {"grpc": "127.0.0.1:1"}
    await store.release_lease("a", first.token)
    assert await store.lease() is None
    second = await store.acquire_lease("b", 5.0, {})
    assert second is not None and second.token > first.token


async def test_lease_expires_without_renewal(store):
    """A lease not renewed within its TTL lapses and another holder can take it."""
    first = await store.acquire_lease("a", 0.6, {})
    assert first is not None
    assert await store.renew_lease("a", first.token, 0.6) is True
    await asyncio.sleep(1.0)
    assert await store.renew_lease("a", first.token, 0.6) is False
    taken = await store.acquire_lease("b", 5.0, {})
    assert taken is not None and taken.token > first.token


async def test_renew_and_release_need_holder_and_token(store):
    """Renewing or releasing with the wrong holder or token has no effect."""
    lease = await store.acquire_lease("a", 5.0, {})
    assert await store.renew_lease("b", lease.token, 5.0) is False
    assert await store.renew_lease("a", lease.token + 1, 5.0) is False
    await store.release_lease("b", lease.token)
    await store.release_lease("a", lease.token + 1)
    assert (await store.lease()).holder == "a"


async def test_fenced_writes_need_the_current_token(store):
    """A fenced write or insert succeeds with the current token and is refused (FencedOut) with an old
    one or with no lease at all, leaving the data unchanged."""
    with pytest.raises(base.FencedOut):
        await store.write([base.Put("d", "x", "1")], fence=1)
    lease = await store.acquire_lease("a", 5.0, {})
    await store.write([base.Put("d", "x", "1")], fence=lease.token)
    assert await store.insert("d", "y", "1", fence=lease.token) is True
    await store.release_lease("a", lease.token)
    newer = await store.acquire_lease("b", 5.0, {})
    with pytest.raises(base.FencedOut):
        await store.write([base.Put("d", "x", "stale")], fence=lease.token)
    with pytest.raises(base.FencedOut):
        await store.insert("d", "z", "stale", fence=lease.token)
    assert await store.get("d", "x") == "1" and await store.get("d", "z") is None
    await store.write([base.Put("d", "x", "2")], fence=newer.token)
    assert await store.get("d", "x") == "2"


async def test_write_is_all_or_nothing(store):
    """A fenced-out multi-op write applies none of its ops."""
    await store.write([base.Put("d", "keep", "old")])
    with pytest.raises(base.FencedOut):
        await store.write([base.Put("d", "keep", "new"), base.Delete("d", "keep"), base.Put("d", "n", "1")], fence=9)
    assert await store.items("d") == {"keep": "old"}
