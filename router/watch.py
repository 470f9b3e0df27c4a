"""The routing table feed: the scheduler's ``RoutingService.WatchRoutes`` stream, with reconnects.

On start the last-known-good table (if any) is applied so the router serves at once; then every
table the scheduler streams replaces it and is saved as the new last-known-good. A broken stream is
retried with capped exponential backoff and jitter (``meridian.backoff``); the current table keeps serving meanwhile."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

import grpc

from meridian import backoff
from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import routing_pb2, routing_pb2_grpc
from router import scheduler_tls

log = logging.getLogger("meridian.router.watch")


class RouteWatcher:
    def __init__(self, address: str, *, router_id: str, router_region: str, token: str,
                 apply: Callable[[fm.RoutingTable, str], None], current_version: Callable[[], int],
                 store=None, on_connected: Callable[[bool], None] | None = None,
                 on_error: Callable[[str], None] | None = None, backoff_initial_s: float = 0.5,
                 backoff_max_s: float = 30.0, rng: random.Random | None = None,
                 tls: scheduler_tls.ClientTls | None = None):
        self.address = address
        self.tls = tls
        self.router_id = router_id
        self.router_region = router_region
        self.token = token
        self.apply = apply
        self.current_version = current_version
        self.store = store
        self.on_connected = on_connected
        self.on_error = on_error
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.rng = rng or random.Random()
        self.tables_received = 0

    async def load_last_known_good(self) -> bool:
        """Apply the stored table, if any; True if one was applied."""
        if self.store is None:
            return False
        try:
            table = await self.store.load()
        except Exception as exc:  # a corrupt or unreachable store must not stop the router starting
            log.error("event=lkg_load_failed store=%s error=%r", self.store.describe(), exc)
            self._error("lkg_store")
            return False
        if table is None:
            return False
        self.apply(table, "lkg")
        log.info("event=lkg_loaded store=%s version=%d", self.store.describe(), table.version)
        return True

    def _error(self, component: str) -> None:
        if self.on_error is not None:
            self.on_error(component)

    def _connected(self, up: bool) -> None:
        if self.on_connected is not None:
            self.on_connected(up)

    async def _save(self, table: fm.RoutingTable) -> None:
        if self.store is None:
            return
        try:
            await self.store.save(table)
        except Exception as exc:  # serving goes on; only the restart fallback is stale
            log.error("event=lkg_save_failed store=%s error=%r", self.store.describe(), exc)
            self._error("lkg_store")

    async def run(self) -> None:
        """Watch forever (cancel the task to stop)."""
        # Half to all of a doubling ceiling (meridian.backoff): many routers that lost the scheduler
        # together come back spread out, never above backoff_max_s.
        retry = backoff.Backoff(self.backoff_initial_s, max(self.backoff_max_s, self.backoff_initial_s),
                                min_fraction=0.5, rng=self.rng)
        while True:
            try:
                async with scheduler_tls.channel(self.address, self.tls) as channel:
                    stub = routing_pb2_grpc.RoutingServiceStub(channel)
                    request = routing_pb2.WatchRoutesRequest(
                        router_id=self.router_id, router_region=self.router_region,
                        known_version=self.current_version(), token=self.token)
                    async for message in stub.WatchRoutes(request):
                        if self.tables_received == 0 or retry.attempts:
                            log.info("event=route_stream_up scheduler=%s", self.address)
                        self._connected(True)
                        retry.reset()
                        try:
                            table = wire.table_from_pb(message)
                        except wire.WireError as exc:
                            log.error("event=bad_routing_table version=%d error=%s", message.version, exc)
                            self._error("route_stream")
                            continue
                        self.tables_received += 1
                        self.apply(table, "watch")
                        await self._save(table)
                log.warning("event=route_stream_ended scheduler=%s", self.address)
            except grpc.aio.AioRpcError as exc:
                log.warning("event=route_stream_error scheduler=%s code=%s detail=%s retry_in_s<=%.1f",
                            self.address, exc.code().name, exc.details(), retry.ceiling_s())
                self._error("route_stream")
            self._connected(False)
            await asyncio.sleep(retry.next_delay_s())
