"""From specs, the fleet view and demand to a placement: the autoscaler per deployment (pure policy,
states kept here between rounds), then the placement problem for the solver.

Everything here is pure except ``solve_async`` (runs the CP-SAT solve on a worker thread so the
event loop keeps serving agents and routers while it works)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections.abc import Collection, Iterable, Mapping

from meridian import catalog, cost, latency, spec
from meridian.fleet import models as fm
from meridian.spec import cluster as cluster_spec
from meridian.spec import deployment as deployment_spec
from meridian.spec import policy as policy_spec
from scheduler import autoscaler, solver
from scheduler.control import fleet as fleet_mod
from scheduler.solver import inputs, problem, throughput
from scheduler.state import records

log = logging.getLogger("meridian.scheduler.planner")


@dataclasses.dataclass(frozen=True)
class SpecView:
    """The applied specs, by kind, as the control loop uses them."""

    generation: int
    deployments: Mapping[str, deployment_spec.ModelDeployment]
    policy: policy_spec.CapacityPolicySpec | None
    clusters: Mapping[str, cluster_spec.Cluster]
    latency_map: latency.LatencyMap

    @classmethod
    def of(cls, spec_set: spec.SpecSet, generation: int) -> SpecView:
        policies = spec_set.of_kind("CapacityPolicy")
        policy = policy_spec.in_use(policies)
        if len(policies) > 1 and policy is not None:
            log.warning("event=several_policies using=%s ignored=%s", policy.metadata.name,
                        ",".join(sorted(p.metadata.name for p in policies if p is not policy)))
        return cls(generation,
                   {d.metadata.name: d for d in spec_set.of_kind("ModelDeployment")},
                   policy.spec if policy is not None else None,
                   {c.metadata.name: c for c in spec_set.of_kind("Cluster")},
                   spec_set.context.latency_map)

    @classmethod
    def empty(cls) -> SpecView:
        return cls(0, {}, None, {}, latency.default())


class Autoscaler:
    """Runs the autoscaling policy for every deployment and keeps each one's state between calls."""

    def __init__(self, policy: autoscaler.Policy | None = None):
        self.policy = policy or autoscaler.get()
        self.states: dict[str, autoscaler.AutoscaleState] = {}
        self.decisions: dict[str, autoscaler.Decision] = {}

    def decide(self, specs: SpecView, snapshot: fleet_mod.FleetSnapshot, demand: Iterable[records.Demand],
               now_s: float, *, doomed: Collection[str] = (), commit: bool = True) -> dict[str, autoscaler.Decision]:
        """Decisions for every deployment in ``specs``; with ``commit`` false nothing is remembered
        (a dry run)."""
        by_model: dict[str, list[records.Demand]] = {}
        for d in demand:
            by_model.setdefault(d.model, []).append(d)
        ready_loads: dict[str, list[fm.ReplicaLoad]] = {}
        live_count: dict[str, int] = {}
        for _, r in snapshot.replicas():
            if r.replica_id in doomed:
                continue
            if r.state is fm.ReplicaState.READY:
                ready_loads.setdefault(r.deployment, []).append(r.load)
            if r.state in (fm.ReplicaState.READY, fm.ReplicaState.STARTING):
                live_count[r.deployment] = live_count.get(r.deployment, 0) + 1
        out: dict[str, autoscaler.Decision] = {}
        for name, dep in sorted(specs.deployments.items()):
            ready = ready_loads.get(name, [])
            live = live_count.get(name, 0)
            last = self.decisions.get(name)
            traffic = tuple(autoscaler.RegionTraffic(d.client_region, d.requests_per_s, d.in_flight, d.ttft_p99_ms)
                            for d in by_model.get(dep.spec.model.served_name, ()))
            cap = throughput.capacity_rps(dep.spec)
            try:
                ctx = autoscaler.AutoscaleContext(name, dep.spec, now_s, last.replicas if last else live,
                                                  tuple(ready), traffic, cap if cap and cap > 0 else None,
                                                  max_reference_replicas(dep.spec))
                decision, state = self.policy.decide(ctx, self.states.get(name, autoscaler.AutoscaleState()))
            except ValueError as exc:
                log.error("event=autoscale_error deployment=%s error=%r", name, str(exc))
                if last is None:
                    continue
                decision, state = last, self.states.get(name, autoscaler.AutoscaleState())
            out[name] = decision
            if commit:
                self.states[name] = state
                self.decisions[name] = decision
        if commit:
            for gone in set(self.states) - set(specs.deployments):
                self.states.pop(gone, None)
                self.decisions.pop(gone, None)
        return out


