"""Routing on the simulated clock through the router's own state and policy objects.

The routing table comes from the scheduler's ``routes.build_models`` and is applied to a real
``router.table.RoutingState`` (endpoints, peak-EWMA, per-model policy instances from the registry);
candidates are filtered by ``router.health.candidates`` as the proxy does. A day at tens of
requests/s is millions of requests, so each tick routes a bounded number of representative
requests per (model, client region) stream, each standing for ``arrivals / samples`` requests,
interleaved across regions; each choice adds the concurrency it brings to the endpoint's in-flight
count (``pending``) so later choices see the load, as in the live router. The result is each
replica's share of each stream."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Collection, Mapping

from meridian import latency
from meridian.fleet import models as fm
from router import config as router_config
from router import health, table

# The router's own default: below this share of healthy replicas, route to all of them (panic mode).
PANIC_PERCENT = router_config.OutlierConfig().panic_threshold_percent


class _Request:
    """The fields a routing policy may read (``router.policies.base.RouteRequest``)."""

    __slots__ = ("client_region", "prompt_tokens_estimate")

    def __init__(self, client_region: str, prompt_tokens: int):
        self.client_region = client_region
        self.prompt_tokens_estimate = prompt_tokens

    def prompt_text(self) -> str:
        return ""


class SimRouter:
    def __init__(self, policy: str, latency_map: latency.LatencyMap, rng: random.Random,
                 clock: Callable[[], float], honours_max_rtt: bool = True):
        self.policy = policy
        self.honours_max_rtt = honours_max_rtt
        self.state = table.RoutingState(default_policy=policy, latency_map=latency_map, rng=rng, clock=clock)
        self.rng = rng
        self._clock = clock
        self._shape: tuple | None = None
        self._version = 0
        self.selections = 0

    def apply(self, models: tuple[fm.ModelRoutes, ...]) -> None:
        """Take the scheduler's routes: a new table when replicas changed, else fresh loads only."""
        shape = tuple((m.served_model_name, tuple(r.replica_id for r in m.replicas)) for m in models)
        if shape != self._shape:
            self._version += 1
            self.state.apply(fm.RoutingTable(self._version, models, self._clock(), "simulator"), "sim")
            self._shape = shape
            return
        for m in models:
            for r in m.replicas:
                ep = self.state.endpoints.get(r.replica_id)
                if ep is not None:
                    ep.load = r.load

    def route(self, model: str, arrivals: Mapping[str, int], prompt_tokens: int, samples: int,
              expected_s: Mapping[str, float], tick_s: float, dead: Collection[str]) -> dict[tuple[str, str], float]:
        """Requests of ``model`` this tick per (replica id, client region). Streams with no routable
        replica get nothing (the caller counts them as failed)."""
        entry = self.state.model(model)
        if entry is None:
            return {}
        now = self._clock()
        pool, _panic = health.candidates(entry.routable, now, PANIC_PERCENT)
        if dead:
            pool = [e for e in pool if e.replica_id not in dead]
        if not pool:
            return {}
        for e in pool:
            e.pending = 0
        # Each client region's pool: the replicas within the deployment's max_rtt_ms, as the router does.
        limit = entry.max_rtt_ms if self.honours_max_rtt else 0.0
        reach = {region: health.within_reach(pool, region, limit, self.state.rtt_ms) for region in arrivals}
        reps: list[tuple[str, float]] = []
        for region, n in sorted(arrivals.items()):
            if n <= 0:
                continue
            # Whole rounds over the region's replicas: 8 representatives over 7 replicas gave one of
            # them twice the others' share every tick (the live router picks per request, so equal
            # replicas get equal shares), which pushed L4s past their TPOT knee (docs/simulator.md).
            width = max(1, len(reach[region]))
            k = min(n, math.ceil(max(samples, width) / width) * width)
            reps.extend([(region, n / k)] * k)
        self.rng.shuffle(reps)
        out: dict[tuple[str, str], float] = {}
        for region, weight in reps:
            request = _Request(region, prompt_tokens)
            mine = reach[region]
            if len(mine) == 1:
                ep = mine[0]
            else:
                ep = entry.policy.select(mine, request, now)
                self.selections += 1
            entry.policy.on_routed(ep, request)
            ep.pending += weight * expected_s.get(ep.replica_id, 1.0) / tick_s
            key = (ep.replica_id, region)
            out[key] = out.get(key, 0.0) + weight
        return out

    def observe(self, replica_id: str, server_ms: float) -> None:
        """Feed the endpoint's peak-EWMA with the server-side latency its requests saw."""
        ep = self.state.endpoints.get(replica_id)
        if ep is not None:
            ep.ewma.observe(server_ms, self._clock())
