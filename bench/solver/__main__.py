"""Placement solver benchmark: ``python -m bench.solver``.

For growing synthetic fleets (seeded; real regions, instance types and prices from the catalog, RTTs
from the latency map), prints in one run: the solver's time, cost and objective, the LP-relaxation
lower bound and the gap to it, the greedy cheapest-first baseline on the same instance, and an
incremental re-solve after one deployment's demand changes (warm start from the plan), and a
stronger lower bound than the LP's (``bound.py``: Lagrangian relaxation of the shared limits by
column generation, each deployment's own problem integer; ``--bound-s`` seconds per fleet).

Objective = hourly cost + latency/spot scores + unserved-demand penalty (only demand some pool
could serve counts) + the penalty of covered client regions some pool could reach but no replica
does; the gap is (objective - bound) / objective."""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time

import ortools

from bench import common
from bench.solver import bound, fleet
from scheduler import solver
from scheduler.solver import candidates, evaluate, formulation, greedy

DEFAULT_SIZES = "50x60,100x120,200x200,500x300,500x300:heavy"


def greedy_baseline(prob: solver.PlacementProblem) -> tuple[float, float, float, float]:
    """(seconds, cost/h, objective, unplaced reference replicas) of the priority-ordered greedy."""
    settings = solver.SolverSettings()
    t = time.perf_counter()
    c = candidates.build(prob, settings)
    active = [d for d in range(len(c.views)) if c.arcs_by_d[d] and c.views[d].demand.demand_replicas
              and not candidates.isolation_reason(c, d)]
    sol = greedy.place(prob, c, active, order_by="priority")
    elapsed = time.perf_counter() - t
    placement = evaluate.split(c, sol, None)
    if placement is None:
        placement = evaluate.split(candidates.build(prob, settings.model_copy(update={"aggregate_pools": False})),
                                   sol, None)
    covered = evaluate.covered(c, sol.flows)
    parts = evaluate.breakdown(prob, c, settings, sol, placement or solver.Placement(), None, covered, set(active))
    short = sum(max(0, w * formulation.SCALE - covered.get((d, r), 0))
                for d in active for r, w in c.views[d].demand.replicas_by_region.items()) / formulation.SCALE
    return elapsed, parts.cost_usd, parts.objective, short


def unplaced_placeable(result: solver.PlacementResult) -> float:
    """Unserved reference replicas the filters did not rule out (capacity, quotas, budgets...)."""
    return sum(u.replicas for u in result.unplaced if u.constraint not in solver.problem.STRUCTURAL)


