"""A started stream: an async iterator over its chunks (dicts in OpenAI's chunk format).

It is handed out once the first event has arrived, so every retry is over by then: from here on
nothing is retried (the caller holds tokens already), and a failure raises ``StreamError`` (the
connection broke, the server sent an error event, the stream ended without ``[DONE]``) or
``RequestTimeout(kind="total")``. ``[DONE]`` ends the iteration and returns the connection to the
pool; ``aclose()`` (or leaving ``async with``) before that closes it, which tells the router to
stop the replica's work."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any, Self

import aiohttp
import orjson

from meridian.client import errors, sse, transport

# After [DONE], wait this long at most for the end of the body so the connection can be reused.
_DRAIN_S = 1.0


class AsyncStream:
    """Iterate with ``async for``; ``usage`` holds the usage chunk's object once it has passed
    (``include_usage``), ``events`` counts the chunks delivered, ``attempts`` the tries it took."""

    def __init__(self, resp: aiohttp.ClientResponse, decoder: sse.SSEDecoder, pending: list[str],
                 call: transport.Call, total_bytes: int) -> None:
        self._resp: aiohttp.ClientResponse | None = resp
        self._decoder = decoder
        self._pending = collections.deque(pending)
        self._call = call
        self._done = False
        self.request_id = call.request_id
        self.attempts = call.attempts
        self.events = 0
        self.bytes_received = total_bytes
        self.usage: dict[str, Any] | None = None

    def __aiter__(self) -> AsyncStream:
        return self

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop reading; an unfinished stream's connection is closed (the server stops generating)."""
        self._done = True
        if self._resp is not None:
            self._resp.close()
            self._resp = None

    def _fail(self, err: errors.ClientError) -> errors.ClientError:
        self._done = True
        if self._resp is not None:
            self._resp.close()
            self._resp = None
        call = self._call
        return err.finish(method=call.method, path=call.path, request_id=call.request_id, attempts=call.attempts,
                          gave_up="not_retryable")

    async def __anext__(self) -> dict[str, Any]:
        while True:
            if self._pending:
                return await self._event(self._pending.popleft())
            if self._done or self._resp is None:
                raise StopAsyncIteration
            await self._read()

    async def _event(self, data: str) -> dict[str, Any]:
        if data == "[DONE]":
            await self._finish()
            raise StopAsyncIteration
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise self._fail(errors.ProtocolError(f"stream event {self.events + 1} is not JSON: {data[:200]!r}")) from None
        if not isinstance(chunk, dict):
            raise self._fail(errors.ProtocolError(f"stream event {self.events + 1} is not a JSON object: {data[:200]!r}"))
        error = chunk.get("error")
        if error is not None and "choices" not in chunk:
            detail = error if isinstance(error, dict) else {"message": str(error)}
            raise self._fail(errors.StreamError("error_event", "the server sent an error event", events=self.events,
                                                error=detail))
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        self.events += 1
        return chunk

    async def _read(self) -> None:
        resp = self._resp
        assert resp is not None
        call = self._call
        limit = asyncio.timeout_at(call.deadline)
        try:
            async with limit:
                chunk = await resp.content.readany()
        except TimeoutError:
            if not limit.expired():
                raise
            raise self._fail(errors.RequestTimeout("total", call.timeouts.total_s or 0.0,
                                                   f"the stream had delivered {self.events} events")) from None
        except aiohttp.ClientError as exc:
            raise self._fail(errors.StreamError("disconnected", f"the connection broke ({exc})",
                                                events=self.events)) from exc
        if not chunk:
            raise self._fail(errors.StreamError("incomplete", "the stream ended without data: [DONE]",
                                                events=self.events))
        self.bytes_received += len(chunk)
        self._pending.extend(self._decoder.feed(chunk))

    async def _finish(self) -> None:
        """After [DONE]: read the end of the body (briefly) so the connection goes back to the pool."""
        self._done = True
        resp, self._resp = self._resp, None
        if resp is None:
            return
        try:
            async with asyncio.timeout(_DRAIN_S):
                while await resp.content.readany():
                    pass
        except (TimeoutError, aiohttp.ClientError):
            resp.close()
            return
        with contextlib.suppress(aiohttp.ClientError):
            resp.release()
