"""The embedded state store: one SQLite file, for a single scheduler node (the default).

All database work runs on one dedicated worker thread (never on the event loop), each operation in
its own ``BEGIN IMMEDIATE`` transaction, so two processes sharing the file (a restarted scheduler
while the old one exits, or a local standby) still see atomic writes and an exclusive lease. Lease
expiry compares against the injected clock."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import pathlib
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from scheduler import clock as clock_mod
from scheduler.state import base

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
  namespace TEXT NOT NULL, collection TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
  PRIMARY KEY (namespace, collection, key));
CREATE TABLE IF NOT EXISTS counters (namespace TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL,
  PRIMARY KEY (namespace, name));
CREATE TABLE IF NOT EXISTS lease (namespace TEXT PRIMARY KEY, holder TEXT NOT NULL, token INTEGER NOT NULL,
  expires_at REAL NOT NULL, meta TEXT NOT NULL);
"""


def path_of(url: str) -> str:
    """``sqlite://PATH``: the text after ``sqlite://`` is the file path (``~`` expanded), or ``:memory:``."""
    if not url.startswith("sqlite://"):
        raise ValueError(f"state_url {url!r}: expected sqlite://PATH, e.g. sqlite:///var/lib/meridian/state.db")
    raw = url[len("sqlite://"):]
    if not raw:
        raise ValueError("state_url 'sqlite://' names no file; e.g. sqlite:///var/lib/meridian/state.db")
    return raw if raw == ":memory:" else str(pathlib.Path(raw).expanduser())