def run(size: str, time_limit_s: float, seed: int, bound_s: float = 0.0) -> dict[str, object]:
    shape, _, variant = size.partition(":")
    n_dep, n_pool = (int(x) for x in shape.split("x"))
    heavy = variant == "heavy"
    prob = fleet.make(n_dep, n_pool, seed=seed, demand_scale=8.0 if heavy else 1.0, pool_scale=6.0 if heavy else 1.0)
    result = solver.solve(prob, time_limit_s=time_limit_s)
    g_s, g_cost, g_obj, g_short = greedy_baseline(prob)
    # One change: the first deployment with demand asks for 2 more replicas in its first region.
    deps = list(prob.deployments)
    i = next(i for i, d in enumerate(deps) if d.demand_replicas and d.name in {n for n, _ in result.placement.replicas})
    region = sorted(deps[i].replicas_by_region)[0]
    deps[i] = dataclasses.replace(deps[i], replicas_by_region={**deps[i].replicas_by_region,
                                                               region: deps[i].replicas_by_region[region] + 2})
    changed = dataclasses.replace(prob, deployments=tuple(deps))
    t = time.perf_counter()
    again = solver.solve(changed, time_limit_s=time_limit_s, current=result.placement)
    incr_s = time.perf_counter() - t
    plan = solver.diff(result.placement, again.placement)
    lp = result.stats.get("lp_bound", float("nan"))
    strong = float("nan")
    if bound_s > 0:
        def progress(k: int, value: float) -> None:
            print(f"  {size}: Lagrangian bound round {k}: {value:.1f}", file=sys.stderr, flush=True)
        strong = bound.lagrangian(prob, result.placement, bound_s, progress).best
    return {
        "size": size, "deployments": n_dep, "pools": n_pool, "pairs": int(result.stats.get("pairs", 0)),
        "vars": int(result.stats.get("variables", 0)),
        "search": (f"{int(result.stats['neighbourhood_steps'])} steps" if "neighbourhood_steps" in result.stats
                   else f"{int(result.stats.get('sat_variables', result.stats.get('variables', 0)))} v"),
        "status": result.status.value, "solve_s": result.solve_time_s, "cost": result.cost_per_hour_usd,
        "objective": result.objective, "lp_bound": lp, "penalty": result.stats.get("unplaced_usd", 0.0),
        "gap_lp": (result.objective - lp) / result.objective if result.objective else 0.0, "gap": result.gap,
        "strong": strong, "gap_strong": (result.objective - max(result.lower_bound, strong)) / result.objective
        if result.objective and strong == strong else float("nan"),
        "unplaced": unplaced_placeable(result), "g_s": g_s, "g_cost": g_cost, "g_obj": g_obj, "g_short": g_short,
        "incr_mode": again.mode, "incr_s": incr_s, "incr_changes": len(plan.changes),
        "incr_unplaced": unplaced_placeable(again),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.solver", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES,
                        help=f"comma-separated DEPLOYMENTSxPOOLS[:heavy] (default {DEFAULT_SIZES}); "
                             "heavy: 8x the demand per region, 6x the pool sizes, quotas and budgets")
    parser.add_argument("--time-limit", type=float, default=10.0, help="solver time limit per solve, seconds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--bound-s", type=float, default=120.0,
                        help="seconds per fleet for the Lagrangian lower bound (default 120: the heavy fleet's first "
                             "round takes about 110 s; 0: LP bound only)")
    args = parser.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores, {common.cpu_model()}; python {platform.python_version()}, "
          f"ortools {ortools.__version__}; CP-SAT workers {solver.SolverSettings().num_search_workers}; "
          f"time limit {args.time_limit:g}s; seed {args.seed}")
    header = (f"{'fleet':>15} {'pairs':>6} {'vars':>6} {'search':>10} {'status':>8} {'solve s':>7} {'cost $/h':>9} "
              f"{'objective':>9} {'penalty':>8} {'LP bound':>9} {'gap LP':>6} {'gap':>6} {'L bound':>9} {'gap L':>6} "
              f"{'unpl':>5} | "
              f"{'greedy $/h':>10} {'greedy obj':>10} {'unpl':>5} {'vs greedy':>9} | {'re-solve':>11} {'s':>5} {'diff':>4}")
    print(header)
    print("-" * len(header))
    for size in args.sizes.split(","):
        r = run(size.strip(), args.time_limit, args.seed, args.bound_s)
        print(f"{r['size']:>15} {r['pairs']:>6} {r['vars']:>6} {r['search']:>10} {r['status']:>8} {r['solve_s']:>7.2f} "
              f"{r['cost']:>9.1f} {r['objective']:>9.1f} {r['penalty']:>8.0f} {r['lp_bound']:>9.1f} {r['gap_lp']:>6.1%} "
              f"{r['gap']:>6.1%} {r['strong']:>9.1f} {r['gap_strong']:>6.1%} {r['unplaced']:>5.1f} | "
              f"{r['g_cost']:>10.1f} {r['g_obj']:>10.1f} {r['g_short']:>5.1f} "
              f"{r['objective'] / r['g_obj'] - 1 if r['g_obj'] else 0.0:>+9.1%} | {r['incr_mode']:>11} "
              f"{r['incr_s']:>5.2f} {r['incr_changes']:>4}", flush=True)
    print("objective = cost + latency/spot scores + penalty for unserved demand some pool could serve (5000 $/h per "
          "reference replica x priority weight) + for each client region it could cover but does not, that weight x "
          "(1 + the deployment's demand); gap LP: (objective - LP relaxation bound) / objective; gap: against "
          "the best bound the solve knew (LP or CP-SAT's own on an unrestricted model); L bound: the Lagrangian "
          "bound of bench/solver/bound.py (shared limits relaxed, each deployment's own problem integer; --bound-s "
          "seconds), gap L: against the best of all these bounds (bounds are on the model's objective, whose latency "
          "scores average over the regions a replica can reach; the objective here scores actual flows, so it can sit "
          "a fraction of a percent below a bound); search: neighbourhood steps, or CP-SAT variables (v); unpl: "
          "unserved reference replicas "
          "blocked by capacity, quotas or budgets; vs greedy: objective against the greedy cheapest-first baseline; "
          "re-solve: one deployment +2 replicas, warm-started from the plan; diff: (deployment, pool) entries changed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
