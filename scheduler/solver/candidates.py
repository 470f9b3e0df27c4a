"""From a problem to the candidates the optimisation chooses among.

Steps: (1) per deployment, a DeploymentView with per-GPU-type capacity (throughput module);
(2) identical pools of one region (same cloud, instance type, tier, price) merge into one group,
so a fleet of many zones or clusters does not multiply variables; excluded pools leave here;
(3) pair filters prune (deployment, group), region filters prune (deployment, region, group);
(4) score plugins price each surviving arc. Every rejection is kept, by constraint, so an unplaced
deployment can be explained."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence

from meridian import fleet
from meridian.spec import policy as policy_spec
from scheduler.solver import filters as _filters  # noqa: F401  (registers the filter plugins)
from scheduler.solver import framework, problem, scores as _scores, throughput  # noqa: F401

log = logging.getLogger("meridian.scheduler.solver")


@dataclasses.dataclass
class Group:
    """Pools merged for the model; ``members`` keep their own capacity for the split back."""

    index: int
    offer: problem.PoolOffer  # representative, with the group's summed capacity
    members: list[problem.PoolOffer]
    nodes_min: int

    @property
    def key(self) -> str:
        return self.offer.key


@dataclasses.dataclass(frozen=True, slots=True)
class Arc:
    """Deployment ``d`` serving ``region`` from group ``g``: one integer variable of the model."""

    d: int
    region: str
    g: int
    gpus: int  # GPUs per replica (quotas)
    gpus_packed: int  # GPUs per replica for node packing (a 3-GPU replica takes 4 of an 8-GPU node)
    units: float  # reference replicas one replica counts for, spot credit included
    score_usd: float  # USD/h per replica from score plugins
    rtt_ms: float


@dataclasses.dataclass
class Rejections:
    """Why candidates were pruned, for explanations."""

    pair: dict[str, list[tuple[str, str]]] = dataclasses.field(default_factory=dict)  # constraint -> [(pool, reason)]
    region: dict[str, list[tuple[str, str, float]]] = dataclasses.field(default_factory=dict)  # region -> [(pool, reason, rtt)]
    errors: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Candidates:
    views: list[framework.DeploymentView]
    groups: list[Group]
    arcs: list[Arc]
    arcs_by_d: list[list[int]]
    rejections: list[Rejections]
    pair_survivors: list[list[int]]  # d -> group indices that passed every pair filter
    cycle: framework.Cycle
    excluded: list[problem.PoolOffer]


def spot_rules(spec_placement_spot_allowed: bool, spec_share: float,
               policy: policy_spec.CapacityPolicySpec | None) -> tuple[bool, float]:
    """Spot is allowed when the deployment and the policy both allow it; the cap is the lower share."""
    if policy is None:
        return spec_placement_spot_allowed, spec_share
    return (spec_placement_spot_allowed and policy.spot.allowed, min(spec_share, policy.spot.max_share))


def make_view(demand: problem.DeploymentDemand,
              policy: policy_spec.CapacityPolicySpec | None) -> framework.DeploymentView:
    spec = demand.spec
    reference = throughput.reference_gpu_type(spec, demand.reference_gpu_type)
    units = throughput.units_by_type(spec, reference)
    prefill, unfit = {}, {}
    for gpu_type in throughput.allowed_gpu_types(spec):
        fit = throughput.assess(spec, gpu_type)
        prefill[gpu_type] = fit.prefill_ms
        if fit.unfit:
            unfit[gpu_type] = fit.unfit
    allowed, share = spot_rules(spec.placement.spot.allowed, spec.placement.spot.max_share, policy)
    return framework.DeploymentView(demand, reference, units, prefill, unfit, allowed, share)


def group_pools(pools: Sequence[problem.PoolOffer], aggregate: bool) -> list[Group]:
    groups: list[Group] = []
    index: dict[tuple, Group] = {}
    for pool in sorted(pools, key=lambda p: p.key):
        key = (pool.cloud, pool.region, pool.pool.instance_type, pool.gpu_type, pool.tier, pool.gpus_per_node,
               round(pool.price_per_node_hour_usd, 6)) if aggregate else (pool.key,)
        group = index.get(key)
        if group is None:
            group = Group(len(groups), pool, [pool], pool.pool.nodes_min)
            index[key] = group
            groups.append(group)
        else:
            group.members.append(pool)
            group.nodes_min += pool.pool.nodes_min
    for group in groups:
        if len(group.members) > 1:
            total = sum(m.gpus_capacity for m in group.members)
            rep = group.members[0]
            group.offer = dataclasses.replace(
                rep, cluster_id=f"group:{rep.cloud}:{rep.region}", gpus_capacity=total,
                pool=dataclasses.replace(rep.pool, pool_id=f"{rep.pool.instance_type}:{rep.tier.value}:{group.index}"))
    return groups


def packed_gpus(gpus: int, gpus_per_node: int) -> int:
    """GPUs a replica effectively takes on a node: replicas do not span nodes."""
    per_node = gpus_per_node // gpus
    return math.ceil(gpus_per_node / per_node) if per_node else gpus


def build(prob: problem.PlacementProblem, settings: problem.SolverSettings,
          only: Sequence[int] | None = None) -> Candidates:
    """Views for every deployment; arcs for the deployments in ``only`` (default: all)."""
    cycle = framework.Cycle(prob.policy, prob.latency_map, prob.excluded_pools)
    pair_filters = [f for f in framework.make_filters(settings.filters) if not f.per_region]
    region_filters = [f for f in framework.make_filters(settings.filters) if f.per_region]
    score_plugins = framework.make_scores(settings.scores)
    views = [make_view(d, prob.policy) for d in prob.deployments]
    excluded = [p for p in prob.pools if p.key in prob.excluded_pools]
    groups = group_pools([p for p in prob.pools if p.key not in prob.excluded_pools], settings.aggregate_pools)
    arcs: list[Arc] = []
    arcs_by_d: list[list[int]] = [[] for _ in views]
    rejections = [Rejections() for _ in views]
    survivors: list[list[int]] = [[] for _ in views]
    chosen = range(len(views)) if only is None else only
    for d in chosen:
        view, rej = views[d], rejections[d]
        if view.demand.demand_replicas == 0:
            continue
        for pool in excluded:
            for plugin in pair_filters:
                status = plugin.filter(framework.Candidate(cycle, view, pool))
                if not status.ok:
                    _status_into(rej, pool.key, status)
                    break
        for group in groups:
            status = framework.OK
            for plugin in pair_filters:
                status = plugin.filter(framework.Candidate(cycle, view, group.offer))
                if not status.ok:
                    break
            if not status.ok:
                _status_into(rej, group.key, status)
                continue
            survivors[d].append(group.index)
            gpus = view.gpus_for(group.offer.gpu_type)
            units = view.units_by_type.get(group.offer.gpu_type, 1.0)
            if group.offer.tier is fleet.Tier.SPOT:
                units *= settings.spot_capacity_credit
            for region, wanted in sorted(view.demand.replicas_by_region.items()):
                if wanted <= 0:
                    continue
                cand = framework.Candidate(cycle, view, group.offer, region)
                status = framework.OK
                for plugin in region_filters:
                    status = plugin.filter(cand)
                    if not status.ok:
                        break
                rtt_ms = _rtt(cycle, region, group.offer.region)
                if not status.ok:
                    if status.code is framework.Code.ERROR:
                        rej.errors.append(status.reason)
                    rej.region.setdefault(region, []).append((group.key, status.reason, rtt_ms))
                    continue
                score = sum(plugin.score(cand) for plugin in score_plugins)
                arcs_by_d[d].append(len(arcs))
                arcs.append(Arc(d, region, group.index, gpus, packed_gpus(gpus, group.offer.gpus_per_node),
                                units, score, rtt_ms))
    return Candidates(views, groups, arcs, arcs_by_d, rejections, survivors, cycle, excluded)


def _status_into(rej: Rejections, pool: str, status: framework.Status) -> None:
    if status.code is framework.Code.ERROR:
        rej.errors.append(status.reason)
        log.warning("filter error pool=%s reason=%s", pool, status.reason)
    rej.pair.setdefault(status.constraint, []).append((pool, status.reason))


def _rtt(cycle: framework.Cycle, a: str, b: str) -> float:
    try:
        return cycle.latency_map.rtt_ms(a, b)
    except KeyError:
        return math.inf
