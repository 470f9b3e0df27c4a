"""Placement strategies the simulator compares, behind one small interface with a registry.

- ``solver``: Meridian's placement solver (``scheduler.solver.solve``), optionally on a restricted
  view: only some tiers or regions offered, and for a baseline that ignores the spec's isolation and
  latency rules, those relaxed. The baselines "on-demand across regions" and "on-demand in the
  single cheapest region" are this same solver with spot (and other regions) taken away, so the
  comparison isolates what each restriction costs rather than comparing against a weak heuristic.
- ``spothedge``: a SkyServe-like rule (SpotHedge, Mao et al., EuroSys 2025): the autoscaler's
  replicas plus ``extra_replicas`` on spot, spread over zones (fewest replicas first), zones with a
  recent preemption avoided; on-demand fallback for the spot capacity that is not READY; pools
  chosen by price per unit of capacity with one replica per VM (SkyPilot launches a VM per
  replica); client latency ignored. Hard rules of the spec (GPU types, clouds, regions, spot
  allowed, isolation across regions and clouds) and the policy (blocked regions) still hold, the
  first ones checked by the solver's own filter plugins; what SkyServe has no notion of (client
  latency, ``max_rtt_ms``, the spot share cap) is left out.

A placer returns a ``PlanOutcome``; the simulator's control loop hands its placement to the real
reconciler, so every strategy starts, drains and resizes through the same code."""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from meridian.fleet import models as fm
from scheduler import autoscaler, solver
from scheduler.control import fleet as fleet_mod
from scheduler.control import planner
from scheduler.solver import candidates, evaluate, framework, problem, throughput


@dataclasses.dataclass(frozen=True)
class PlanView:
    """What a placer sees at one control round."""

    now_s: float
    specs: planner.SpecView
    decisions: Mapping[str, autoscaler.Decision]
    snapshot: fleet_mod.FleetSnapshot
    offers: tuple[problem.PoolOffer, ...]
    excluded: Mapping[str, str]
    current: problem.Placement
    warm: problem.Placement
    doomed: frozenset[str]
    preempted_zones: Mapping[str, float]
    full: bool = False  # a full solve is due (planner.full_solve_due): every deployment re-placed


@dataclasses.dataclass(frozen=True)
class PlanOutcome:
    placement: problem.Placement
    cost_per_hour_usd: float
    unplaced_replicas: float
    solve_s: float
    status: str


class Placer(Protocol):
    name: str
    every_round: bool  # rule-based placers re-plan every control round; the solver on triggers

    def place(self, view: PlanView) -> PlanOutcome: ...


PlacerFactory = Callable[..., Placer]
PLACERS: dict[str, PlacerFactory] = {}


def register(name: str) -> Callable[[PlacerFactory], PlacerFactory]:
    def wrap(factory: PlacerFactory) -> PlacerFactory:
        PLACERS[name] = factory
        return factory
    return wrap


def create(name: str, **args: object) -> Placer:
    if name not in PLACERS:
        raise ValueError(f"unknown placement strategy {name!r}; known: {', '.join(sorted(PLACERS))}")
    return PLACERS[name](**args)


def relaxed(specs: planner.SpecView) -> planner.SpecView:
    """The specs with isolation (min distinct clouds/regions) and max_rtt_ms lifted: what a
    deployment confined to one region amounts to."""
    deps = {}
    for name, doc in specs.deployments.items():
        s = doc.spec
        placement = s.placement.model_copy(update={"min_distinct_clouds": 1, "min_distinct_regions": 1})
        sla = s.sla.model_copy(update={"max_rtt_ms": None})
        deps[name] = doc.model_copy(update={"spec": s.model_copy(update={"placement": placement, "sla": sla})})
    return dataclasses.replace(specs, deployments=deps)


