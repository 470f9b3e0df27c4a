"""The agent's HTTP side door: ``/metrics`` (Prometheus text), ``/status`` (JSON: stream, cloud
and replica state, including a failing cloud authentication) and ``/healthz``.

With the ``sim`` provider it also takes faults on demand (the demo's spot preemption wave, chaos
tests): ``POST /sim/preempt`` with an optional JSON body ``{"pool_id": ..., "notice_s": ...}`` serves
an interruption notice to every running spot node (of one pool, when named)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import prometheus_client as prom
from aiohttp import web

from agents import metrics as metrics_mod
from agents.providers.errors import CloudError

log = logging.getLogger(__name__)


class StatusServer:
    def __init__(self, metrics: metrics_mod.AgentMetrics, status: Callable[[], dict], *, host: str = "127.0.0.1",
                 port: int = 0, preempt: Callable[[str | None, float | None], list[dict]] | None = None):
        self._metrics = metrics
        self._status = status
        self._preempt = preempt
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/metrics", self._get_metrics)
        app.router.add_get("/status", self._get_status)
        app.router.add_get("/healthz", self._get_health)
        if self._preempt is not None:
            app.router.add_post("/sim/preempt", self._post_preempt)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        server = site._server  # aiohttp exposes the bound sockets only here
        self.port = server.sockets[0].getsockname()[1] if server and server.sockets else self._port
        log.info("status server listening host=%s port=%d", self._host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _get_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self._metrics.render(), headers={"Content-Type": prom.CONTENT_TYPE_LATEST})

    async def _get_status(self, request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(self._status(), indent=2, default=str), content_type="application/json")

    async def _post_preempt(self, request: web.Request) -> web.Response:
        assert self._preempt is not None
        try:
            body = await request.json() if request.can_read_body else {}
        except json.JSONDecodeError:
            return web.json_response({"error": "body must be JSON: {\"pool_id\": ..., \"notice_s\": ...}"}, status=400)
        pool_id = body.get("pool_id") if isinstance(body, dict) else None
        notice_s = body.get("notice_s") if isinstance(body, dict) else None
        if notice_s is not None and (not isinstance(notice_s, (int, float)) or notice_s < 0):
            return web.json_response({"error": f"notice_s must be a number >= 0, got {notice_s!r}"}, status=400)
        try:
            notices = self._preempt(pool_id, notice_s)
        except CloudError as exc:
            return web.json_response({"error": str(exc)}, status=404)
        log.warning("event=sim_preempt pool=%s notices=%d", pool_id or "*spot*", len(notices))
        return web.json_response({"notices": notices})

    async def _get_health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")
