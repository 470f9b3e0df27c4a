"""Which client regions a pool serves within a deployment's SLA reach, and the make-before-break
rule that keeps them served: a READY replica that is the last one within reach of a client region
the plan covers is not drained while its replacement within reach of that region is on its way.

The count rule alone (the deployment keeps its target of READY replicas) lets a plan that moves a
region's only nearby replica elsewhere drain it the round the replacement starts: the region is
then served from beyond ``max_rtt_ms`` until the replacement is READY (minutes: node provisioning
and a cold start). Deployments without ``max_rtt_ms`` are served from anywhere: no pool is out of
reach and this rule never holds a drain."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from meridian import latency
from scheduler.reconciler import types as t


def reach_map(deployments: Mapping[str, t.DeploymentInfo], pool_regions: Mapping[str, str],
              rtt_ms: Callable[[str, str], float]) -> dict[tuple[str, str], frozenset[str]]:
    """(deployment, pool key) -> the SLA's client regions within ``max_rtt_ms`` of the pool's cloud
    region, for the deployments that declare ``max_rtt_ms``. ``pool_regions``: pool key -> its
    cluster's region; ``rtt_ms(client_region, cloud_region)`` (a place it does not know: out of reach)."""
    out: dict[tuple[str, str], frozenset[str]] = {}
    for name, info in deployments.items():
        sla = info.doc.spec.sla
        if sla.max_rtt_ms is None:
            continue
        for key, region in pool_regions.items():
            out[(name, key)] = frozenset(r for r in sla.client_regions if _rtt(rtt_ms, r, region) <= sla.max_rtt_ms)
    return out


class ReachCache:
    """``reach_map`` of the last round, recomputed only when the deployments' reach rules, the pools
    or the latency map change (a round of a large fleet would otherwise spend its time on lookups)."""

    def __init__(self) -> None:
        self._key: tuple = ()
        self._map: latency.LatencyMap | None = None
        self._value: dict[tuple[str, str], frozenset[str]] = {}

    def of(self, deployments: Mapping[str, t.DeploymentInfo], pool_regions: Mapping[str, str],
           latency_map: latency.LatencyMap) -> dict[tuple[str, str], frozenset[str]]:
        rules = tuple(sorted((name, info.doc.spec.sla.max_rtt_ms, tuple(info.doc.spec.sla.client_regions))
                             for name, info in deployments.items() if info.doc.spec.sla.max_rtt_ms is not None))
        key = (rules, tuple(sorted(pool_regions.items())))
        if key != self._key or latency_map is not self._map:
            self._key, self._map = key, latency_map
            self._value = reach_map(deployments, pool_regions, latency_map.rtt_ms)
        return self._value


def _rtt(rtt_ms: Callable[[str, str], float], a: str, b: str) -> float:
    try:
        return rtt_ms(a, b)
    except KeyError:
        return float("inf")


class Guard:
    """One deployment's regions in one round: READY replicas within reach of each covered region,
    and the pools where a replica of it is on its way (STARTING, a start sent or sent now, or a
    start waiting for nodes the pool is growing to)."""

    def __init__(self, name: str, inp: t.ReconcileInput, ready: Iterable[t.ReplicaInfo]):
        self.name = name
        self.reach = inp.reach
        planned = inp.target.demand.get(name, {})
        self.covered = frozenset(inp.target.coverage.get(name, ())) | {r for r, n in planned.items() if n > 0}
        self.ready: dict[str, int] = {}
        for r in ready:
            for region in self._regions(r.pool_key):
                self.ready[region] = self.ready.get(region, 0) + 1
        self.coming: set[str] = set()

    def _regions(self, pool_key: str) -> frozenset[str]:
        return self.reach.get((self.name, pool_key), frozenset()) & self.covered

    def blocks(self, r: t.ReplicaInfo) -> str | None:
        """Why draining READY ``r`` now would leave a covered region without a READY replica within
        reach while one is coming (None: it may go)."""
        for region in sorted(self._regions(r.pool_key)):
            if self.ready.get(region, 0) > 1:
                continue
            coming = sorted(k for k in self.coming if region in self.reach.get((self.name, k), ()))
            if coming:
                return (f"make-before-break: {r.replica_id} is the last ready replica of {self.name} within reach "
                        f"of {region} (max_rtt_ms); waiting for its replacement on {coming[0]}")
        return None

    def drained(self, r: t.ReplicaInfo) -> None:
        for region in self._regions(r.pool_key):
            self.ready[region] = self.ready.get(region, 0) - 1