@register("solver")
class SolverPlacer:
    """Meridian's solver on the offers this strategy allows (all by default)."""

    every_round = False
    MEMO_SIZE = 512

    def __init__(self, *, tiers: Iterable[str] | None = None, regions: Iterable[str] | None = None,
                 relax: bool = False, time_limit_s: float = 5.0, settings: problem.SolverSettings | None = None,
                 name: str = "solver"):
        self.name = name
        self.tiers = frozenset(tiers) if tiers is not None else None
        self.regions = frozenset(regions) if regions is not None else None
        self.relax = relax
        self.time_limit_s = time_limit_s
        base = settings or problem.SolverSettings()
        if relax:
            base = base.without_filters("latency")
        self.settings = base
        self._specs: planner.SpecView | None = None
        self._last: problem.Placement | None = None
        self._memo: collections.OrderedDict[tuple, problem.PlacementResult] = collections.OrderedDict()
        self.memo_hits = 0

    def allows(self, offer: problem.PoolOffer) -> bool:
        return ((self.tiers is None or offer.tier.value in self.tiers)
                and (self.regions is None or offer.region in self.regions))

    def place(self, view: PlanView) -> PlanOutcome:
        if self._specs is None or self._specs.generation != view.specs.generation:
            self._specs = relaxed(view.specs) if self.relax else view.specs
        offers = [o for o in view.offers if self.allows(o)]
        excluded = {k: v for k, v in view.excluded.items() if any(o.key == k for o in offers)}
        prob = planner.build_problem(self._specs, view.decisions, offers, excluded)
        result = self._solve(prob, view.warm, view.full)
        if result.status in (problem.SolveStatus.ERROR, problem.SolveStatus.NO_SOLUTION) and self._last is not None:
            return PlanOutcome(self._last, evaluate.cost_per_hour(prob, self._last), math.nan, result.solve_time_s,
                               result.status.value)
        self._last = result.placement
        return PlanOutcome(result.placement, result.cost_per_hour_usd, sum(u.replicas for u in result.unplaced),
                           result.solve_time_s, result.status.value)

    def _solve(self, prob: problem.PlacementProblem, warm: problem.Placement, full: bool = False) -> problem.PlacementResult:
        """``solver.solve``, remembering recent answers: with one CP-SAT worker, a seed and a solve
        that ends well inside its time limit the solver is a pure function of (demand, pools,
        exclusions, current placement), and a noisy demand signal often flips between a few states,
        so identical inputs reuse the answer instead of paying for the same solve again."""
        key = (tuple((d.name, tuple(sorted(d.replicas_by_region.items()))) for d in prob.deployments), prob.pools,
               tuple(sorted(prob.excluded_pools.items())), tuple(sorted(warm.replicas.items())),
               tuple(sorted(warm.serving.items())), full)
        hit = self._memo.get(key)
        if hit is not None:
            self._memo.move_to_end(key)
            self.memo_hits += 1
            return dataclasses.replace(hit, solve_time_s=0.0)
        settings = planner.full_settings(self.settings) if full else self.settings
        result = solver.solve(prob, time_limit_s=self.time_limit_s, current=warm, settings=settings)
        if result.status is problem.SolveStatus.OPTIMAL:
            self._memo[key] = result
            if len(self._memo) > self.MEMO_SIZE:
                self._memo.popitem(last=False)
        return result


