"""A real aiohttp server on 127.0.0.1 that fails in scripted ways, for the client's retry and
timeout tests; and sockets that refuse connections or never complete them.

``FaultServer(script)``: request i (0-based, over the whole server) gets ``script[i]`` (the last
entry repeats). Each entry is a ``Step``: ``ok`` (an OpenAI-shaped answer, or an SSE stream when
the request asks for one), ``status`` (an error status with an OpenAI error body and optional
headers), ``hang_head`` (never answers), ``head_then_hang`` (SSE head sent, no event), ``hang_mid``
(two events, then nothing), ``break_mid`` (one event and part of the next, then the connection is
aborted), ``break_first`` (part of the first event, then aborted),
``close`` (the connection is closed before any byte of a response), ``error_event`` (the router's
mid-stream error event, no [DONE]); ``delay_s`` waits first. The server records what the client
sent, which connection (client port) carried it, and which handlers were cancelled."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time

import orjson
from aiohttp import web


@dataclasses.dataclass(frozen=True)
class Step:
    action: str = "ok"
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0
    tokens: int = 4


@dataclasses.dataclass
class Seen:
    """One request as the server received it."""

    index: int
    path: str
    headers: dict[str, str]
    body: dict | None
    client_port: int
    at: float
    cancelled: bool = False


def _chunk(i: int, delta: dict, finish: str | None = None) -> bytes:
    return b"data: " + orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + b"\n\n"


def chat_answer(tokens: int, index: int) -> dict:
    return {"id": f"c{index}", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": " ".join(["t"] * tokens)},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": 3 + tokens},
            "served_by_request": index}


class FaultServer:
    def __init__(self, script: list[Step]) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self.forever = asyncio.Event()  # hangs wait on this (set at stop)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, sock: socket.socket | None = None) -> FaultServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site: web.BaseSite = (web.SockSite(self._runner, sock) if sock is not None
                              else web.TCPSite(self._runner, "127.0.0.1", 0))
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        self.forever.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def connections(self) -> set[int]:
        return {s.client_port for s in self.seen}

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw) if raw else None
        peer = request.transport.get_extra_info("peername") if request.transport else None
        seen = Seen(len(self.seen), request.path, {k.lower(): v for k, v in request.headers.items()}, body, peer[1] if peer else 0, time.monotonic())
        self.seen.append(seen)
        step = self.script[min(seen.index, len(self.script) - 1)]
        try:
            if step.delay_s:
                await asyncio.sleep(step.delay_s)
            return await self._act(request, step, seen, body or {})
        except asyncio.CancelledError:
            seen.cancelled = True
            raise

    async def _act(self, request: web.Request, step: Step, seen: Seen, body: dict) -> web.StreamResponse:
        action = step.action
        if action == "hang_head":
            await self.forever.wait()
            return web.Response(status=503)  # the server is stopping; nobody reads this
        if action == "close":
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=503)  # never sent: the connection is closed
        if action == "status":
            message = f"scripted {step.status}"
            return web.json_response({"error": {"message": message, "type": "scripted", "param": None,
                                                "code": f"code_{step.status}"}},
                                     status=step.status, headers=dict(step.headers))
        if not body.get("stream"):
            if request.path == "/v1/models":
                return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})
            return web.json_response(chat_answer(step.tokens, seen.index))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        if action == "head_then_hang":
            await self.forever.wait()
            return resp
        if action == "break_first":
            await resp.write(b'data: {"id": "c1", "obj')
            await asyncio.sleep(0.05)
            assert request.transport is not None
            request.transport.abort()
            return resp
        await resp.write(_chunk(0, {"role": "assistant", "content": ""}))
        if action == "break_mid":
            await resp.write(b'data: {"id": "c1", "obj')
            await asyncio.sleep(0.05)
            assert request.transport is not None
            request.transport.abort()
            return resp
        await resp.write(_chunk(1, {"content": "t0 "}))
        if action == "hang_mid":
            await self.forever.wait()
            return resp
        if action == "error_event":
            await resp.write(b'data: {"error": {"message": "replica stream broke: reset", "type": "server_error", '
                             b'"param": null, "code": "upstream_error"}}\n\n')
            await resp.write_eof()
            return resp
        for i in range(1, step.tokens):
            await resp.write(_chunk(i + 1, {"content": f"t{i} "}))
        await resp.write(_chunk(99, {}, "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(b"data: " + orjson.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": [],
                                                       "usage": {"prompt_tokens": 3, "completion_tokens": step.tokens,
                                                                 "total_tokens": 3 + step.tokens}}) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


def refusing_socket() -> socket.socket:
    """A socket bound to a free loopback port and not listening: connections to it are refused
    until ``listen()`` (then hand it to ``FaultServer.start(sock=...)``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class Blackhole:
    """A listening socket whose accept queue is full and never drained: the kernel drops further
    SYNs, so a connect to it hangs until the client's own connect timeout (loopback only)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self._fillers: list[socket.socket] = []
        # listen(0) queues one connection (Linux allows backlog + 1); a few more to be sure.
        for _ in range(4):
            filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            filler.setblocking(False)
            try:
                filler.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self._fillers.append(filler)
        time.sleep(0.05)

    def close(self) -> None:
        for s in self._fillers:
            s.close()
        self.sock.close()
