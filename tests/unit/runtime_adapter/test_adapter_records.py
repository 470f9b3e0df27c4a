"""Adoption records and the weights cache's prefetch step."""

from __future__ import annotations

import asyncio
import json
import os
import threading

import pytest

from meridian import fleet
from runtime_adapter import records, weights

SPEC = fleet.RuntimeSpec(model_path="org/model", served_model_name="m", extra_args=("--x", "1"), env={"A": "b"})


def record(**kw) -> records.ReplicaRecord:
    base = dict(replica_id="r-1", pid=123, start_ticks=456, host="127.0.0.1", port=30001, spec=SPEC, gpu_ids=(0,),
                argv=("python", "-m", "x"), started_at=1.5, log_path="/tmp/l", time_to_ready_s=2.0, restarts=1)
    base.update(kw)
    return records.ReplicaRecord(**base)


def test_record_round_trips_through_json(tmp_path):
    """A saved record loads back equal, spec included."""
    path = records.save(str(tmp_path), record())
    assert records.load(path) == record()
    assert [r.replica_id for r in records.load_all(str(tmp_path))] == ["r-1"]
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o600)


def test_a_tls_replicas_record_holds_its_relay_and_round_trips(tmp_path):
    """The relay's pid, start time, argv, port and file paths are saved beside the engine's, and load back."""
    relay = records.RelayRecord(pid=7, start_ticks=8, host="0.0.0.0", port=31001, argv=("python", "-m", "relay"),
                                cert_file="/etc/tls.crt", key_file="/etc/tls.key", reload_interval_s=2.0)
    path = records.save(str(tmp_path), record(relay=relay))
    assert records.load(path) == record(relay=relay) and records.load(path).relay.argv == ("python", "-m", "relay")


def test_a_record_written_before_relays_loads_as_plaintext():
    """A version-1 record (no relay field) still loads: a plaintext replica."""
    body = json.loads(record().to_json())
    body.pop("relay")
    body["version"] = 1
    assert records.ReplicaRecord.from_json(json.dumps(body)) == record()


def test_unreadable_records_are_skipped(tmp_path):
    """A corrupt record does not hide the good ones."""
    records.save(str(tmp_path), record())
    (tmp_path / "bad.replica.json").write_text("{not json")
    assert [r.replica_id for r in records.load_all(str(tmp_path))] == ["r-1"]
    records.remove(str(tmp_path), "r-1")
    assert records.load_all(str(tmp_path)) == []


def test_record_version_is_checked():
    """A record of another format version is refused with the valid version named."""
    with pytest.raises(ValueError, match="version"):
        records.ReplicaRecord.from_json('{"version": 99}')


async def test_prefetch_downloads_once_per_node(tmp_path):
    """Concurrent prefetches of one model fetch it once; later ones hit the cache."""
    calls = []
    lock = threading.Lock()

    def fetch(repo: str, revision: str, cache_dir: str) -> str:
        with lock:
            calls.append(repo)
        path = os.path.join(cache_dir, "snap")
        os.makedirs(path, exist_ok=True)
        return path

    cache = weights.WeightsCache(str(tmp_path), fetch=fetch)
    results = await asyncio.gather(*(cache.prefetch(SPEC) for _ in range(4)))
    assert calls == ["org/model"]
    assert sum(not r.cached for r in results) == 1
    assert all(r.env == {"HF_HUB_OFFLINE": "1"} for r in results)
    assert cache.is_cached(SPEC)


async def test_prefetch_failure_is_typed(tmp_path):
    """A failing download raises PrefetchError naming the model."""
    def fetch(repo: str, revision: str, cache_dir: str) -> str:
        raise OSError("network unreachable")

    with pytest.raises(weights.PrefetchError, match="org/model"):
        await weights.WeightsCache(str(tmp_path), fetch=fetch).prefetch(SPEC)


async def test_local_model_directory_needs_no_prefetch(tmp_path):
    """A model path that is a local directory is used as is."""
    spec = fleet.RuntimeSpec(model_path=str(tmp_path), served_model_name="m")
    result = await weights.WeightsCache(str(tmp_path / "cache")).prefetch(spec)
    assert result.cached and result.local_path == str(tmp_path) and result.env == {}
