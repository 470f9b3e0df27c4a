"""From a problem to the candidates the optimisation chooses among.

Steps: (1) per deployment, a DeploymentView with per-GPU-type capacity (throughput module);
(2) identical pools of one region (same cloud, instance type, tier, price) merge into one group,
so a fleet of many zones or clusters does not multiply variables; excluded pools leave here;
(3) pair filters prune (deployment, group), region filters prune (deployment, region, group);
(4) score plugins price each surviving arc. A pair (deployment, group) carries the integer replica
count; an arc (pair, client region) carries the capacity that pair's replicas give that region;
``cover`` lists, per covered client region, the pairs within its SLA's reach (coverage). Every rejection is kept, by constraint, so an unplaced
deployment can be explained."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence

from meridian import fleet
from meridian.spec import policy as policy_spec
from scheduler.solver import filters as _filters  # noqa: F401  (registers the filter plugins)
from scheduler.solver import framework, problem, scores as _scores, throughput  # noqa: F401

log = logging.getLogger("meridian.scheduler.solver")
HEDGE_NEED = 2  # a hedged region's need: one on-demand replica (2) or two spot replicas on two nodes (1 + 1)


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
class Pair:
    """Deployment ``d`` on group ``g``: the integer replica count of the model."""

    d: int
    g: int
    gpus: int  # GPUs per replica (quotas)
    gpus_packed: int  # GPUs per replica for node packing (a 3-GPU replica takes 4 of an 8-GPU node)
    units: float  # reference replicas one replica counts for, spot credit included


@dataclasses.dataclass(frozen=True, slots=True)
class Arc:
    """Pair ``p`` serving client ``region``: a flow of capacity (replicas of the pair may serve
    several regions, as the latency-aware router sends each region to nearby replicas)."""

    p: int
    d: int
    region: str
    g: int
    score_usd: float  # USD/h per replica's worth of capacity, from score plugins
    rtt_ms: float


@dataclasses.dataclass
class Rejections:
    """Why candidates were pruned, for explanations."""

    pair: dict[str, list[tuple[str, str]]] = dataclasses.field(default_factory=dict)  # constraint -> [(pool, reason)]
    region: dict[str, list[tuple[str, str, float]]] = dataclasses.field(default_factory=dict)  # region -> [(pool, reason, rtt)]
    region_codes: dict[str, set[str]] = dataclasses.field(default_factory=dict)  # region -> constraints that failed
    errors: list[str] = dataclasses.field(default_factory=list)


# Verdicts of one filter for one plugin key over every group: the groups that pass, and the
# statuses of those that do not.
Verdicts = tuple[frozenset[int], dict[int, framework.Status]]


@dataclasses.dataclass
class Candidates:
    views: list[framework.DeploymentView]
    groups: list[Group]
    arcs: list[Arc]
    arcs_by_d: list[list[int]]
    pairs: list[Pair]
    pairs_by_d: list[list[int]]
    arcs_by_p: list[list[int]]
    pair_survivors: list[list[int]]  # d -> group indices that passed every pair filter
    cycle: framework.Cycle
    excluded: list[problem.PoolOffer]
    # d -> [(failing group set, verdicts)] per pair filter; d -> region -> same for region filters;
    # d -> [(pool key, status)] for excluded pools. Reasons are read from the verdicts on demand.
    pair_failed: list[list[tuple[frozenset[int], Verdicts]]]
    region_failed: list[dict[str, list[tuple[frozenset[int], Verdicts]]]]
    excluded_failed: list[list[tuple[str, framework.Status]]]
    # d -> covered client region -> pairs whose replicas are within its SLA's reach (coverage; a
    # region absent has none; beyond max_rtt_ms where no pool is within it).
    cover: list[dict[str, list[int]]] = dataclasses.field(default_factory=list)
    filter_names: tuple[str, ...] = ()  # the filter plugins of the solve, for explanations
    relax_max_rtt: bool = True
    built_for: frozenset[int] = frozenset()  # deployments whose pairs and arcs were built
    hedges: bool = True  # SolverSettings.spot_hedges: False ignores spot.hedge (bounds: no preemption)

    def built(self, d: int) -> bool:
        return d in self.built_for

    def uncovered(self, d: int, counts: Mapping[int, int]) -> list[str]:
        """Covered regions of ``d`` some pair could reach but no replica of ``counts`` does."""
        return [r for r, ps in sorted(self.cover[d].items()) if not any(counts.get(p, 0) > 0 for p in ps)]

    def hedge_worth(self, p: int) -> tuple[int, bool]:
        """``hedge_worth`` of a replica of pair ``p``."""
        return hedge_worth(self.groups[self.pairs[p].g].offer, self.pairs[p].gpus)

    def hedge_count(self, p: int, replicas: int) -> int:
        """What ``replicas`` replicas of pair ``p`` give a hedged region (``hedge_count``)."""
        return hedge_count(self.groups[self.pairs[p].g].offer, self.pairs[p].gpus, replicas)

    def hedged(self, d: int) -> bool:
        return hedges(self.views[d].demand, self.hedges)

    def unhedged(self, d: int, counts: Mapping[int, int]) -> list[str]:
        """Covered regions of a hedged deployment ``d`` (``SpotRules.hedge``) that ``counts`` leaves
        with neither an on-demand replica nor two spot replicas within reach (an uncovered region
        among them)."""
        if not self.hedged(d):
            return []
        return [r for r, ps in sorted(self.cover[d].items())
                if sum(self.hedge_count(p, counts.get(p, 0)) for p in ps) < HEDGE_NEED]

    def rejections(self, d: int) -> Rejections:
        """Why candidates of deployment ``d`` were pruned, by constraint (for explanations)."""
        rej = Rejections()
        for key, status in self.excluded_failed[d]:
            _status_into(rej, key, status)
        for failed, (_, statuses) in self.pair_failed[d]:
            for g in sorted(failed):
                _status_into(rej, self.groups[g].key, statuses[g])
        for region, items in self.region_failed[d].items():
            for failed, (_, statuses) in items:
                for g in sorted(failed):
                    status = statuses[g]
                    if status.code is framework.Code.ERROR:
                        rej.errors.append(status.reason)
                    rej.region.setdefault(region, []).append(
                        (self.groups[g].key, status.reason, _rtt(self.cycle, region, self.groups[g].offer.region)))
                    rej.region_codes.setdefault(region, set()).add(status.constraint)
        return rej


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
    prefill, unfit, binding, wait = {}, {}, {}, {}
    for gpu_type in throughput.allowed_gpu_types(spec):
        fit = throughput.assess(spec, gpu_type)
        prefill[gpu_type] = fit.prefill_ms
        if fit.wait_ms > 0:
            wait[gpu_type] = fit.wait_ms
        if fit.unfit:
            unfit[gpu_type] = fit.unfit
            binding[gpu_type] = fit.binding or "gpu_type"
    allowed, share = spot_rules(spec.placement.spot.allowed, spec.placement.spot.max_share, policy)
    tail: dict[str, float] = {}
    if spec.workload.prompt_tokens_p99 is not None:
        for gpu_type in prefill:
            ms = throughput.prefill_ms(spec, gpu_type, spec.workload.prompt_tokens_p99)
            if ms is not None and gpu_type not in unfit:
                tail[gpu_type] = ms
    return framework.DeploymentView(demand, reference, units, prefill, unfit, allowed, share, binding,
                                    spec.placement.spot.max_share_per_region, tail, wait)


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


def hedges(demand: problem.DeploymentDemand, enabled: bool = True) -> bool:
    """Whether ``demand`` asks for a hedge (``SpotRules.hedge``, spot allowed) and the solve keeps
    hedges (``enabled``: ``SolverSettings.spot_hedges``)."""
    spot = demand.spec.placement.spot
    return enabled and spot.allowed and spot.hedge


def hedge_worth(offer: problem.PoolOffer, gpus: int) -> tuple[int, bool]:
    """What a replica of ``gpus`` GPUs on ``offer`` gives a hedged region (need ``HEDGE_NEED``): 1 on
    spot (a second one is needed), 2 otherwise (one suffices); and whether each replica counts, as
    it fills its node (replicas that may share a node count once per pool: one preemption takes
    them all)."""
    return (1 if offer.tier is fleet.Tier.SPOT else 2), packed_gpus(gpus, offer.gpus_per_node) >= offer.gpus_per_node


def hedge_count(offer: problem.PoolOffer, gpus: int, replicas: int) -> int:
    """What ``replicas`` replicas of ``gpus`` GPUs on ``offer`` give a hedged region."""
    worth, per_replica = hedge_worth(offer, gpus)
    return worth * (replicas if per_replica else min(1, replicas))


def packed_gpus(gpus: int, gpus_per_node: int) -> int:
    """GPUs a replica effectively takes on a node: replicas do not span nodes."""
    per_node = gpus_per_node // gpus
    return math.ceil(gpus_per_node / per_node) if per_node else gpus


def plugin_key(plugin: object, view: framework.DeploymentView) -> object:
    """The deployment facts a plugin's verdict depends on (its ``key(view)``); deployments with
    equal keys share verdicts, so a fleet of many deployments of a few models filters fast. A
    plugin without ``key`` is asked once per deployment."""
    key = getattr(plugin, "key", None)
    return key(view) if key is not None else ("deployment", view.name)


def build(prob: problem.PlacementProblem, settings: problem.SolverSettings,
          only: Sequence[int] | None = None) -> Candidates:
    """Views for every deployment; arcs for the deployments in ``only`` (default: all)."""
    cycle = framework.Cycle.of(prob, settings)
    pair_filters = [f for f in framework.make_filters(settings.filters) if not f.per_region]
    region_filters = [f for f in framework.make_filters(settings.filters) if f.per_region]
    score_plugins = framework.make_scores(settings.scores)
    views = [make_view(d, prob.policy) for d in prob.deployments]
    excluded = [p for p in prob.pools if p.key in prob.excluded_pools]
    groups = group_pools([p for p in prob.pools if p.key not in prob.excluded_pools], settings.aggregate_pools)
    every = frozenset(range(len(groups)))
    arcs: list[Arc] = []
    arcs_by_d: list[list[int]] = [[] for _ in views]
    pairs: list[Pair] = []
    pairs_by_d: list[list[int]] = [[] for _ in views]
    arcs_by_p: list[list[int]] = []
    pair_of: dict[tuple[int, int], int] = {}
    survivors: list[list[int]] = [[] for _ in views]
    pair_failed: list[list[tuple[frozenset[int], Verdicts]]] = [[] for _ in views]
    region_failed: list[dict[str, list[tuple[frozenset[int], Verdicts]]]] = [{} for _ in views]
    excluded_failed: list[list[tuple[str, framework.Status]]] = [[] for _ in views]
    memo: dict[tuple, Verdicts] = {}
    scores: dict[tuple, float] = {}
    cover: list[dict[str, list[int]]] = [{} for _ in views]

    def verdicts(i: int, plugin: framework.Filter, view: framework.DeploymentView, region: str) -> Verdicts:
        key = (i, region, plugin_key(plugin, view))
        hit = memo.get(key)
        if hit is None:
            passed, failed = set(), {}
            for group in groups:
                status = plugin.filter(framework.Candidate(cycle, view, group.offer, region))
                if status.ok:
                    passed.add(group.index)
                else:
                    failed[group.index] = status
                    if status.code is framework.Code.ERROR:
                        log.warning("filter error plugin=%s pool=%s reason=%s", plugin.name, group.key, status.reason)
            hit = memo[key] = (frozenset(passed), failed)
        return hit

    chosen = range(len(views)) if only is None else only

    def pair_for(d: int, g: int, view: framework.DeploymentView) -> int:
        p = pair_of.get((d, g))
        if p is None:
            offer = groups[g].offer
            gpus = view.gpus_for(offer.gpu_type)
            units = view.units_by_type.get(offer.gpu_type, 1.0)
            if offer.tier is fleet.Tier.SPOT:
                units *= settings.spot_capacity_credit
            p = pair_of[(d, g)] = len(pairs)
            pairs.append(Pair(d, g, gpus, packed_gpus(gpus, offer.gpus_per_node), units))
            pairs_by_d[d].append(p)
            arcs_by_p.append([])
        return p

    for d in chosen:
        view = views[d]
        coverage = view.demand.coverage
        if view.demand.demand_replicas == 0 and not coverage:
            continue
        for pool in excluded:
            for plugin in pair_filters:
                status = plugin.filter(framework.Candidate(cycle, view, pool))
                if not status.ok:
                    excluded_failed[d].append((pool.key, status))
                    break
        alive = every
        for i, plugin in enumerate(pair_filters):
            found = verdicts(i, plugin, view, "")
            gone = alive - found[0]
            if gone:
                pair_failed[d].append((gone, found))
            alive = alive & found[0]
        survivors[d] = sorted(alive)
        skeys = [plugin_key(plugin, view) for plugin in score_plugins]
        demanded = {r for r, wanted in view.demand.replicas_by_region.items() if wanted > 0}
        for region in sorted(demanded | set(coverage)):
            serving = alive
            found_all: list[Verdicts] = []
            for i, plugin in enumerate(region_filters):
                found = verdicts(len(pair_filters) + i, plugin, view, region)
                found_all.append(found)
                gone = serving - found[0]
                if gone:
                    region_failed[d].setdefault(region, []).append((gone, found))
                serving = serving & found[0]
            if not serving and settings.relax_max_rtt:
                # Nothing within max_rtt_ms of this region: the nearest pools that meet the TTFT
                # target serve it (routers fail over there anyway), rather than no capacity at all.
                relaxed = alive
                for passed, failed in found_all:
                    relaxed = relaxed & (passed | {g for g, status in failed.items() if status.relaxable})
                if relaxed:
                    log.info("solver max_rtt=relaxed deployment=%s region=%s pools=%d", view.name, region,
                             len(relaxed))
                    serving = relaxed
            if region in coverage and serving:
                cover[d][region] = [pair_for(d, g, view) for g in sorted(serving)]
            if region not in demanded:
                continue
            # The cost floor's relaxation serves demand from any pool (coverage above keeps the SLA).
            for g in sorted(serving if settings.demand_region_filters else alive):
                offer = groups[g].offer
                p = pair_for(d, g, view)
                score = 0.0
                for j, plugin in enumerate(score_plugins):
                    skey = (j, region, g, skeys[j])
                    value = scores.get(skey)
                    if value is None:
                        value = scores[skey] = plugin.score(framework.Candidate(cycle, view, offer, region))
                    score += value
                arcs_by_d[d].append(len(arcs))
                arcs_by_p[p].append(len(arcs))
                arcs.append(Arc(p, d, region, g, score, _rtt(cycle, region, offer.region)))
    return Candidates(views, groups, arcs, arcs_by_d, pairs, pairs_by_d, arcs_by_p, survivors, cycle, excluded,
                      pair_failed, region_failed, excluded_failed, cover, tuple(settings.filters),
                      settings.relax_max_rtt, frozenset(chosen), settings.spot_hedges)


def reachable(memo: dict[tuple, bool], cycle: framework.Cycle, filters: Sequence[framework.Filter],
              view: framework.DeploymentView, pools: Sequence[problem.PoolOffer], region: str) -> bool:
    """Some pool passes every filter, none relaxed, for ``view`` serving ``region`` (memoised in
    ``memo`` by the deployment facts the filters read, ``plugin_key``, and the region: deployments of
    one model share the answer): where this is false, serving beyond max_rtt_ms is valid. The
    per-region filters run first: they reject most pools of a fleet at once."""
    key = (region, tuple(plugin_key(f, view) for f in filters))
    if key not in memo:
        ordered = sorted(filters, key=lambda f: not f.per_region)
        memo[key] = any(all(f.filter(framework.Candidate(cycle, view, pool, region if f.per_region else "")).ok
                            for f in ordered) for pool in pools)
    return memo[key]


def isolation_reason(c: Candidates, d: int) -> str:
    """Why deployment ``d`` cannot meet its isolation with the pools that passed the filters, or ""."""
    rules = c.views[d].demand.spec.placement
    offers = [c.groups[c.pairs[p].g].offer for p in c.pairs_by_d[d]]
    if not offers:
        return ""  # nothing passed the filters: the filters explain it
    clouds = sorted({o.cloud for o in offers})
    regions = sorted({o.region for o in offers})
    if len(clouds) < rules.min_distinct_clouds:
        return (f"isolation needs {rules.min_distinct_clouds} clouds but only "
                f"{', '.join(clouds) or 'none'} {'has' if len(clouds) == 1 else 'have'} a compatible pool within the SLA")
    if len(regions) < rules.min_distinct_regions:
        return (f"isolation needs {rules.min_distinct_regions} regions but only {len(regions)} "
                f"({', '.join(regions) or 'none'}) have a compatible pool within the SLA")
    return ""


def _status_into(rej: Rejections, pool: str, status: framework.Status) -> None:
    if status.code is framework.Code.ERROR:
        rej.errors.append(status.reason)
    rej.pair.setdefault(status.constraint, []).append((pool, status.reason))


def _rtt(cycle: framework.Cycle, a: str, b: str) -> float:
    try:
        return cycle.latency_map.rtt_ms(a, b)
    except KeyError:
        return math.inf
