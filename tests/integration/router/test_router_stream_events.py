"""The router relays whole SSE events: a replica stream that breaks, or a deadline that falls, in the
middle of an event ends with an error event the official OpenAI SDK reads as an error (it used to
land inside the half-sent event and read as bad JSON), and an event split across the replica's
chunks still reaches the client whole."""

from __future__ import annotations

import asyncio
import contextlib

import openai
import orjson
import pytest

from router import testing


def _event(content: str) -> bytes:
    return b"data: " + orjson.dumps({
        "id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}) + b"\n\n"


class _RawReplica:
    """An HTTP/1.1 server on 127.0.0.1 that answers one chat stream with the chunks it is given (each
    one HTTP chunk), then ends as ``ending`` says: "abort" (connection reset), "stall" (never
    answers more) or "finish" ([DONE] and the end of the body)."""

    def __init__(self, chunks: list[bytes], ending: str):
        self.chunks, self.ending = chunks, ending
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in self.chunks:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.05)
        if self.ending == "abort":
            writer.transport.abort()
        elif self.ending == "stall":
            await asyncio.sleep(30)
        else:
            done = b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            await writer.drain()
            writer.close()

    async def __aenter__(self) -> _RawReplica:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.server.wait_closed(), 1)


async def _read(router, headers: dict | None = None) -> tuple[list[str], BaseException | None]:
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{router.port}/v1", api_key="x", max_retries=0,
                                timeout=20)
    contents: list[str] = []
    error: BaseException | None = None
    try:
        stream = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                      stream=True, extra_headers=headers or {})
        async for chunk in stream:
            contents.append(chunk.choices[0].delta.content)
    except Exception as exc:  # noqa: BLE001 - the test asserts on the class
        error = exc
    finally:
        await client.close()
    return contents, error


@pytest.mark.parametrize("ending, headers, code", [
    ("abort", None, "upstream_error"),
    ("stall", {"x-meridian-timeout-s": "1.0"}, "deadline_exceeded"),
])
async def test_a_stream_cut_inside_an_event_ends_with_an_error_the_sdk_raises(make_router, ending, headers, code):
    """Three whole events, then 30 bytes of a fourth, then the replica dies (or the request's deadline
    falls): the SDK yields the three answers and raises openai.APIError naming the cause, not a
    JSONDecodeError from the half event glued to the error event."""
    chunks = [_event(f"t{i}") for i in range(3)] + [_event("partial")[:30]]
    async with _RawReplica(chunks, ending) as rep:
        router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
        contents, error = await _read(router, headers)
    assert contents == ["t0", "t1", "t2"]
    assert isinstance(error, openai.APIError), repr(error)
    assert code in str(error.body if error.body is not None else error)


async def test_an_event_split_across_replica_chunks_reaches_the_client_whole(make_router):
    """An event the replica sends in three pieces (one cut inside its JSON, one right after
    ``data:``) is relayed once complete: the SDK reads every answer."""
    whole = _event("second")
    chunks = [_event("first") + whole[:7], whole[7:20], whole[20:] + _event("third")[:5], _event("third")[5:]]
    async with _RawReplica(chunks, "finish") as rep:
        router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
        contents, error = await _read(router)
    assert error is None
    assert contents == ["first", "second", "third"]
