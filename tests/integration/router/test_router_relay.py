"""The SSE relay over real sockets: a client closing right after ``[DONE]`` logs no error, and any
chunking of a replica's stream reaches the client byte for byte with its usage counted (fuzzed)."""

from __future__ import annotations

import asyncio
import logging

import hypothesis
import orjson
from hypothesis import strategies as st

from router import testing

CHAT = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def sse_stream(tokens: int, prompt_tokens: int) -> bytes:
    events = [{"choices": [{"delta": {"role": "assistant", "content": ""}}]}]
    events += [{"choices": [{"delta": {"content": f" data: {i}"}}]} for i in range(tokens)]
    events.append({"choices": [{"delta": {}, "finish_reason": "length"}]})
    events.append({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens,
                                            "total_tokens": prompt_tokens + tokens}})
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


class ChunkingReplica:
    """Answers every request with ``script``'s chunks, each written (and flushed) on its own after an
    optional pause; ``before_end`` (an Event) holds the final chunk-terminator."""

    def __init__(self):
        self.chunks: list[bytes] = []
        self.before_end: asyncio.Event | None = None
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> ChunkingReplica:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                writer.write(HEAD)
                for chunk in self.chunks:
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()
                if self.before_end is not None:
                    await self.before_end.wait()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def _post_raw(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(CHAT), CHAT))
    return reader, writer


async def test_a_client_closing_right_after_done_logs_no_error(make_router, caplog):
    """Clients (the openai SDK among them) close as soon as they read ``[DONE]``, often before the
    router wrote the end of the chunked response: no ERROR is logged, and the request counts as
    answered (200), not as a disconnect."""
    rep = await ChunkingReplica().start()
    try:
        rep.chunks = [sse_stream(2, 5)]
        router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
        caplog.set_level(logging.DEBUG)
        for _ in range(20):
            rep.before_end = asyncio.Event()
            reader, writer = await _post_raw(router.port)
            seen = b""
            while b"[DONE]" not in seen:
                seen += await reader.read(65536)
            # The replica's end of stream arrives as the client's close does (the race clients win).
            rep.before_end.set()
            writer.close()
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
    finally:
        await rep.stop()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors][:3]
    codes = {labels[-1]: n for labels, n in router.metrics.requests.items()}
    assert codes == {200: 20} and router.metrics.disconnects["m"] == 0, codes


@hypothesis.settings(max_examples=25, deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(tokens=st.integers(0, 30), prompt=st.integers(1, 5000), data=st.data())
async def test_any_chunking_is_relayed_byte_for_byte_with_its_usage(make_router, tokens, prompt, data):
    """Split anywhere (a ``data:`` line across chunks, the usage event in pieces), the stream reaches
    the client unchanged and the router counts the usage of its last event."""
    body = sse_stream(tokens, prompt)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=40)))
    rep = await ChunkingReplica().start()
    try:
        rep.chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
        router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
        reader, writer = await _post_raw(router.port)
        raw = b""
        while not raw.endswith(b"0\r\n\r\n"):
            piece = await asyncio.wait_for(reader.read(65536), 10)
            assert piece, raw[-200:]
            raw += piece
        writer.close()
        head, _, chunked = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        relayed = b""
        while True:
            size_line, _, rest = chunked.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            relayed += rest[:size]
            chunked = rest[size + 2:]
        assert relayed == body
        await asyncio.sleep(0.05)  # the handler's accounting runs as the response ends
        (sample,) = router.traffic.take("r", "").samples
        assert (sample.requests, sample.prompt_tokens, sample.completion_tokens) == (1, prompt, tokens)
    finally:
        await rep.stop()
