"""Backups of the state store (scheduler.state.backup), on SQLite and a real Redis (see conftest):
an export restores exactly into an empty store, counters only move up, a non-empty store or a held
lease refuses the restore, bad files are refused with the file and field named."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from scheduler.state import backup, base


async def _fill(store: base.StateStore) -> None:
    await store.write([base.Put("specs", "ModelDeployment/chat", '{"a": 1}'), base.Put("meta", "spec_generation", "3"),
                       base.Put("directives", "t7-1", '{"status": "succeeded"}'),
                       base.Put("directives", "t7-2", '{"status": "sent"}'), base.Put("routing", "table", "{}")])
    for _ in range(3):
        await store.incr("spec_generation")
    for _ in range(41):
        await store.incr("routing_version")
    lease = await store.acquire_lease("node-a", 5.0, {})
    await store.release_lease("node-a", lease.token)


async def test_round_trip_into_an_empty_store(open_store):
    """Everything exported (every collection, every counter) is what the empty store holds after the
    restore; the lease is not carried."""
    source, target = open_store("src"), open_store("dst")
    await _fill(source)
    snapshot = await backup.export(source, namespace="src", meridian_version="0.2.0")
    again = backup.decode(snapshot.to_json(), "backup.json")
    written = await backup.restore(target, again)
    assert written == 5
    for name in ("specs", "meta", "directives", "routing"):
        assert await target.items(name) == await source.items(name)
    counters = await target.counters()
    assert counters["spec_generation"] == 3 and counters["routing_version"] == 41
    assert counters["lease_token"] >= (await source.counters())["lease_token"]
    assert await target.lease() is None


async def test_restored_store_elects_a_higher_fencing_token(open_store):
    """A scheduler elected on the restored store gets a fencing token above every one the source
    handed out, so agents accept its directives and its directive ids are new."""
    source, target = open_store("src"), open_store("dst")
    await _fill(source)
    old = (await source.counters())["lease_token"]
    await backup.restore(target, await backup.export(source, namespace="src", meridian_version="0.2.0"))
    lease = await target.acquire_lease("node-b", 5.0, {})
    assert lease is not None and lease.token > old


async def test_a_lost_store_still_elects_tokens_above_the_old_ones(open_store):
    """Tokens are at least the wall clock in ms, so a store that starts empty again (lost, no backup)
    still hands out tokens above those agents saw before."""
    first = open_store("before")
    lease = await first.acquire_lease("a", 5.0, {})
    assert lease.token >= int((time.time() - 5) * 1000)
    await first.release_lease("a", lease.token)
    # A store is lost and started again later than the same millisecond (two stores in one
    # millisecond, as this test ran them, could only tie: nothing links them but the clock).
    await asyncio.sleep(0.005)
    fresh = open_store("after")  # an empty store, as after the loss
    later = await fresh.acquire_lease("b", 5.0, {})
    assert later.token > lease.token


async def test_counters_only_move_up(open_store):
    """raise_counters never lowers a counter and creates missing ones."""
    store = open_store()
    for _ in range(10):
        await store.incr("routing_version")
    await store.raise_counters({"routing_version": 4, "spec_generation": 2})
    assert await store.counters() == {"routing_version": 10, "spec_generation": 2}
    await store.raise_counters({"routing_version": 12})
    assert (await store.counters())["routing_version"] == 12


async def test_a_store_that_is_not_empty_is_refused_without_force(open_store):
    """Importing over existing state is refused (nothing changes); --force replaces it whole."""
    source, target = open_store("src"), open_store("dst")
    await _fill(source)
    snapshot = await backup.export(source, namespace="src", meridian_version="0.2.0")
    await target.write([base.Put("specs", "Cluster/other", "{}"), base.Put("traffic", "x", "{}")])
    with pytest.raises(backup.BackupError, match="not empty .*specs=1.*add --force"):
        await backup.restore(target, snapshot, target="dst")
    assert await target.items("specs") == {"Cluster/other": "{}"}
    await backup.restore(target, snapshot, force=True)
    assert await target.items("specs") == await source.items("specs")
    assert await target.items("traffic") == {}


async def test_a_held_lease_refuses_the_import(open_store):
    """While a scheduler leads on the store, an import is refused and writes nothing."""
    source, target = open_store("src"), open_store("dst")
    await _fill(source)
    snapshot = await backup.export(source, namespace="src", meridian_version="0.2.0")
    assert await target.acquire_lease("sched-1", 30.0, {}) is not None
    with pytest.raises(backup.BackupError, match=r"a scheduler holds the lease \(sched-1\)"):
        await backup.restore(target, snapshot, force=True)
    assert await target.collections() == []


@pytest.mark.parametrize("text, words", [
    ("{not json", "backup.json:1: not JSON"),
    ('{"format": "other"}', "format: expected 'meridian-state'"),
    ('{"format": "meridian-state", "format_version": 99, "collections": {}}', "format_version 99 is newer"),
    ('{"format": "meridian-state", "format_version": 1, "collections": {"specs": {"k": 1}}}', "collections.specs"),
    ('{"format": "meridian-state", "format_version": 1, "collections": {}, "counters": {"x": -1}}', "counters"),
])
def test_bad_backup_files_are_refused_with_the_field(text, words):
    """A file that is not a backup, or from a newer format, is refused naming the file and field."""
    with pytest.raises(backup.BackupError) as err:
        backup.decode(text, "backup.json")
    assert words in str(err.value)


def test_the_file_format_is_versioned():
    """Every export states its format and format version."""
    doc = json.loads(backup.Snapshot("ns", 1.0, "0.2.0", {"specs": {"a": "b"}}, {"c": 1}).to_json())
    assert doc["format"] == "meridian-state" and doc["format_version"] == backup.FORMAT_VERSION
    assert doc["collections"] == {"specs": {"a": "b"}} and doc["counters"] == {"c": 1}