def max_reference_replicas(spec: deployment_spec.ModelDeploymentSpec) -> int:
    """The most reference replicas ``scaling.max_replicas`` replicas can be: max_replicas x what one
    replica on the largest allowed, fitting GPU type counts for. A deployment whose reference is an
    L4 and which may run on H100s (29 L4s' worth each) is not held to max_replicas L4s."""
    units = throughput.units_by_type(spec, throughput.reference_gpu_type(spec))
    return max(1, math.floor(spec.scaling.max_replicas * max(units.values(), default=1.0) + 1e-9))


def counted_replicas(snapshot: fleet_mod.FleetSnapshot, draining: Collection[str],
                     doomed: Collection[str]) -> list[tuple[fleet_mod.ClusterView, fm.ReplicaReport]]:
    """Replicas that hold their place: STARTING or READY, not being drained, not doomed."""
    return [(c, r) for c, r in snapshot.replicas()
            if r.state in (fm.ReplicaState.STARTING, fm.ReplicaState.READY) and r.replica_id not in draining
            and r.replica_id not in doomed]


def observed_placement(snapshot: fleet_mod.FleetSnapshot, pending_starts: Iterable[tuple[str, fm.StartReplica]],
                       draining: Collection[str], doomed: Collection[str]) -> problem.Placement:
    """The current placement: replicas agents report (adopted as they are) plus starts on their way."""
    counts = [(r.deployment, problem.pool_key(c.cluster_id, r.pool_id), 1)
              for c, r in counted_replicas(snapshot, draining, doomed)]
    reported = {r.replica_id for _, r in snapshot.replicas()}
    counts += [(s.deployment, problem.pool_key(cid, s.pool_id), 1) for cid, s in pending_starts
               if s.replica_id not in reported]
    return problem.Placement.from_counts(counts)


def pool_offers(snapshot: fleet_mod.FleetSnapshot, specs: SpecView, *, held_gpus: Mapping[str, int],
                no_growth: Mapping[str, str],
                offers: catalog.Catalog | None = None) -> tuple[list[problem.PoolOffer], dict[str, str]]:
    """A PoolOffer per pool of a live cluster, priced from the catalog and policy when the catalog
    knows the instance (else the agent's price). Pools in stock-out backoff may not grow: they offer
    only what is free now plus what the current placement holds, and are excluded when that is 0."""
    offers = offers or catalog.instances.default()
    out: list[problem.PoolOffer] = []
    excluded: dict[str, str] = {}
    for c in snapshot.live():
        ident = c.identity
        for _, pool in sorted(c.pools.items()):
            key = problem.pool_key(c.cluster_id, pool.pool_id)
            price = None
            offer = offers.lookup(ident.cloud.value, pool.instance_type, ident.region)
            if offer is not None:
                price = cost.price_per_node_hour(ident.cloud.value, ident.region, pool.instance_type,
                                                   pool.tier.value, offer, specs.policy)
            if pool.gpus_per_node <= 0:
                log.warning("event=pool_skipped pool=%s reason='gpus_per_node is 0'", key)
                continue
            try:
                po = problem.PoolOffer.of(c.cluster_id, ident.cloud.value, ident.region, pool,
                                          gpus_held_by_current=held_gpus.get(key, 0), price_per_node_hour_usd=price)
            except ValueError as exc:  # one pool's bad figures must not stop the whole fleet's plan
                log.warning("event=pool_skipped pool=%s reason=%r", key, str(exc))
                excluded[key] = str(exc)
                continue
            po = inputs.within_commitment(po, specs.policy)
            if key in no_growth:
                room = max(0, pool.gpus_free) + held_gpus.get(key, 0)
                po = dataclasses.replace(po, gpus_capacity=min(po.gpus_capacity, room))
                if po.gpus_capacity == 0:
                    excluded[key] = no_growth[key]
            out.append(po)
    return out, excluded


