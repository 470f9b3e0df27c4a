"""The routing state: the current routing table turned into per-model entries with live endpoints.

``apply`` takes a whole ``RoutingTable`` (from the scheduler's stream, the last-known-good store or
a static file). Endpoints and policy instances are reused across tables (by replica id and by model
and policy name), so connection pools, latency estimates and health history survive updates.
Replicas that left the table have their idle connections closed; requests in flight to them finish."""

from __future__ import annotations

import asyncio

import logging
import random
import time
from collections.abc import Callable

from meridian import latency
from meridian.fleet import models as fm
from router import admission, endpoints, pertry, policies, upstream

log = logging.getLogger("meridian.router.table")


class RoutingState:
    def __init__(self, *, default_policy: str = policies.DEFAULT, policy_args: dict | None = None,
                 latency_map: latency.LatencyMap | None = None, unknown_rtt_ms: float = 150.0,
                 ewma_decay_s: float = 10.0, default_cost_ms: float = 30.0,
                 make_pool: Callable[[str, int, bool, str], upstream.Pool] | None = None,
                 max_in_flight_per_replica: int = 256, queue_size_per_model: int = 1024,
                 queue_timeout_s: float = 30.0, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic, per_try: pertry.PerTrySettings | None = None):
        self.default_policy = default_policy
        self.policy_args = policy_args or {}
        self.latency_map = latency_map or latency.default()
        self.unknown_rtt_ms = unknown_rtt_ms
        self.ewma_decay_s = ewma_decay_s
        self.default_cost_ms = default_cost_ms
        self.make_pool = make_pool
        self.max_in_flight_per_replica = max_in_flight_per_replica
        self.queue_size_per_model = queue_size_per_model
        self.queue_timeout_s = queue_timeout_s
        self.rng = rng or random.Random()
        self.clock = clock
        self.per_try = per_try or pertry.PerTrySettings()
        self.table: fm.RoutingTable | None = None
        self.source = "none"
        self.models: dict[str, endpoints.ModelEntry] = {}
        self.endpoints: dict[str, endpoints.Endpoint] = {}
        self.model_names: list[str] = []
        self._rtt_cache: dict[tuple[str, str], float] = {}
        self._changed: asyncio.Future | None = None

    @property
    def version(self) -> int:
        return self.table.version if self.table is not None else 0

    def rtt_ms(self, client_region: str, replica_region: str) -> float:
        """RTT from the latency map; 0 when the client region is unset (nothing to prefer), and
        ``unknown_rtt_ms`` for a region the map does not know (logged once)."""
        key = (client_region, replica_region)
        cached = self._rtt_cache.get(key)
        if cached is not None:
            return cached
        if not client_region:
            value = 0.0
        else:
            try:
                value = self.latency_map.rtt_ms(client_region, replica_region)
            except latency.UnknownRegion:
                log.warning("event=unknown_region client_region=%s replica_region=%s rtt_ms=%s",
                            client_region, replica_region, self.unknown_rtt_ms)
                value = self.unknown_rtt_ms
        if len(self._rtt_cache) > 10_000:
            self._rtt_cache.clear()
        self._rtt_cache[key] = value
        return value

    def model(self, name: str) -> endpoints.ModelEntry | None:
        return self.models.get(name)

    def _limit_fn(self, entry_ref: list) -> Callable[[], int]:
        per_replica = self.max_in_flight_per_replica

        def limit() -> int:
            entry = entry_ref[0]
            return per_replica * max(1, len(entry.routable)) if entry is not None else per_replica
        return limit

    def apply(self, table: fm.RoutingTable, source: str) -> None:
        """Make ``table`` the current one (``source``: watch, lkg or static)."""
        now = self.clock()
        new_endpoints: dict[str, endpoints.Endpoint] = {}
        new_models: dict[str, endpoints.ModelEntry] = {}
        for routes in table.models:
            eps = []
            for route in routes.replicas:
                try:
                    endpoints.parse_endpoint(route.endpoint)
                except ValueError as exc:
                    log.error("event=bad_replica_endpoint model=%s replica=%s error=%s",
                              routes.served_model_name, route.replica_id, exc)
                    continue
                ep = self.endpoints.get(route.replica_id)
                if ep is not None and (ep.url != route.endpoint or ep.model != routes.served_model_name):
                    if ep.pool is not None:
                        ep.pool.close()
                    ep = None
                if ep is None:
                    ep = endpoints.Endpoint(route, routes.served_model_name, ewma_decay_s=self.ewma_decay_s,
                                            default_cost_ms=self.default_cost_ms, now=now)
                    if self.make_pool is not None:
                        ep.pool = self.make_pool(ep.host, ep.port, ep.tls, route.cluster_id)
                else:
                    ep.update(route)
                new_endpoints[ep.replica_id] = ep
                eps.append(ep)
            policy_name = routes.policy or self.default_policy
            if policy_name not in policies.REGISTRY:
                log.warning("event=unknown_policy model=%s policy=%s using=%s", routes.served_model_name,
                            policy_name, self.default_policy)
                policy_name = self.default_policy
            old = self.models.get(routes.served_model_name)
            if old is not None and old.policy_name == policy_name:
                policy = old.policy
                gate = old.admission
            else:
                policy = policies.create(policy_name, self.policy_args.get(policy_name), self.rng, self.rtt_ms)
                gate = None
            entry_ref: list = [None]
            if gate is None:
                gate = admission.Admission(routes.served_model_name, self._limit_fn(entry_ref),
                                           self.queue_size_per_model, self.queue_timeout_s)
            else:
                gate.limit = self._limit_fn(entry_ref)
            entry = endpoints.ModelEntry(routes, eps, policy_name, policy, gate)
            entry.first_byte_s = pertry.first_byte_s(self.per_try, routes.ttft_p99_ms)
            entry.token_s = pertry.per_token_s(self.per_try, routes.tpot_p99_ms)
            entry.prompt_s = pertry.prefill_s(self.per_try, max((ep.prefill_ms_per_token for ep in eps), default=0.0))
            entry_ref[0] = entry
            new_models[entry.name] = entry
        gone = set(self.endpoints) - set(new_endpoints)
        for rid in gone:
            ep = self.endpoints[rid]
            if ep.pool is not None:
                ep.pool.close()
        if gone:
            for entry in new_models.values():
                entry.policy.forget(gone)
        self.endpoints = new_endpoints
        self.models = new_models
        self.model_names = sorted(new_models)
        self.table = table
        self.source = source
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)
        log.info("event=routing_table_applied version=%d source=%s models=%d replicas=%d removed=%d",
                 table.version, source, len(new_models), len(new_endpoints), len(gone))

    async def wait_for_replica(self, model: str, timeout_s: float) -> endpoints.ModelEntry | None:
        """Wait (at most ``timeout_s``) until ``model`` has a routable replica; its entry, or None.

        This is what makes scale-to-zero work for clients: the request that wakes a model up waits
        for the replica the scheduler starts, instead of failing while it starts."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            entry = self.models.get(model)
            if entry is not None and entry.routable:
                return entry
            left = deadline - loop.time()
            if left <= 0:
                return None
            if self._changed is None or self._changed.done():
                self._changed = loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._changed), left)
            except asyncio.TimeoutError:
                return None

    def close(self) -> None:
        for ep in self.endpoints.values():
            if ep.pool is not None:
                ep.pool.close()
