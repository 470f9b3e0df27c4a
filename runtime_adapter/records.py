"""The small on-disk record that lets a restarted agent re-adopt a still-running engine
(static stability: replicas keep serving while the agent restarts), and, for a replica behind TLS,
its relay (``relay_process``): the relay's own pid, start time, command line and port, beside the
engine's, so both are checked before either is trusted.

Version 2 added ``relay``; version 1 records (no relay: a plaintext replica) still load."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import tempfile
from typing import Any

from meridian import fleet

log = logging.getLogger(__name__)

RECORD_VERSION = 2
READABLE_VERSIONS = (1, 2)


@dataclasses.dataclass(frozen=True)
class RelayRecord:
    """The TLS relay in front of an engine: who it is (pid + kernel start ticks + command line),
    where it listens (the replica's public port) and the files it serves (paths only: the key
    itself is read by the relay, never written here)."""

    pid: int
    start_ticks: int
    host: str
    port: int
    argv: tuple[str, ...]
    cert_file: str
    key_file: str
    reload_interval_s: float = 5.0
    log_path: str = ""


@dataclasses.dataclass(frozen=True)
class ReplicaRecord:
    """Who the engine is (pid + kernel start ticks, so a reused pid is not mistaken for it), where
    it listens, and what it runs."""

    replica_id: str
    pid: int
    start_ticks: int
    host: str
    port: int
    spec: fleet.RuntimeSpec
    gpu_ids: tuple[int, ...]
    argv: tuple[str, ...]
    started_at: float
    log_path: str = ""
    time_to_ready_s: float = 0.0
    restarts: int = 0
    relay: RelayRecord | None = None  # set when the replica serves HTTPS through a relay

    def to_json(self) -> str:
        body: dict[str, Any] = dataclasses.asdict(self)
        body["spec"]["env"] = dict(self.spec.env)
        body["version"] = RECORD_VERSION
        return json.dumps(body, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ReplicaRecord:
        body = json.loads(text)
        version = body.pop("version", None)
        if version not in READABLE_VERSIONS:
            raise ValueError(f"replica record version {version!r} is not supported; valid: "
                             f"{', '.join(map(str, READABLE_VERSIONS))}")
        spec = body.pop("spec")
        spec["extra_args"] = tuple(spec.get("extra_args", ()))
        body["gpu_ids"] = tuple(body.get("gpu_ids", ()))
        body["argv"] = tuple(body.get("argv", ()))
        relay = body.pop("relay", None)
        if relay is not None:
            relay["argv"] = tuple(relay.get("argv", ()))
            relay = RelayRecord(**relay)
        return cls(spec=fleet.RuntimeSpec(**spec), relay=relay, **body)


def record_path(state_dir: str, replica_id: str) -> str:
    return os.path.join(state_dir, f"{replica_id}.replica.json")


def log_path(state_dir: str, replica_id: str) -> str:
    return os.path.join(state_dir, f"{replica_id}.log")


def relay_log_path(state_dir: str, replica_id: str) -> str:
    return os.path.join(state_dir, f"{replica_id}.relay.log")


def engine_config_path(state_dir: str, replica_id: str) -> str:
    """The engine's private ``--config`` file (it holds the API key; mode 0600)."""
    return os.path.join(state_dir, f"{replica_id}.engine.yaml")


def save(state_dir: str, record: ReplicaRecord) -> str:
    """Write the record atomically (temp file + rename), so a crash never leaves half a record."""
    os.makedirs(state_dir, exist_ok=True)
    path = record_path(state_dir, record.replica_id)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".record-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(record.to_json())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load(path: str) -> ReplicaRecord:
    with open(path) as f:
        return ReplicaRecord.from_json(f.read())


def load_all(state_dir: str) -> list[ReplicaRecord]:
    """Every record in ``state_dir`` (unreadable ones are skipped: a record is advisory)."""
    out = []
    if not os.path.isdir(state_dir):
        return out
    for name in sorted(os.listdir(state_dir)):
        if name.endswith(".replica.json"):
            try:
                out.append(load(os.path.join(state_dir, name)))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                log.warning("event=record_unreadable path=%s error=%r", name, str(exc))
                continue
    return out


def remove(state_dir: str, replica_id: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # already removed: nothing to do
        os.unlink(record_path(state_dir, replica_id))
