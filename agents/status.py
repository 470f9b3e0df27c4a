"""The agent's HTTP side door: ``/metrics`` (Prometheus text), ``/status`` (JSON: stream, cloud
and replica state, including a failing cloud authentication) and ``/healthz``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import prometheus_client as prom
from aiohttp import web

from agents import metrics as metrics_mod

log = logging.getLogger(__name__)


class StatusServer:
    def __init__(self, metrics: metrics_mod.AgentMetrics, status: Callable[[], dict], *, host: str = "127.0.0.1",
                 port: int = 0):
        self._metrics = metrics
        self._status = status
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/metrics", self._get_metrics)
        app.router.add_get("/status", self._get_status)
        app.router.add_get("/healthz", self._get_health)
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

    async def _get_health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")
