"""The cost floor of a set of specs: the least a fleet can cost per hour that serves every deployment's
smallest possible demand and keeps the specs' hard rules, whatever the traffic and whoever places it.

Every plan the scheduler makes serves each deployment's autoscaled demand, which is never below
``max(min_replicas, 1)`` (``min_replicas`` for a deployment that may scale to zero), and keeps the
rules the solver enforces: GPU types, allowed clouds and regions, isolation
(``min_distinct_clouds``/``min_distinct_regions``), spot allowed and its share cap, cloud and team
quotas, pool sizes, the nodes a pool may not go below (a reserved commitment is paid whether it
runs anything or not), and coverage of the always-served client regions
(``sla.always_served_regions``: a replica within each one's SLA at every moment, traffic or not).
The floor solves that problem for the smallest demand there can be, with latency rules lifted for
demand (any pool may serve it; coverage still needs a pool within the region's SLA), spot replicas
counted at their full capacity, identical pools kept apart and nothing but prices in the objective;
its value is the solver's proven lower bound. Lifting rules and lowering demand can only make a plan
cheaper, so a fleet that serves that demand and keeps the rules at every moment costs at least the
floor. Two limits: a fleet that leaves a deployment's minimum unserved or an always-served region
uncovered (``reasons`` says why for each) can cost less, and the solver's own rounding (a replica's
capacity rounded down to 1/1000s of a reference replica, budgets rounded up) is a hair stricter than
the rules. ``warm_pool`` is not counted.

Pure: the caller passes the specs and, optionally, the pools (default: every pool the Cluster specs
declare, at their maximum size)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from scheduler import autoscaler, solver
from scheduler.control import planner
from scheduler.solver import evaluate, problem

# A floor is a proof only if the solve proves it: no relative gap, no scores, one deterministic worker;
# spot replicas count at their full capacity (the SpotHedge credit is the scheduler's caution, not a rule).
SETTINGS = problem.SolverSettings(
    scores={}, replica_usd_per_hour=0.0, churn_usd_per_replica=0.0, relative_gap=0.0, spot_capacity_credit=1.0,
    num_search_workers=1, small_model_workers=1, aggregate_pools=False, demand_region_filters=False,
    spot_hedges=False)


# The rules a floor keeps, as its reports name them.
RULES = ("isolation, GPU types, allowed clouds and regions, spot caps, quotas, pool minimums and reserved nodes, "
         "always-served regions")


def headline(usd_per_hour: float, proven: bool) -> str:
    """The floor in one line, as ``meridian plan`` and ``meridian simulate`` print it."""
    how = "proven" if proven else "solver bound"
    return (f"Cost floor of these specs: ${usd_per_hour:,.2f}/h ({how}): no fleet that serves every deployment's "
            f"minimum and keeps their rules ({RULES}) costs less, whatever the traffic.")


@dataclasses.dataclass(frozen=True)
class Floor:
    """``usd_per_hour``: a proven lower bound on any rule-keeping fleet's cost per hour (equal to the
    plan's cost when ``proven``). ``placement``: (deployment, pool key) -> replicas of the plan that
    attains it; ``nodes``: pool key -> nodes it runs (only pools with any); ``unplaced``: the
    deployments whose minimum (or an always-served region) it cannot place, ``reasons`` why, one line
    each (``deployment: ...``)."""

    usd_per_hour: float
    plan_usd_per_hour: float
    proven: bool
    placement: dict[tuple[str, str], int]
    nodes: dict[str, int]
    unplaced: tuple[str, ...]
    solve_time_s: float
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"usd_per_hour": round(self.usd_per_hour, 4), "plan_usd_per_hour": round(self.plan_usd_per_hour, 4),
                "summary": headline(self.usd_per_hour, self.proven),
                "proven": self.proven, "unplaced": list(self.unplaced), "reasons": list(self.reasons),
                "placement": [{"deployment": d, "pool": k, "replicas": n}
                              for (d, k), n in sorted(self.placement.items())],
                "nodes": dict(sorted(self.nodes.items())), "solve_time_s": round(self.solve_time_s, 3)}


def minimum_demand(specs: planner.SpecView) -> dict[str, autoscaler.Decision]:
    """Each deployment's smallest possible autoscaler decision: ``max(min_replicas, 1)``, or
    ``min_replicas`` for one that may scale to zero (left out at 0), put in its first client region
    (with latency rules lifted, which region does not matter)."""
    out = {}
    for name, doc in sorted(specs.deployments.items()):
        least = doc.spec.scaling.least_replicas
        if least > 0 and doc.spec.sla.client_regions:
            out[name] = autoscaler.Decision(least, {doc.spec.sla.client_regions[0]: least}, "cost floor: minimum")
    return out


def compute(specs: planner.SpecView, pools: Sequence[problem.PoolOffer] | None = None, *,
            time_limit_s: float = 30.0) -> Floor:
    """The floor of ``specs`` over ``pools`` (default: the pools their Cluster specs declare)."""
    offers = list(pools) if pools is not None else planner.declared_offers(specs)
    prob = planner.build_problem(specs, minimum_demand(specs), offers, {})
    result = solver.solve(prob, time_limit_s=time_limit_s, settings=SETTINGS)
    plan_cost = evaluate.cost_per_hour(prob, result.placement)
    missed = [*result.unplaced, *(u for u in result.uncovered if not u.served_from)]
    unplaced = tuple(sorted({u.deployment for u in missed}))
    reasons = tuple(f"{u.deployment}: {u.reason}" for u in missed)
    # The solver's lower bound is the floor (never above the plan's cost); the plan attains it when
    # the solve is proven optimal.
    bound = min(plan_cost, max(0.0, result.lower_bound))
    proven = (result.status is problem.SolveStatus.OPTIMAL and not unplaced
              and bound >= plan_cost - 1e-6 * max(1.0, plan_cost))
    nodes = {k: n for k, n in evaluate.pool_nodes(prob, result.placement).items() if n > 0}
    return Floor(bound, plan_cost, proven, {k: n for k, n in result.placement.replicas.items() if n > 0},
                 nodes, unplaced, result.solve_time_s, reasons)