class SqliteStore(base.StateStore):
    def __init__(self, path: str, *, namespace: str = "default", clock: clock_mod.Clock | None = None):
        self._ns = namespace
        self._clock = clock or clock_mod.SystemClock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="meridian-sqlite")
        if path != ":memory:":
            pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._db: sqlite3.Connection | None = None
        self._pool.submit(self._open).result()

    @classmethod
    def from_url(cls, url: str, *, namespace: str = "default", clock: clock_mod.Clock | None = None) -> SqliteStore:
        return cls(path_of(url), namespace=namespace, clock=clock)

    def _open(self) -> None:
        db = sqlite3.connect(self._path, timeout=10.0, isolation_level=None, check_same_thread=False)
        if self._path != ":memory:":
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        self._db = db

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def job() -> T:
            if self._db is None:
                raise base.StateError("the SQLite store is closed")
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                out = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return out

        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, job)
        except sqlite3.Error as exc:
            raise base.StateError(f"SQLite {self._path}: {exc}") from exc

    def _check_fence(self, db: sqlite3.Connection, fence: int | None, now: float) -> None:
        if fence is None:
            return
        row = db.execute("SELECT token, expires_at FROM lease WHERE namespace=?", (self._ns,)).fetchone()
        if row is None or row[0] != fence or row[1] <= now:
            raise base.FencedOut(f"lease not held with fencing token {fence}")

    async def get(self, collection: str, key: str) -> str | None:
        def fn(db):
            row = db.execute("SELECT value FROM kv WHERE namespace=? AND collection=? AND key=?",
                             (self._ns, collection, key)).fetchone()
            return row[0] if row else None
        return await self._run(fn)

    async def items(self, collection: str) -> dict[str, str]:
        def fn(db):
            rows = db.execute("SELECT key, value FROM kv WHERE namespace=? AND collection=?", (self._ns, collection))
            return dict(rows.fetchall())
        return await self._run(fn)

    async def write(self, ops: Sequence[base.Op], *, fence: int | None = None) -> None:
        now = self._clock.now()

        def fn(db):
            self._check_fence(db, fence, now)
            for op in ops:
                if isinstance(op, base.Put):
                    db.execute("INSERT INTO kv (namespace, collection, key, value) VALUES (?,?,?,?) "
                               "ON CONFLICT (namespace, collection, key) DO UPDATE SET value=excluded.value",
                               (self._ns, op.collection, op.key, op.value))
                else:
                    db.execute("DELETE FROM kv WHERE namespace=? AND collection=? AND key=?",
                               (self._ns, op.collection, op.key))
        await self._run(fn)

    async def insert(self, collection: str, key: str, value: str, *, fence: int | None = None) -> bool:
        now = self._clock.now()

        def fn(db):
            self._check_fence(db, fence, now)
            cur = db.execute("INSERT OR IGNORE INTO kv (namespace, collection, key, value) VALUES (?,?,?,?)",
                             (self._ns, collection, key, value))
            return cur.rowcount == 1
        return await self._run(fn)

    async def incr(self, counter: str) -> int:
        def fn(db):
            return _incr(db, self._ns, counter)
        return await self._run(fn)

    async def collections(self) -> list[str]:
        def fn(db):
            rows = db.execute("SELECT DISTINCT collection FROM kv WHERE namespace=? ORDER BY collection", (self._ns,))
            return [r[0] for r in rows.fetchall()]
        return await self._run(fn)

    async def counters(self) -> dict[str, int]:
        def fn(db):
            return dict(db.execute("SELECT name, value FROM counters WHERE namespace=?", (self._ns,)).fetchall())
        return await self._run(fn)

    async def raise_counters(self, values: Mapping[str, int]) -> None:
        def fn(db):
            for name, value in values.items():
                db.execute("INSERT INTO counters (namespace, name, value) VALUES (?,?,?) "
                           "ON CONFLICT (namespace, name) DO UPDATE SET value=MAX(value, excluded.value)",
                           (self._ns, name, int(value)))
        await self._run(fn)

    async def acquire_lease(self, holder: str, ttl_s: float, meta: Mapping[str, str]) -> base.Lease | None:
        now = self._clock.now()

        def fn(db):
            row = db.execute("SELECT holder, token, expires_at, meta FROM lease WHERE namespace=?",
                             (self._ns,)).fetchone()
            if row is not None and row[2] > now:
                if row[0] == holder:
                    return base.Lease(row[0], row[1], row[2], json.loads(row[3]))
                return None
            token = _incr(db, self._ns, "lease_token", floor=base.token_floor(now))
            expires = now + ttl_s
            db.execute("INSERT INTO lease (namespace, holder, token, expires_at, meta) VALUES (?,?,?,?,?) "
                       "ON CONFLICT (namespace) DO UPDATE SET holder=excluded.holder, token=excluded.token, "
                       "expires_at=excluded.expires_at, meta=excluded.meta",
                       (self._ns, holder, token, expires, json.dumps(dict(meta))))
            return base.Lease(holder, token, expires, dict(meta))
        return await self._run(fn)

    async def renew_lease(self, holder: str, token: int, ttl_s: float) -> bool:
        now = self._clock.now()

        def fn(db):
            cur = db.execute("UPDATE lease SET expires_at=? WHERE namespace=? AND holder=? AND token=? AND expires_at>?",
                             (now + ttl_s, self._ns, holder, token, now))
            return cur.rowcount == 1
        return await self._run(fn)

    async def release_lease(self, holder: str, token: int) -> None:
        def fn(db):
            db.execute("DELETE FROM lease WHERE namespace=? AND holder=? AND token=?", (self._ns, holder, token))
        await self._run(fn)

    async def lease(self) -> base.Lease | None:
        now = self._clock.now()

        def fn(db):
            row = db.execute("SELECT holder, token, expires_at, meta FROM lease WHERE namespace=?",
                             (self._ns,)).fetchone()
            if row is None or row[2] <= now:
                return None
            return base.Lease(row[0], row[1], row[2], json.loads(row[3]))
        return await self._run(fn)

    async def close(self) -> None:
        if self._db is None:
            return

        def fn():
            if self._db is not None:
                self._db.close()
                self._db = None
        await asyncio.get_running_loop().run_in_executor(self._pool, fn)
        self._pool.shutdown(wait=True)


def _incr(db: sqlite3.Connection, ns: str, counter: str, floor: int = 0) -> int:
    """Add one to ``counter`` (absent: 0), then lift it to ``floor`` if it is lower; the new value."""
    db.execute("INSERT INTO counters (namespace, name, value) VALUES (?,?,MAX(1, ?)) "
               "ON CONFLICT (namespace, name) DO UPDATE SET value=MAX(value+1, ?)", (ns, counter, floor, floor))
    return db.execute("SELECT value FROM counters WHERE namespace=? AND name=?", (ns, counter)).fetchone()[0]
