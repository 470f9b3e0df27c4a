"""Traffic reports to the scheduler (``RoutingService.ReportTraffic``): requests, tokens, errors and
TTFT per (model, client region, replica revision), every ``interval_s``. The autoscaler reads demand
from these (summed over revisions); a rollout reads the new revision's errors and requests.

``TrafficAccumulator`` is the in-process tally (a dict bump per request); ``TrafficReporter`` ships
a window and starts the next. A window that could not be sent is merged into the next one, so a
scheduler outage delays demand figures but does not lose them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import grpc

from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import routing_pb2_grpc
from meridian import waits
from router import scheduler_tls

log = logging.getLogger("meridian.router.traffic")
_TTFT_SAMPLES = 512


class _Tally:
    __slots__ = ("requests", "prompt_tokens", "completion_tokens", "errors", "ttft_ms")

    def __init__(self):
        self.requests = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.errors = 0
        self.ttft_ms: list[float] = []


class TrafficAccumulator:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.window_start = clock()
        self._tallies: dict[tuple[str, str, str], _Tally] = {}  # (model, client region, revision)
        self.in_flight: dict[tuple[str, str], int] = {}
        # Set when a report should go out now rather than at the next interval (a model woken from zero).
        self.urgent = asyncio.Event()

    def record(self, model: str, client_region: str, prompt_tokens: int, completion_tokens: int, error: bool,
               ttft_ms: float | None, revision: str = "") -> None:
        """One finished request; ``revision``: that of the replica that answered last ("" when none did)."""
        key = (model, client_region, revision)
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = _Tally()
        tally.requests += 1
        tally.prompt_tokens += prompt_tokens
        tally.completion_tokens += completion_tokens
        if error:
            tally.errors += 1
        if ttft_ms is not None and len(tally.ttft_ms) < _TTFT_SAMPLES:
            tally.ttft_ms.append(ttft_ms)

    def take(self, router_id: str, router_region: str) -> fm.TrafficReport:
        """The window so far as a report; starts a new window."""
        now = self.clock()
        samples = []
        # Requests still in flight (long streams, requests waiting for a first replica) are demand
        # too, even in a window where none of them finished. In-flight counts are per (model, client
        # region): they go with the first sample of the pair, so summing samples counts them once.
        pairs = {(m, r) for m, r, _ in self._tallies}
        keys = set(self._tallies) | {(m, r, "") for (m, r), n in self.in_flight.items()
                                     if n > 0 and (m, r) not in pairs}
        placed: set[tuple[str, str]] = set()
        for model, region, revision in sorted(keys):
            t = self._tallies.get((model, region, revision)) or _Tally()
            ttft = sorted(t.ttft_ms)
            p99 = ttft[min(len(ttft) - 1, int(len(ttft) * 0.99))] if ttft else 0.0
            in_flight = 0 if (model, region) in placed else self.in_flight.get((model, region), 0)
            placed.add((model, region))
            samples.append(fm.TrafficSample(model, region, t.requests, t.prompt_tokens, t.completion_tokens,
                                            t.errors, in_flight, p99, revision))
        report = fm.TrafficReport(router_id, router_region, self.window_start, now, tuple(samples))
        self._tallies = {}
        self.window_start = now
        return report

    def restore(self, report: fm.TrafficReport) -> None:
        """Merge an unsent report back so the next window carries it."""
        self.window_start = min(self.window_start, report.window_start)
        for s in report.samples:
            key = (s.model, s.client_region, s.revision)
            tally = self._tallies.get(key)
            if tally is None:
                tally = self._tallies[key] = _Tally()
            tally.requests += s.requests
            tally.prompt_tokens += s.prompt_tokens
            tally.completion_tokens += s.completion_tokens
            tally.errors += s.errors
            if s.ttft_p99_ms and len(tally.ttft_ms) < _TTFT_SAMPLES:
                tally.ttft_ms.append(s.ttft_p99_ms)


class TrafficReporter:
    def __init__(self, address: str, accumulator: TrafficAccumulator, *, router_id: str, router_region: str,
                 token: str = "", interval_s: float = 10.0, timeout_s: float = 5.0,
                 on_error: Callable[[str], None] | None = None, tls: scheduler_tls.ClientTls | None = None):
        self.address = address
        self.tls = tls
        self.accumulator = accumulator
        self.router_id = router_id
        self.router_region = router_region
        self.token = token
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.on_error = on_error
        self.reports_sent = 0

    async def send_once(self, stub) -> bool:
        report = self.accumulator.take(self.router_id, self.router_region)
        if not report.samples:
            return True
        try:
            await stub.ReportTraffic(wire.traffic_to_pb(report, self.token), timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            log.warning("event=traffic_report_failed scheduler=%s code=%s samples=%d", self.address,
                        exc.code().name, len(report.samples))
            self.accumulator.restore(report)
            if self.on_error is not None:
                self.on_error("traffic_report")
            return False
        self.reports_sent += 1
        return True

    async def run(self) -> None:
        """Report every ``interval_s`` forever (cancel to stop; the last window is sent on cancel).
        One channel, replaced when the TLS files were rotated (a channel keeps the credentials it
        was built with through its own reconnects)."""
        channel = scheduler_tls.channel(self.address, self.tls)
        generation = self.tls.generation if self.tls is not None else 0
        stub = routing_pb2_grpc.RoutingServiceStub(channel)
        try:
            while True:
                # Urgent, or the interval passed: report now.
                await waits.event_set(self.accumulator.urgent, self.interval_s)
                self.accumulator.urgent.clear()
                if self.tls is not None:
                    self.tls.reload_if_changed()
                    if self.tls.generation != generation:
                        await channel.close(grace=None)
                        channel = scheduler_tls.channel(self.address, self.tls)
                        generation = self.tls.generation
                        stub = routing_pb2_grpc.RoutingServiceStub(channel)
                await self.send_once(stub)
        except asyncio.CancelledError:
            await asyncio.shield(self.send_once(stub))
            raise
        finally:
            await channel.close(grace=None)
