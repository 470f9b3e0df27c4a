"""``RoutingService``: versioned routing tables to routers (``WatchRoutes``) and their traffic reports
back (``ReportTraffic``), both authenticated by a router token and refused (FAILED_PRECONDITION) for a
router version outside the skew rule (``meridian.compat``).

``RouteHub`` holds the latest table and wakes every watcher when a newer one is published. Versions
come from the shared state store, so they only increase, even across leader changes; every node
(a standby too) serves watchers from the table kept in the store."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import grpc

from meridian import compat, limits
from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import routing_pb2, routing_pb2_grpc
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler.server import auth

log = logging.getLogger("meridian.scheduler.routing")


class RouteHub:
    def __init__(self) -> None:
        self.table: fm.RoutingTable | None = None
        self._changed = asyncio.Event()

    @property
    def version(self) -> int:
        return self.table.version if self.table is not None else 0

    def publish(self, table: fm.RoutingTable) -> bool:
        """Make ``table`` current if it is newer than the one held; wakes watchers. False if stale."""
        if self.table is not None and table.version <= self.table.version:
            return False
        self.table = table
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        return True

    async def newer_than(self, version: int) -> fm.RoutingTable:
        """Wait for a table whose version differs from ``version`` (normally: is higher)."""
        while self.table is None or self.table.version == version:
            await self._changed.wait()
        return self.table


class TrafficSink(Protocol):
    async def record_traffic(self, report: fm.TrafficReport, now_s: float) -> int: ...


class RoutingServicer(routing_pb2_grpc.RoutingServiceServicer):
    def __init__(self, *, hub: RouteHub, tokens: auth.TokenBook, traffic: TrafficSink,
                 metrics: metrics_mod.SchedulerMetrics, clock: clock_mod.Clock):
        self._hub = hub
        self._tokens = tokens
        self._traffic = traffic
        self._metrics = metrics
        self._clock = clock

    async def _authenticate(self, token: str, router_id: str, context: grpc.aio.ServicerContext) -> None:
        verdict = self._tokens.verify_router(token)
        if not verdict.ok:
            self._metrics.auth_failures.labels("router", verdict.reason).inc()
            log.warning("event=router_refused reason=%s router=%s peer=%s detail=%r", verdict.reason,
                        router_id or "-", context.peer(), verdict.detail)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"router credentials refused ({verdict.reason})")

    async def _check_version(self, version: str, router_id: str, context: grpc.aio.ServicerContext) -> None:
        """Refuse a router outside the skew rule; an empty version is a router from before the field."""
        skew = compat.refusal(version or compat.LEGACY_ROUTER_VERSION, peer="router")
        if skew is not None:
            self._metrics.version_refusals.labels("router").inc()
            log.warning("event=router_refused reason=version_skew router=%s peer=%s router_version=%s detail=%r",
                        router_id or "-", context.peer(), version or "-", skew)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, skew)

    async def WatchRoutes(self, request: routing_pb2.WatchRoutesRequest, context):  # noqa: N802 (gRPC name)
        await self._authenticate(request.token, request.router_id, context)
        await self._check_version(request.router_version, request.router_id, context)
        log.info("event=route_watch_start router=%s region=%s known_version=%d", request.router_id,
                 request.router_region, request.known_version)
        self._metrics.route_watchers.inc()
        try:
            known = request.known_version
            if self._hub.table is not None:
                # The whole table on connect, even to a router that holds this version (restarted
                # from its saved copy): it then knows the stream is live and its table current.
                yield wire.table_to_pb(self._hub.table)
                known = self._hub.table.version
            while True:
                table = await self._hub.newer_than(known)
                yield wire.table_to_pb(table)
                known = table.version
        finally:
            self._metrics.route_watchers.dec()

    async def ReportTraffic(self, request: routing_pb2.TrafficReport, context):  # noqa: N802 (gRPC name)
        await self._authenticate(request.token, request.router_id, context)
        await self._check_version(request.router_version, request.router_id, context)
        if len(request.samples) > limits.MAX_TRAFFIC_SAMPLES_PER_REPORT:
            self._metrics.limit_refusals.labels("router", "traffic_samples").inc()
            log.warning("event=traffic_refused router=%s samples=%d limit=%d", request.router_id, len(request.samples),
                        limits.MAX_TRAFFIC_SAMPLES_PER_REPORT)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"TrafficReport: {len(request.samples)} samples in one report; the scheduler accepts "
                                f"at most {limits.MAX_TRAFFIC_SAMPLES_PER_REPORT} (send several reports)")
        try:
            report = wire.traffic_from_pb(request)
        except wire.WireError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"TrafficReport: {exc}")
        good = tuple(s for s in report.samples if s.model and s.client_region)
        if len(good) != len(report.samples):
            log.warning("event=traffic_samples_skipped router=%s skipped=%d reason='model and client_region needed'",
                        report.router_id, len(report.samples) - len(good))
        if report.window_end <= report.window_start and good:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "window_end must be after window_start")
        accepted = await self._traffic.record_traffic(fm.TrafficReport(
            report.router_id, report.router_region, report.window_start, report.window_end, good), self._clock.now())
        self._metrics.traffic_samples.inc(accepted)
        return routing_pb2.TrafficReportAck(accepted_samples=accepted)
