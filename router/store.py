"""Last-known-good routing table, kept so a restarted router serves while the scheduler is down.

Stored as the serialized ``meridian.v1.RoutingTable`` (the wire form, versioned by the proto
package), in a file (written to a temporary name and renamed, so a crash never leaves half a table)
or in Redis (key ``meridian:router:lkg:<router id>``; shared keys let a fresh router in a new place
start from a sibling's table if configured with the same id)."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib

from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import routing_pb2

log = logging.getLogger("meridian.router.store")


def encode(table: fm.RoutingTable) -> bytes:
    return wire.table_to_pb(table).SerializeToString()


def decode(data: bytes) -> fm.RoutingTable:
    message = routing_pb2.RoutingTable()
    message.ParseFromString(data)
    return wire.table_from_pb(message)


class FileStore:
    def __init__(self, path: str | pathlib.Path):
        self.path = pathlib.Path(path)

    def _write(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    async def save(self, table: fm.RoutingTable) -> None:
        await asyncio.to_thread(self._write, encode(table))

    async def load(self) -> fm.RoutingTable | None:
        try:
            data = await asyncio.to_thread(self.path.read_bytes)
        except FileNotFoundError:
            return None
        return decode(data)

    def describe(self) -> str:
        return f"file:{self.path}"


class RedisStore:
    def __init__(self, redis, router_id: str):
        self.redis = redis
        self.key = f"meridian:router:lkg:{router_id}"

    async def save(self, table: fm.RoutingTable) -> None:
        await self.redis.set(self.key, encode(table))

    async def load(self) -> fm.RoutingTable | None:
        data = await self.redis.get(self.key)
        return decode(data) if data is not None else None

    def describe(self) -> str:
        return f"redis:{self.key}"
