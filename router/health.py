"""Replica health: passive outlier ejection (Envoy's outlier detection), active checks, panic mode.

- Outlier ejection: ``consecutive_failures`` upstream failures in a row (5xx, connect failures,
  resets) eject a replica for ``base_ejection_s x times ejected`` (capped at ``max_ejection_s``);
  it returns by itself when that time is over. At most ``max_ejected_percent`` of a model's
  replicas are ejected at once (always at least one may be). The ejection count falls back to 0
  after ``max_ejection_s`` without an ejection.
- Active checks: ``GET /health`` every ``interval_s``; ``unhealthy_threshold`` failures in a row mark
  a replica down, ``healthy_threshold`` successes mark it up again.
- Panic mode: when fewer than ``panic_threshold_percent`` of a model's routable replicas are
  available, health is ignored for that model and all routable replicas are candidates (Envoy's
  healthy_panic_threshold): better some errors than sending the whole load to a few survivors.

``OutlierDetector`` and ``candidates`` are decision code on endpoint state with the time passed in;
``ActiveChecker`` is the executor that performs the HTTP checks."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable

import aiohttp

from router import endpoints

log = logging.getLogger("meridian.router.health")


@dataclasses.dataclass(frozen=True)
class OutlierSettings:
    consecutive_failures: int = 5
    base_ejection_s: float = 30.0
    max_ejection_s: float = 300.0
    max_ejected_percent: float = 50.0
    panic_threshold_percent: float = 50.0


class OutlierDetector:
    """Counts consecutive failures per replica and ejects outliers. ``on_eject`` is told of each
    ejection (metrics, logs)."""

    def __init__(self, settings: OutlierSettings,
                 on_eject: Callable[[endpoints.Endpoint, float], None] | None = None):
        self.settings = settings
        self.on_eject = on_eject

    def on_success(self, e: endpoints.Endpoint, now: float) -> None:
        e.consecutive_failures = 0
        if e.ejections and now - e.last_ejected_at > self.settings.max_ejection_s:
            e.ejections = 0

    def on_failure(self, e: endpoints.Endpoint, peers: Iterable[endpoints.Endpoint], now: float) -> bool:
        """Record a failure of ``e`` (one of ``peers``, its model's replicas); True if it got ejected."""
        e.failures += 1
        e.consecutive_failures += 1
        s = self.settings
        if e.consecutive_failures < s.consecutive_failures or e.ejected_until > now:
            return False
        peers = list(peers)
        ejected = sum(1 for p in peers if p.ejected_until > now)
        allowed = max(1, int(len(peers) * s.max_ejected_percent / 100.0))
        if ejected >= allowed:
            return False
        e.ejections += 1
        duration_s = min(s.base_ejection_s * e.ejections, s.max_ejection_s)
        e.ejected_until = now + duration_s
        e.last_ejected_at = now
        e.consecutive_failures = 0
        log.warning("event=replica_ejected model=%s replica=%s endpoint=%s ejections=%d duration_s=%.1f",
                    e.model, e.replica_id, e.url, e.ejections, duration_s)
        if self.on_eject is not None:
            self.on_eject(e, duration_s)
        return True


def candidates(routable: list[endpoints.Endpoint], now: float, panic_threshold_percent: float,
               exclude: tuple[endpoints.Endpoint, ...] = ()) -> tuple[list[endpoints.Endpoint], bool]:
    """The replicas a new request may go to, and whether the model is in panic mode.

    ``routable`` are the model's READY replicas with a traffic share; ``exclude`` those already tried
    for this request (a retry never goes back to a replica that failed it)."""
    available = [e for e in routable if e.active_up and e.ejected_until <= now]
    panic = len(available) * 100.0 < panic_threshold_percent * len(routable)
    pool = routable if panic else available
    if exclude:
        pool = [e for e in pool if e not in exclude]
        if not pool and not panic:
            # Everything healthy was tried: a retry may still go to an unhealthy-marked replica.
            pool = [e for e in routable if e not in exclude]
    return pool, panic


def within_reach(pool: list[endpoints.Endpoint], client_region: str, max_rtt_ms: float,
                 rtt_ms: Callable[[str, str], float]) -> list[endpoints.Endpoint]:
    """The replicas of ``pool`` within the deployment's ``max_rtt_ms`` of the client, or the whole
    pool when none is (or no limit or no client region is known): the SLA the solver placed
    replicas for is kept while it can be, and never turns into a refusal."""
    if max_rtt_ms <= 0 or not client_region:
        return pool
    near = [e for e in pool if rtt_ms(client_region, e.region) <= max_rtt_ms]
    return near or pool


def elsewhere(pool: list[endpoints.Endpoint], tried: tuple[endpoints.Endpoint, ...]) -> list[endpoints.Endpoint]:
    """For a retry: the replicas of ``pool`` outside the regions of those already tried, or the
    whole pool when there are none. When a region dies, every replica in it fails the same way
    until each is ejected; a retry that stays there (the nearest, by the latency score) fails too.
    A retry also leaves the SLA's max_rtt_ms reach if it must: failing over beats failing."""
    failed = {e.region for e in tried}
    away = [e for e in pool if e.region not in failed]
    return away or pool


@dataclasses.dataclass(frozen=True)
class ActiveSettings:
    interval_s: float = 5.0
    timeout_s: float = 5.0
    unhealthy_threshold: int = 3
    healthy_threshold: int = 2
    path: str = "/health"


class ActiveChecker:
    """Polls every replica's health endpoint with the app's ClientSession."""

    def __init__(self, settings: ActiveSettings, session: aiohttp.ClientSession,
                 endpoints_fn: Callable[[], Iterable[endpoints.Endpoint]],
                 on_change: Callable[[endpoints.Endpoint, bool], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, tls=None):
        self.settings = settings
        self.tls = tls  # router.tls.ClientTls for https:// replicas
        self.session = session
        self.endpoints_fn = endpoints_fn
        self.on_change = on_change
        self.clock = clock

    def record(self, e: endpoints.Endpoint, ok: bool) -> None:
        """Apply one check result to ``e``'s up/down state (thresholds as in the settings)."""
        s = self.settings
        if ok:
            e.active_failures = 0
            e.active_successes += 1
            if not e.active_up and e.active_successes >= s.healthy_threshold:
                e.active_up = True
                log.info("event=replica_up model=%s replica=%s endpoint=%s", e.model, e.replica_id, e.url)
                if self.on_change is not None:
                    self.on_change(e, True)
        else:
            e.active_successes = 0
            e.active_failures += 1
            if e.active_up and e.active_failures >= s.unhealthy_threshold:
                e.active_up = False
                log.warning("event=replica_down model=%s replica=%s endpoint=%s failures=%d",
                            e.model, e.replica_id, e.url, e.active_failures)
                if self.on_change is not None:
                    self.on_change(e, False)

    async def check(self, e: endpoints.Endpoint) -> bool:
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout_s)
        server_hostname = None
        if e.tls:
            url, ssl = f"https://{e.authority}{self.settings.path}", self.tls.context if self.tls else True
            # The name the replica's pool verifies (upstream_tls_server_name), so checks and requests agree.
            server_hostname = e.pool.server_hostname if e.pool is not None else None
        else:
            url, ssl = f"http://{e.authority}{self.settings.path}", True
        try:
            async with self.session.get(url, timeout=timeout, ssl=ssl, server_hostname=server_hostname) as resp:
                await resp.read()
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            log.debug("event=health_check_failed replica=%s error=%r", e.replica_id, exc)
            return False

    async def run_once(self) -> None:
        targets = list(self.endpoints_fn())
        if not targets:
            return
        results = await asyncio.gather(*(self.check(e) for e in targets))
        for e, ok in zip(targets, results):
            self.record(e, ok)

    async def run(self) -> None:
        """Check forever, every ``interval_s`` (cancel the task to stop)."""
        while True:
            started = self.clock()
            try:
                await self.run_once()
            except Exception:  # keep checking: one bad round must not stop health checks for good
                log.exception("event=health_round_failed")
            await asyncio.sleep(max(0.0, self.settings.interval_s - (self.clock() - started)))
