"""Backups of a scheduler's state store: everything one namespace holds (every collection — specs,
spec generation, directive log, traffic, routing table, rollout records — and every counter) as one
versioned JSON document, restorable into an empty store of either backend.

The document (``FORMAT``, ``FORMAT_VERSION``)::

    {"format": "meridian-state", "format_version": 1, "meridian_version": "0.2.0",
     "exported_at": 1764590000.0, "namespace": "default", "source": "redis://...",
     "collections": {"specs": {"ModelDeployment/chat": "...", ...}, "directives": {...}, ...},
     "counters": {"lease_token": 7, "routing_version": 41, "spec_generation": 3}}

Values are the store's own strings, copied verbatim, so a restore is exact whatever a collection
holds. Rules a restore keeps:
- it refuses a store that already holds something, unless ``force`` (then what the store holds is
  deleted first), and always refuses while a scheduler holds the store's lease: the restore takes
  the lease itself for its duration, so no scheduler can lead on a half-written store;
- counters only move up (``StateStore.raise_counters``): the fencing token and the routing version
  keep increasing, so agents and routers accept the restored scheduler's directives and tables and
  no directive id (``t<fencing token>-<serial>``) is ever issued twice;
- the lease itself is not restored (a lease belongs to a running node, not to a backup).

A live store can be exported (reads only); each collection is read at once, so the copy is
consistent per collection."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from collections.abc import Callable, Mapping

from scheduler.state import base

FORMAT = "meridian-state"
FORMAT_VERSION = 1
BATCH = 500
IMPORT_LEASE_TTL_S = 60.0

Progress = Callable[[str], None]


class BackupError(ValueError):
    """A backup file that cannot be read as one, or a restore that must not happen; the message says
    which file or store and what to do."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    namespace: str
    exported_at: float
    meridian_version: str
    collections: Mapping[str, Mapping[str, str]]
    counters: Mapping[str, int]
    source: str = ""

    @property
    def keys(self) -> int:
        return sum(len(v) for v in self.collections.values())

    def summary(self) -> str:
        """One line: what the snapshot holds, by collection, and its counters."""
        parts = [f"{name}={len(items)}" for name, items in sorted(self.collections.items())]
        counters = [f"{name}={value}" for name, value in sorted(self.counters.items())]
        return (f"{self.keys} keys in {len(self.collections)} collections ({', '.join(parts) or 'none'}); "
                f"counters: {', '.join(counters) or 'none'}")

    def to_json(self) -> str:
        return json.dumps({
            "format": FORMAT, "format_version": FORMAT_VERSION, "meridian_version": self.meridian_version,
            "exported_at": self.exported_at, "namespace": self.namespace, "source": self.source,
            "collections": {name: dict(sorted(items.items())) for name, items in sorted(self.collections.items())},
            "counters": dict(sorted(self.counters.items())),
        }, indent=1, sort_keys=False)


def decode(text: str, source: str) -> Snapshot:
    """Parse a backup document; errors name ``source`` and the field at fault."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BackupError(f"{source}:{exc.lineno}: not JSON ({exc.msg}); expected a file written by "
                          f"'meridian state export'") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BackupError(f"{source}: format: expected {FORMAT!r} (a file written by 'meridian state export'), "
                          f"got {data.get('format') if isinstance(data, dict) else type(data).__name__!r}")
    version = data.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise BackupError(f"{source}: format_version: expected a positive integer, got {version!r}")
    if version > FORMAT_VERSION:
        raise BackupError(f"{source}: format_version {version} is newer than this meridian reads "
                          f"({FORMAT_VERSION}): import it with the meridian version that wrote it "
                          f"({data.get('meridian_version', '?')}) or newer")
    collections = data.get("collections")
    if not isinstance(collections, dict):
        raise BackupError(f"{source}: collections: expected an object of collection -> {{key: value}}")
    for name, items in collections.items():
        if not isinstance(items, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in items.items()):
            raise BackupError(f"{source}: collections.{name}: expected an object of string keys to string values")
    counters = data.get("counters", {})
    if not isinstance(counters, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                  for v in counters.values()):
        raise BackupError(f"{source}: counters: expected an object of counter -> non-negative integer")
    return Snapshot(namespace=str(data.get("namespace", "")), exported_at=float(data.get("exported_at", 0.0)),
                    meridian_version=str(data.get("meridian_version", "")), collections=collections,
                    counters=counters, source=str(data.get("source", "")))


async def export(store: base.StateStore, *, namespace: str, meridian_version: str, source: str = "",
                 now_s: float | None = None, progress: Progress | None = None) -> Snapshot:
    """Read every collection and counter of ``store`` (its lease is left alone)."""
    say = progress or (lambda _line: None)
    collections: dict[str, dict[str, str]] = {}
    names = await store.collections()
    for i, name in enumerate(names, 1):
        collections[name] = await store.items(name)
        say(f"exported collection {i}/{len(names)}: {name} ({len(collections[name])} keys)")
    counters = await store.counters()
    say(f"exported {len(counters)} counters")
    return Snapshot(namespace, time.time() if now_s is None else now_s, meridian_version, collections, counters,
                    source)


async def is_empty(store: base.StateStore) -> bool:
    """True when the store holds no key in any collection (counters alone do not count: a scheduler that
    started on an empty store and was elected has a lease token and nothing else)."""
    return not await store.collections()


async def restore(store: base.StateStore, snapshot: Snapshot, *, force: bool = False, target: str = "",
                  progress: Progress | None = None) -> int:
    """Write ``snapshot`` into ``store``; returns the number of keys written. Raises ``BackupError`` when
    a scheduler holds the lease, or the store is not empty and ``force`` is not given."""
    say = progress or (lambda _line: None)
    holder = f"state-import:{socket.gethostname()}-{os.getpid()}"
    lease = await store.acquire_lease(holder, IMPORT_LEASE_TTL_S, {"purpose": "meridian state import"})
    if lease is None:
        current = await store.lease()
        raise BackupError(f"{target or 'the store'}: a scheduler holds the lease "
                          f"({current.holder if current else 'unknown holder'}): stop every scheduler node on "
                          f"this store before importing")
    try:
        existing = await store.collections()
        if existing and not force:
            counts = [f"{name}={len(await store.items(name))}" for name in existing]
            raise BackupError(f"{target or 'the store'}: not empty ({', '.join(counts)}): importing would mix two "
                              f"states; add --force to replace what it holds")
        written = 0
        if existing:
            for name in existing:
                keys = sorted(await store.items(name))
                for start in range(0, len(keys), BATCH):
                    await store.write([base.Delete(name, k) for k in keys[start:start + BATCH]], fence=lease.token)
                say(f"cleared collection {name} ({len(keys)} keys)")
        total = snapshot.keys
        for name, items in sorted(snapshot.collections.items()):
            keys = sorted(items)
            for start in range(0, len(keys), BATCH):
                chunk = keys[start:start + BATCH]
                await store.write([base.Put(name, k, items[k]) for k in chunk], fence=lease.token)
                written += len(chunk)
                if not await store.renew_lease(holder, lease.token, IMPORT_LEASE_TTL_S):
                    raise BackupError(f"{target or 'the store'}: lost the import lease part-way; run the import "
                                      f"again with --force")
                say(f"imported {written}/{total} keys ({name})")
        # The counters after the import's own lease: restored tokens and versions only move up.
        await store.raise_counters(dict(snapshot.counters))
        say(f"raised {len(snapshot.counters)} counters")
        return written
    finally:
        await store.release_lease(holder, lease.token)
