"""The demand-following bound: for each tick, the least a fleet can cost that serves that tick's
demand within the SLAs, summed over the run. No online policy that serves the demand can cost less.

Per tick and deployment, each client region's demand is its requests/s over what one replica of the
reference GPU type serves within the SLA (``scheduler.solver.throughput.capacity_rps``, the unit the
autoscaler and the solver count in), rounded **down** to whole reference replicas so that the bound
never asks for more than the requests need; every region that sent a request must have a replica
within its SLA's reach (coverage), and the deployment's minimum replicas hold. The placement solver
then solves that tick's problem as the cost floor does (``scheduler.control.floor``: every declared
pool at its maximum size, reserved nodes and pool minimums paid, spot counted at full capacity,
nothing but prices in the objective, one deterministic worker), but with the deployments' latency
rules kept for demand: the solver's proven lower bound is the tick's bound. A region that is down
(the scenario's outages) offers no pool while it is down, but its reserved and minimum nodes bill:
a fleet there serves nobody, and no fleet can shed those. What it leaves out makes it lower, never
higher: no provisioning delay or cold start, no headroom for the autoscaler's target utilisation,
no stock-outs or preemptions, a fleet re-planned from scratch every tick.
One limit: the solver's own rounding of capacities (1/1000s of a reference replica) is a hair
stricter than the rules, as for the floor.

Ticks with the same demand vector share one solve (a day has far fewer distinct vectors than ticks)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence

import numpy as np

from meridian.simulate import trace as trace_mod
from scheduler import autoscaler, solver
from scheduler.control import floor as floor_mod
from scheduler.control import planner
from scheduler.solver import evaluate, problem, throughput

SETTINGS = floor_mod.SETTINGS.model_copy(update={"demand_region_filters": True})
OBJECTIVE_RESOLUTION = 1e-3  # $/h: the precision of the solver's reported lower bound


@dataclasses.dataclass(frozen=True)
class DemandBound:
    """``usd``: the bound over the run; ``usd_per_hour`` its mean per hour. ``proven``: every tick's
    solve was proven optimal with its demand placed; ``unproven_ticks``: ticks whose solve was not
    (demand left unplaced or the time limit reached: their figure is the solver's lower bound or the
    cost of what it placed, whichever is lower, so still a bound)."""

    usd: float
    hours: float
    ticks: int
    distinct_demands: int
    proven: bool
    unproven_ticks: int
    solve_s: float
    usd_by_tick: tuple[float, ...] = dataclasses.field(default=(), repr=False)  # $ in each tick
    # (deployment, GPU type, tier) -> replica-hours of the per-tick plans: what the bound's fleet ran
    replica_hours: Mapping[tuple[str, str, str], float] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def usd_per_hour(self) -> float:
        return self.usd / self.hours if self.hours > 0 else 0.0

    def to_dict(self) -> dict:
        return {"usd": round(self.usd, 4), "usd_per_hour": round(self.usd_per_hour, 4), "hours": self.hours,
                "ticks": self.ticks, "distinct_demands": self.distinct_demands, "proven": self.proven,
                "unproven_ticks": self.unproven_ticks, "solve_s": round(self.solve_s, 3),
                "replica_hours": [{"deployment": d, "gpu_type": g, "tier": t, "replica_hours": round(h, 3)}
                                  for (d, g, t), h in sorted(self.replica_hours.items())],
                "summary": headline(self)}


def headline(b: DemandBound) -> str:
    how = "proven" if b.proven else f"solver bound; {b.unproven_ticks} tick(s) not proven optimal"
    return (f"Demand-following bound: ${b.usd_per_hour:,.2f}/h (${b.usd:,.0f} over the run, {how}): a fleet "
            f"re-planned every tick for that tick's requests within the SLAs, with no provisioning delay; "
            f"no online policy that serves the demand costs less ({b.distinct_demands} distinct demand(s) of "
            f"{b.ticks} ticks solved).")


Key = tuple[tuple[str, tuple[tuple[str, int], ...], tuple[str, ...]], ...]
Fleet = dict[tuple[str, str, str], int]  # (deployment, GPU type, tier) -> replicas


def demand_key(specs: planner.SpecView, tr: trace_mod.Trace, k: int,
               capacity_rps: dict[str, float]) -> Key:
    """Tick ``k``'s demand: per deployment, whole reference replicas per client region (rounded
    down, the deployment's minimum kept) and the regions that sent requests."""
    by_dep: dict[str, dict[str, float]] = {}
    for i, s in enumerate(tr.streams):
        by_dep.setdefault(s.deployment, {})[s.client_region] = float(tr.arrivals[k, i]) / tr.tick_s
    out = []
    for name, doc in sorted(specs.deployments.items()):
        rates = by_dep.get(name, {})
        cap = capacity_rps.get(name, 0.0)
        reps = {r: (int(math.floor(rps / cap + 1e-9)) if cap > 0 else 0) for r, rps in rates.items()}
        least = doc.spec.scaling.least_replicas
        short = least - sum(reps.values())
        if short > 0:
            region = max(rates, key=lambda r: (rates[r], r)) if rates else (doc.spec.sla.client_regions or [None])[0]
            if region is not None:
                reps[region] = reps.get(region, 0) + short
        covered = tuple(sorted(r for r, rps in rates.items() if rps > 0))
        out.append((name, tuple(sorted((r, n) for r, n in reps.items() if n > 0)), covered))
    return tuple(out)