@register("spothedge")
class SpotHedgePlacer:
    """SkyServe-like placement; see the module docstring."""

    every_round = True
    _FILTERS = ("gpu_type", "placement", "policy", "spot", "excluded", "capacity")

    def __init__(self, *, extra_replicas: int = 1, avoid_zone_s: float = 1800.0, name: str = "spothedge"):
        if extra_replicas < 0:
            raise ValueError(f"extra_replicas must be >= 0, got {extra_replicas}")
        self.name = name
        self.extra_replicas = extra_replicas
        self.avoid_zone_s = avoid_zone_s
        self._filters = framework.make_filters(self._FILTERS)
        self._verdicts: dict[tuple, bool] = {}

    def place(self, view: PlanView) -> PlanOutcome:
        start = time.perf_counter()
        policy = view.specs.policy
        cycle = framework.Cycle(policy, view.specs.latency_map, view.excluded)
        left = {o.key: o.gpus_capacity for o in view.offers}
        by_key = {o.key: o for o in view.offers}
        counts: dict[tuple[str, str], int] = {}
        short = 0.0
        demands = [problem.DeploymentDemand.of(doc, view.decisions[name].replicas_by_region, policy)
                   for name, doc in sorted(view.specs.deployments.items()) if name in view.decisions]
        for demand in sorted(demands, key=lambda d: (-d.priority, d.name)):
            target = view.decisions[demand.name].replicas
            if target <= 0:
                continue
            dview = candidates.make_view(demand, policy)
            usable = [o for o in view.offers if self._usable(cycle, dview, o)]
            spot = [o for o in usable if o.tier is fm.Tier.SPOT]
            other = [o for o in usable if o.tier is not fm.Tier.SPOT]
            need_other = float(target)
            if dview.spot_allowed and spot:
                self._spread(demand.name, dview, spot, target, left, counts, view)
                need_other = max(0.0, target - self._ready_spot_units(demand.name, dview, view))
            short += self._fill(demand.name, dview, other, need_other, left, counts, by_key)
        placement = problem.Placement({k: n for k, n in counts.items() if n > 0})
        prob = problem.PlacementProblem((), tuple(view.offers), policy, view.specs.latency_map)
        return PlanOutcome(placement, evaluate.cost_per_hour(prob, placement), short, time.perf_counter() - start,
                           "rule")

    def _usable(self, cycle: framework.Cycle, dview: framework.DeploymentView, offer: problem.PoolOffer) -> bool:
        """The solver's filter plugins' verdict, remembered per (deployment, offer, exclusion):
        it depends on nothing else, and offers repeat from round to round."""
        key = (dview.name, id(dview.demand.spec), offer, cycle.excluded_pools.get(offer.key))
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = all(f.filter(framework.Candidate(cycle, dview, offer)).ok for f in self._filters)
            if len(self._verdicts) > 20_000:
                self._verdicts.clear()
            self._verdicts[key] = verdict
        return verdict

    @staticmethod
    def _unit_price(dview: framework.DeploymentView, offer: problem.PoolOffer) -> float:
        units = dview.units_by_type.get(offer.gpu_type, 1.0)
        return offer.price_per_node_hour_usd / max(units, 1e-9)  # one replica per VM

    def _ready_spot_units(self, name: str, dview: framework.DeploymentView, view: PlanView) -> float:
        units = 0.0
        for cluster, r in view.snapshot.replicas():
            pool = cluster.pools.get(r.pool_id)
            if (r.deployment == name and r.state is fm.ReplicaState.READY and r.replica_id not in view.doomed
                    and pool is not None and pool.tier is fm.Tier.SPOT):
                units += dview.units_by_type.get(pool.gpu_type, 1.0)
        return units

    def _spread(self, name: str, dview: framework.DeploymentView, offers: list[problem.PoolOffer], target: int,
                left: dict[str, int], counts: dict[tuple[str, str], int], view: PlanView) -> None:
        """Spot replicas covering ``target`` units plus ``extra_replicas``, zone by zone."""
        recent = {z for z, at in view.preempted_zones.items() if view.now_s - at < self.avoid_zone_s}
        zones: dict[str, list[problem.PoolOffer]] = {}
        for o in offers:
            zones.setdefault(o.zone or o.region, []).append(o)
        active = {z: os for z, os in zones.items() if z not in recent} or zones
        per_zone = {z: 0 for z in active}
        units, extra = 0.0, 0
        gpus = dview.gpus_for
        while units < target or extra < self.extra_replicas:
            if units >= target:
                extra += 1
            best = None
            for zone in sorted(per_zone):
                fits = [o for o in active[zone] if left[o.key] >= gpus(o.gpu_type)]
                if not fits:
                    continue
                offer = min(fits, key=lambda o: (self._unit_price(dview, o), o.key))
                rank = (per_zone[zone], self._unit_price(dview, offer), zone)
                if best is None or rank < best[0]:
                    best = (rank, zone, offer)
            if best is None:
                return
            _, zone, offer = best
            per_zone[zone] += 1
            left[offer.key] -= gpus(offer.gpu_type)
            counts[(name, offer.key)] = counts.get((name, offer.key), 0) + 1
            units += dview.units_by_type.get(offer.gpu_type, 1.0)

    def _fill(self, name: str, dview: framework.DeploymentView, offers: list[problem.PoolOffer], need: float,
              left: dict[str, int], counts: dict[tuple[str, str], int],
              by_key: Mapping[str, problem.PoolOffer]) -> float:
        """Cheapest-per-unit on-demand replicas covering ``need`` units, first one in each region or
        cloud still missing for the spec's isolation; returns what stays short."""
        placement_rules = dview.demand.spec.placement
        mine = [by_key[k] for (d, k), n in counts.items() if d == name and n > 0 and k in by_key]
        regions = {o.region for o in mine}
        clouds = {o.cloud for o in mine}
        price = lambda o: (self._unit_price(dview, o), o.key)  # noqa: E731
        while len(regions) < placement_rules.min_distinct_regions or len(clouds) < placement_rules.min_distinct_clouds:
            short_cloud = len(clouds) < placement_rules.min_distinct_clouds
            fresh = [o for o in offers if left[o.key] >= dview.gpus_for(o.gpu_type)
                     and (o.cloud not in clouds if short_cloud else o.region not in regions)]
            if not fresh:
                break
            offer = min(fresh, key=price)
            left[offer.key] -= dview.gpus_for(offer.gpu_type)
            counts[(name, offer.key)] = counts.get((name, offer.key), 0) + 1
            need -= dview.units_by_type.get(offer.gpu_type, 1.0)
            regions.add(offer.region)
            clouds.add(offer.cloud)
        for offer in sorted(offers, key=price):
            per = dview.gpus_for(offer.gpu_type)
            units = dview.units_by_type.get(offer.gpu_type, 1.0)
            while need > 1e-9 and left[offer.key] >= per:
                left[offer.key] -= per
                counts[(name, offer.key)] = counts.get((name, offer.key), 0) + 1
                need -= units
        return max(0.0, need)


