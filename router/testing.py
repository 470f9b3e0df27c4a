"""Test doubles shipped as a supported module: a fake SGLang replica and a fake scheduler.

- ``FakeReplica``: an aiohttp server speaking SGLang's OpenAI-compatible API shapes (chat,
  completions, embeddings, /generate, /health, /v1/models); streams SSE exactly as SGLang does (role
  chunk, one delta per token, a separate finish chunk, a usage chunk when asked, ``data: [DONE]``).
  Knobs: per-token delay, failure status, unhealthy /health, a gate that holds the stream before its
  last chunk; it records request ids and client disconnects.
- ``FakeScheduler``: a grpc.aio ``RoutingService`` on loopback streaming tables the test publishes
  and keeping the traffic reports it receives.
- ``table`` / ``replica``: build routing tables tersely.

Run a replica standalone (for benches and crash tests): ``python -m router.testing --port N``."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time

import grpc
import orjson
import uvloop
from aiohttp import web

from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import routing_pb2, routing_pb2_grpc


def replica(replica_id: str, port: int, region: str = "us-east-1", *, cloud: fm.Cloud = fm.Cloud.AWS,
            state: fm.ReplicaState = fm.ReplicaState.READY, weight: float = 1.0, queued: int = 0,
            gpu_type: str = "H100", host: str = "127.0.0.1", ttft_p50_ms: float = 0.0,
            scheme: str = "http") -> fm.RouteReplica:
    load = fm.ReplicaLoad(queued_requests=queued, ttft=fm.LatencyPercentiles(p50_ms=ttft_p50_ms))
    return fm.RouteReplica(replica_id=replica_id, endpoint=f"{scheme}://{host}:{port}", cloud=cloud, region=region,
                           state=state, weight=weight, load=load, gpu_type=gpu_type)


def table(version: int, models: dict[str, list[fm.RouteReplica]], policy: str = "",
          is_embedding: bool = False, ttft_p99_ms: float = 0.0, tpot_p99_ms: float = 0.0) -> fm.RoutingTable:
    return fm.RoutingTable(version=version, generated_at=time.time(), scheduler_id="fake", models=tuple(
        fm.ModelRoutes(served_model_name=name, deployment=name, replicas=tuple(reps), policy=policy,
                       is_embedding=is_embedding, ttft_p99_ms=ttft_p99_ms, tpot_p99_ms=tpot_p99_ms)
        for name, reps in models.items()))


def _sse(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class FakeReplica:
    """An SGLang-shaped OpenAI server on 127.0.0.1 (run it inside the test's event loop)."""

    def __init__(self, name: str = "replica", *, model: str = "test-model", tokens: int = 8,
                 token_delay_s: float = 0.0, port: int = 0, ssl_context=None):
        self.name = name
        self.ssl_context = ssl_context  # an ssl.SSLContext: serve HTTPS
        self.model = model
        self.tokens = tokens
        self.token_delay_s = token_delay_s
        self.port = port
        self.fail_status = 0  # answer every inference request with this status when set
        self.healthy = True
        self.delay_s = 0.0  # before answering (non-streaming) or before the first chunk
        self.hold_last = asyncio.Event()  # streaming: the last delta waits for this when `gate` is on
        self.gate = False
        self.requests = 0
        self.request_ids: list[str] = []
        self.disconnects = 0
        self.completed = 0
        self.last_body: dict | None = None
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._chat)
        app.router.add_post("/generate", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        return app

    async def start(self) -> FakeReplica:
        self._runner = web.AppRunner(self._app(), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self.ssl_context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeReplica:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.healthy else 503)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 0, "owned_by": "sglang", "root": self.model}]})

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests += 1
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return web.json_response({"object": "list", "model": body.get("model", self.model), "data": [
            {"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3]} for i in range(len(inputs))],
            "usage": {"prompt_tokens": 3 * len(inputs), "total_tokens": 3 * len(inputs)}})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests += 1
        self.request_ids.append(request.headers.get("X-Request-Id", ""))
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return web.json_response({"object": "error", "message": "bad json", "type": "Bad Request",
                                      "param": None, "code": 400}, status=400)
        self.last_body = body
        if self.fail_status:
            return web.json_response({"object": "error", "message": f"{self.name} failing", "type": "Error",
                                      "param": None, "code": self.fail_status}, status=self.fail_status)
        if body.get("stream"):
            return await self._stream(request, body)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            n = min(int(body.get("max_tokens") or self.tokens), self.tokens)
            text = " ".join(f"t{i}" for i in range(n))
            self.completed += 1
            return web.json_response({
                "id": f"{self.name}-{next(self._ids)}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", self.model),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "length" if n == body.get("max_tokens") else "stop"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n},
                "replica": self.name})
        except asyncio.CancelledError:
            self.disconnects += 1
            raise

    async def _stream(self, request: web.Request, body: dict) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        cid = f"{self.name}-{next(self._ids)}"
        model = body.get("model", self.model)
        n = min(int(body.get("max_tokens") or self.tokens), self.tokens)
        base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                         "finish_reason": None}]}))
            for i in range(n):
                if self.gate and i == n - 1:
                    await self.hold_last.wait()
                elif self.token_delay_s:
                    await asyncio.sleep(self.token_delay_s)
                await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {"content": f"t{i} "},
                                                             "finish_reason": None}]}))
            await resp.write(_sse({**base, "choices": [{"index": 0, "delta": {},
                                                         "finish_reason": "length" if n == body.get("max_tokens") else "stop"}]}))
            if (body.get("stream_options") or {}).get("include_usage"):
                await resp.write(_sse({**base, "choices": [], "usage": {
                    "prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n}}))
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            self.completed += 1
        except (asyncio.CancelledError, ConnectionError):
            self.disconnects += 1
            raise
        return resp


class _Servicer(routing_pb2_grpc.RoutingServiceServicer):
    def __init__(self, owner: FakeScheduler):
        self.owner = owner

    async def WatchRoutes(self, request, context):
        self.owner.watch_requests.append(request)
        queue: asyncio.Queue = asyncio.Queue()
        self.owner._watchers.append(queue)
        try:
            if self.owner.current is not None:
                yield wire.table_to_pb(self.owner.current)
            while True:
                item = await queue.get()
                if item is None:
                    return
                yield wire.table_to_pb(item)
        finally:
            self.owner._watchers.remove(queue)

    async def ReportTraffic(self, request, context):
        report = wire.traffic_from_pb(request)
        self.owner.reports.append(report)
        return routing_pb2.TrafficReportAck(accepted_samples=len(report.samples))


class FakeScheduler:
    """A RoutingService on 127.0.0.1 that streams the tables a test publishes."""

    def __init__(self, port: int = 0):
        self.port = port
        self.current: fm.RoutingTable | None = None
        self.reports: list[fm.TrafficReport] = []
        self.watch_requests: list = []
        self._watchers: list[asyncio.Queue] = []
        self._server: grpc.aio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def watchers(self) -> int:
        return len(self._watchers)

    async def start(self) -> FakeScheduler:
        self._server = grpc.aio.server()
        routing_pb2_grpc.add_RoutingServiceServicer_to_server(_Servicer(self), self._server)
        self.port = self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self._server.start()
        return self

    def publish(self, routing_table: fm.RoutingTable) -> None:
        self.current = routing_table
        for queue in self._watchers:
            queue.put_nowait(routing_table)

    async def stop(self) -> None:
        for queue in self._watchers:
            queue.put_nowait(None)
        if self._server is not None:
            await self._server.stop(grace=0.5)
            self._server = None

    async def __aenter__(self) -> FakeScheduler:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m router.testing", description="Run a fake SGLang replica.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default="replica")
    parser.add_argument("--model", default="test-model")
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args(argv)

    async def serve() -> None:
        fake = FakeReplica(args.name, model=args.model, tokens=args.tokens, token_delay_s=args.token_delay_ms / 1000,
                           port=args.port)
        fake.delay_s = args.delay_ms / 1000
        await fake.start()
        await asyncio.Event().wait()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