def declared_offers(specs: SpecView) -> list[problem.PoolOffer]:
    """Pools as the Cluster specs declare them (for a dry run before any agent reported)."""
    return inputs.pools_from_clusters(specs.clusters.values(), specs.policy)


def build_problem(specs: SpecView, decisions: Mapping[str, autoscaler.Decision], pools: list[problem.PoolOffer],
                  excluded: Mapping[str, str]) -> problem.PlacementProblem:
    demands = [problem.DeploymentDemand.of(dep, decisions[name].replicas_by_region if name in decisions else {},
                                           specs.policy,
                                           covered_regions=decisions[name].covered_regions if name in decisions else ())
               for name, dep in sorted(specs.deployments.items())]
    return problem.PlacementProblem(tuple(demands), tuple(pools), specs.policy, specs.latency_map, dict(excluded))


def pool_inputs(snapshot: fleet_mod.FleetSnapshot) -> tuple[tuple, ...]:
    """What a plan depends on of the live clusters' pools, one tuple per pool with its key first: a
    change calls for a re-plan (the loop's and the simulator's triggers), and a key the last plan
    did not have makes it a full one (``full_solve_due``)."""
    return tuple(sorted((problem.pool_key(c.cluster_id, p.pool_id), p.gpu_type, p.tier.value, p.nodes_min,
                         p.nodes_max, p.gpus_per_node, p.price_per_node_hour_usd)
                        for c in snapshot.live() for p in c.pools.values()))


def full_solve_due(last_full_s: float | None, now_s: float, interval_s: float, *,
                   pools_before: Iterable[tuple] = (), pools_now: Iterable[tuple] = ()) -> bool:
    """Whether this plan re-places every deployment (see ``SchedulerConfig.full_solve_interval_s``):
    none yet this term, ``interval_s`` since the last (0: always), or a pool is offered that the last
    plan did not have (``pools_before``/``pools_now``: the plans' pool inputs, key first), as when a
    lost cluster is back with the nodes it billed all along. Between them a re-plan re-solves only
    the deployments whose demand or pools changed (``solver.solve``'s incremental path), which
    leaves the others where they are however much cheaper a pool has become since."""
    if last_full_s is None or now_s - last_full_s >= interval_s:
        return True
    return bool({p[0] for p in pools_now} - {p[0] for p in pools_before})


def full_settings(settings: problem.SolverSettings) -> problem.SolverSettings:
    """``settings`` for a full solve: no incremental shortcut; still warm-started from the current
    placement, so a replica moves only where the saving outweighs its churn cost."""
    return settings.model_copy(update={"incremental": "never"})


async def solve_async(prob: problem.PlacementProblem, *, time_limit_s: float, current: problem.Placement | None,
                      settings: problem.SolverSettings | None = None) -> problem.PlacementResult:
    return await asyncio.to_thread(solver.solve, prob, time_limit_s=time_limit_s, current=current, settings=settings)


def held_gpus_by_pool(snapshot: fleet_mod.FleetSnapshot, pending_starts: Iterable[tuple[str, fm.StartReplica]],
                      draining: Collection[str], doomed: Collection[str]) -> dict[str, int]:
    held: dict[str, int] = {}
    for c, r in counted_replicas(snapshot, draining, doomed):
        key = problem.pool_key(c.cluster_id, r.pool_id)
        held[key] = held.get(key, 0) + max(1, r.gpu_count)
    reported = {r.replica_id for _, r in snapshot.replicas()}
    for cid, s in pending_starts:
        if s.replica_id not in reported:
            key = problem.pool_key(cid, s.pool_id)
            held[key] = held.get(key, 0) + s.gpu_count
    return held