def solve_key(specs: planner.SpecView, offers: list[problem.PoolOffer], key: Key,
              time_limit_s: float = 30.0) -> tuple[float, bool, Fleet]:
    """($/h bound, proven, the plan's replicas by deployment, GPU type and tier) of one demand vector."""
    decisions = {}
    for name, reps, covered in key:
        n = sum(c for _, c in reps)
        if n == 0 and not covered:
            continue
        decisions[name] = autoscaler.Decision(n, dict(reps), "demand-following bound", covered_regions=covered)
    prob = planner.build_problem(specs, decisions, offers, {})
    result = solver.solve(prob, time_limit_s=time_limit_s, settings=SETTINGS)
    plan_cost = evaluate.cost_per_hour(prob, result.placement)
    missed = [*result.unplaced, *(u for u in result.uncovered if not u.served_from)]
    bound = min(plan_cost, max(0.0, result.lower_bound))
    # The solver reports its bound to 1/1000 of its objective's unit ($/h): an optimal plan whose
    # cost is within that of the bound is proven (seen: bound 58.771 for a plan of 58.7712).
    proven = (result.status is problem.SolveStatus.OPTIMAL and not missed
              and bound >= plan_cost - max(OBJECTIVE_RESOLUTION, 1e-6 * plan_cost))
    by_key = {o.key: o for o in offers}
    fleet: Fleet = {}
    for (name, pool), n in result.placement.replicas.items():
        offer = by_key.get(pool)
        if n > 0 and offer is not None:
            k = (name, offer.gpu_type, offer.tier.value)
            fleet[k] = fleet.get(k, 0) + n
    return bound, proven, fleet


def compute(specs: planner.SpecView, tr: trace_mod.Trace, *, time_limit_s: float = 30.0,
            down: Sequence[tuple[int, int, str]] = ()) -> DemandBound:
    """The bound of ``tr`` (the run's measured ticks) on ``specs``' declared pools. ``down``: the
    scenario's outages as (first tick down, first tick back up, cloud region): in those ticks no pool
    of the region serves, and its reserved and minimum nodes still bill (no fleet can shed them)."""
    start = time.perf_counter()
    offers = planner.declared_offers(specs)
    capacity_rps = {}
    for name, doc in specs.deployments.items():
        cap = throughput.capacity_rps(doc.spec)
        capacity_rps[name] = float(cap) if cap else 0.0
    memo: dict[tuple[frozenset[str], Key], tuple[float, bool, Fleet]] = {}
    per_tick = np.zeros(tr.ticks)
    hours: dict[tuple[str, str, str], float] = {}
    proven = True
    unproven = 0
    for k in range(tr.ticks):
        lost = frozenset(region for first, back, region in down if first <= k < back)
        key = (lost, demand_key(specs, tr, k, capacity_rps))
        if key not in memo:
            up = [o for o in offers if o.region not in lost]
            sunk = sum(o.pool.nodes_min * o.price_per_node_hour_usd for o in offers if o.region in lost)
            usd_h, ok, fleet = solve_key(specs, up, key[1], time_limit_s)
            memo[key] = (usd_h + sunk, ok, fleet)
        usd_h, ok, fleet = memo[key]
        per_tick[k] = usd_h * tr.tick_s / 3600.0
        for what, n in fleet.items():
            hours[what] = hours.get(what, 0.0) + n * tr.tick_s / 3600.0
        proven = proven and ok
        unproven += not ok
    return DemandBound(float(per_tick.sum()), tr.ticks * tr.tick_s / 3600.0, tr.ticks, len(memo), proven,
                       unproven, time.perf_counter() - start, tuple(float(x) for x in per_tick), hours)