def cheapest_region(specs: planner.SpecView, mean_rps: Mapping[str, Mapping[str, float]],
                    settings: problem.SolverSettings | None = None) -> tuple[str, float]:
    """The region where on-demand (and reserved) capacity serves the mean demand at least cost, with
    isolation and latency rules lifted; (region, $/h). Regions that cannot hold every deployment
    lose to any that can."""
    relaxed_specs = relaxed(specs)
    declared = planner.declared_offers(specs)
    demand = {}
    for name, doc in specs.deployments.items():
        cap = throughput.capacity_rps(doc.spec) or 1.0
        util = doc.spec.scaling.target_utilization
        wanted = {r: math.ceil(rps / (cap * util) - 1e-9) for r, rps in mean_rps.get(name, {}).items()}
        if sum(wanted.values()) < doc.spec.scaling.min_replicas and doc.spec.sla.client_regions:
            first = doc.spec.sla.client_regions[0]
            wanted[first] = wanted.get(first, 0) + doc.spec.scaling.min_replicas - sum(wanted.values())
        demand[name] = autoscaler.Decision(sum(wanted.values()), wanted, "mean demand")
    base = settings or problem.SolverSettings()
    relax_settings = base.without_filters("latency")
    best: tuple[float, float, str] | None = None
    for region in sorted({o.region for o in declared}):
        offers = [o for o in declared if o.region == region and o.tier is not fm.Tier.SPOT]
        if not offers:
            continue
        prob = planner.build_problem(relaxed_specs, demand, offers, {})
        result = solver.solve(prob, time_limit_s=5.0, settings=relax_settings)
        unplaced = sum(u.replicas for u in result.unplaced)
        rank = (unplaced, result.cost_per_hour_usd, region)
        if best is None or rank < best:
            best = rank
    if best is None:
        raise ValueError("no region has on-demand or reserved pools for the on-demand single-region baseline")
    return best[2], best[1]
