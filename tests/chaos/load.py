"""Steady client load through the router (aiohttp, as a thin client costs the 2-core machine least):
non-streaming and streaming chat requests from a few concurrent clients, each request with its own
``X-Request-Id`` (the replicas' request logs are matched on it), every outcome recorded."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time

import aiohttp
import orjson

MODEL = "chat"
# A client's own limits: a request that hears nothing for SOCK_READ_S (a stalled stream) is given
# up, and none may take longer than TOTAL_S.
SOCK_READ_S = 12.0
TOTAL_S = 45.0


@dataclasses.dataclass(frozen=True)
class LoadSpec:
    unary_clients: int = 3
    stream_clients: int = 2
    max_tokens: int = 8


STEADY = LoadSpec()


@dataclasses.dataclass
class Record:
    kind: str  # "unary" or "stream"
    request_id: str
    start: float  # time.monotonic()
    end: float = 0.0
    ok: bool = False
    first_byte: float | None = None  # streams: when the first event arrived
    error: str = ""

    @property
    def latency_s(self) -> float:
        return self.end - self.start

    @property
    def broken(self) -> bool:
        """A stream that had started (its first event reached the client) and did not end well."""
        return self.kind == "stream" and not self.ok and self.first_byte is not None


class Load:
    def __init__(self, url: str, spec: LoadSpec, tag: str):
        self.url = f"{url}/v1/chat/completions"
        self.spec = spec
        self.tag = tag
        self.records: list[Record] = []
        self._ids = itertools.count(1)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> Load:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TOTAL_S, sock_read=SOCK_READ_S))
        self._tasks = [asyncio.create_task(self._client(i, stream=False)) for i in range(self.spec.unary_clients)]
        self._tasks += [asyncio.create_task(self._client(i, stream=True)) for i in range(self.spec.stream_clients)]
        return self

    async def stop(self) -> list[Record]:
        self._stop.set()
        await asyncio.gather(*self._tasks)
        if self._session is not None:
            await self._session.close()
        return self.records

    async def _client(self, i: int, *, stream: bool) -> None:
        while not self._stop.is_set():
            rid = f"chaos-{self.tag}-{next(self._ids)}"
            body = {"model": MODEL, "max_tokens": self.spec.max_tokens, "stream": stream,
                    "messages": [{"role": "user", "content": f"client {i} asks question {rid}"}]}
            record = Record("stream" if stream else "unary", rid, time.monotonic())
            self.records.append(record)
            try:
                await (self._stream(record, body) if stream else self._unary(record, body))
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
                record.error = f"{type(exc).__name__}: {exc}"[:200]
            record.end = time.monotonic()

    async def _unary(self, record: Record, body: dict) -> None:
        async with self._session.post(self.url, json=body, headers={"X-Request-Id": record.request_id}) as resp:
            data = await resp.read()
            if resp.status != 200:
                record.error = f"HTTP {resp.status}: {data[:160]!r}"
                return
            record.ok = bool(orjson.loads(data)["choices"][0]["message"]["content"])

    async def _stream(self, record: Record, body: dict) -> None:
        async with self._session.post(self.url, json=body, headers={"X-Request-Id": record.request_id}) as resp:
            if resp.status != 200:
                record.error = f"HTTP {resp.status}: {(await resp.read())[:160]!r}"
                return
            seen = b""
            async for chunk in resp.content.iter_any():
                if record.first_byte is None:
                    record.first_byte = time.monotonic()
                seen = (seen + chunk)[-4096:]
                if b'data: {"error"' in seen:
                    record.error = "error event: " + seen[seen.rfind(b'data: {"error"'):][:160].decode(errors="replace")
                    return
            if seen.rstrip().endswith(b"data: [DONE]"):
                record.ok = True
            else:
                record.error = "stream ended without [DONE]"
