"""``meridian plan``: what the scheduler would do with a set of specs, without doing it.

The hypothetical spec set goes through the same autoscaler (state not kept) and solver as the live
loop, against the live fleet when this node leads and agents have reported, else against the pools
the Cluster specs declare. The report: the placement, its diff against the current placement, cost
per hour before and after, and SLA risks (demand left unplaced and client regions left uncovered,
each with the constraint that stops it;
client regions whose expected time to first token, RTT plus prefill, breaks or nears the SLA), and
the specs' cost floor (``scheduler.control.floor``: the least any fleet keeping their rules costs)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping

from meridian import latency
from meridian.fleet import models as fm
from scheduler import solver
from scheduler.control import floor as floor_mod
from scheduler.control import loop as loop_mod
from scheduler.control import planner
from scheduler.solver import evaluate, problem, throughput
from scheduler.state import records

TIGHT_SHARE = 0.8  # expected TTFT above this share of the SLA is reported as a risk


async def plan_report(loop: loop_mod.ControlLoop, hypothetical: planner.SpecView, *, traffic: records.TrafficLog,
                      now_s: float, leader: bool, time_limit_s: float) -> dict:
    snapshot = loop.fleet.snapshot(now_s)
    doomed = set(loop.events.doomed)
    live_pools = leader and any(c.pools for c in snapshot.live())
    if live_pools:
        open_dirs = loop.executor.open_directives()
        draining = {od.directive.action.replica_id for od in open_dirs
                    if isinstance(od.directive.action, fm.DrainReplica)}
        starts = [(od.cluster_id, od.directive.action) for od in open_dirs
                  if isinstance(od.directive.action, fm.StartReplica)]
        current = planner.observed_placement(snapshot, starts, draining, doomed)
        held = planner.held_gpus_by_pool(snapshot, starts, draining, doomed)
        pools, excluded = planner.pool_offers(snapshot, hypothetical, held_gpus=held,
                                              no_growth=loop.events.no_growth(now_s))
        basis = "live fleet"
    else:
        current = problem.Placement()
        pools, excluded = planner.declared_offers(hypothetical), {}
        basis = ("pools declared in Cluster specs (" + ("this node is a standby" if not leader
                                                        else "no agent has reported yet") + ")")
    demand = await traffic.demand(now_s, loop.config.demand_max_age_s)
    decisions = loop.autoscaler.decide(hypothetical, snapshot, demand, now_s, doomed=doomed, commit=False)
    prob = planner.build_problem(hypothetical, decisions, pools, excluded)
    coverage = {d.name: d.coverage for d in prob.deployments}
    result = await planner.solve_async(prob, time_limit_s=time_limit_s, current=current,
                                       settings=loop.solver_settings)
    before_specs = loop.specs if loop.specs.generation else hypothetical
    before = planner.build_problem(before_specs, {}, pools, excluded)
    cost_before = evaluate.cost_per_hour(before, current)
    change = solver.diff(current, result.placement)
    floor = None
    if hypothetical.clusters:
        floor = await asyncio.to_thread(floor_mod.compute, hypothetical, time_limit_s=time_limit_s)
    return {
        "basis": basis,
        "status": result.status.value,
        "message": result.message,
        "solve_time_s": round(result.solve_time_s, 4),
        "gap": round(result.gap, 5),
        "demand": {n: {"replicas": d.replicas, "by_region": dict(d.replicas_by_region), "reason": d.reason,
                       "covered_regions": list(coverage.get(n, ()))}
                   for n, d in sorted(decisions.items())},
        "placement": result.placement.to_dict(),
        "current": current.to_dict(),
        "diff": change.to_dict(),
        "cost_per_hour_usd": {"before": round(cost_before, 4), "after": round(result.cost_per_hour_usd, 4)},
        "unplaced": [{"deployment": u.deployment, "client_region": u.client_region, "replicas": round(u.replicas, 3),
                      "constraint": u.constraint, "reason": u.reason} for u in result.unplaced],
        "uncovered": [{"deployment": u.deployment, "client_region": u.client_region, "constraint": u.constraint,
                       "reason": u.reason, "served_from": u.served_from} for u in result.uncovered],
        "unhedged": [dataclasses.asdict(u) for u in result.unhedged],
        "risks": risks(prob, result, hypothetical.latency_map),
        "cost_floor": floor.to_dict() if floor is not None else None,
    }


def risks(prob: problem.PlacementProblem, result: problem.PlacementResult, lmap: latency.LatencyMap) -> list[str]:
    out = []
    for u in result.unplaced:
        out.append(f"{u.deployment}: {u.replicas:g} replica(s) of demand from {u.client_region} unplaced "
                   f"({u.constraint}): {u.reason}")
    for c in result.uncovered:
        what = "served only beyond max_rtt_ms" if c.served_from else "uncovered: no replica within its SLA's reach"
        out.append(f"{c.deployment}: {c.client_region} {what} ({c.constraint}): {c.reason}")
    for h in result.unhedged:
        out.append(f"{h.deployment}: {h.client_region} not hedged (spot.hedge): {h.reason}")
    if result.status is problem.SolveStatus.FEASIBLE and result.gap > 0.02:
        out.append(f"plan not proven optimal within the time limit (gap {result.gap:.1%})")
    if result.status in (problem.SolveStatus.NO_SOLUTION, problem.SolveStatus.ERROR):
        out.append(f"solver {result.status.value}: {result.message}")
    specs = {d.name: d.spec for d in prob.deployments}
    offers: Mapping[str, problem.PoolOffer] = {p.key: p for p in prob.pools}
    regions_of: dict[str, set[str]] = {}
    for (dep, key), n in result.placement.replicas.items():
        if n > 0 and key in offers:
            regions_of.setdefault(dep, set()).add(offers[key].region)
    for dep, regions in sorted(regions_of.items()):
        s = specs.get(dep)
        if s is not None and len(regions) == 1 and s.placement.min_distinct_regions <= 1:
            out.append(f"{dep}: every replica is in {next(iter(regions))}; losing that region stops it until it "
                       f"is re-placed elsewhere (placement.min_distinct_regions: 2 keeps a second region serving)")
    seen = set()
    for (dep, region, key), n in sorted(result.serving.items()):
        offer, s = offers.get(key), specs.get(dep)
        if n <= 0 or offer is None or s is None or (dep, region, offer.region, offer.gpu_type) in seen:
            continue
        seen.add((dep, region, offer.region, offer.gpu_type))
        try:
            rtt = lmap.rtt_ms(region, offer.region)
        except latency.UnknownRegion:
            continue
        fit = throughput.assess(s, offer.gpu_type)
        expected, sla = rtt + fit.loaded_ms, s.sla.ttft_p99_ms
        terms = f"RTT {rtt:.0f} + prefill {fit.prefill_ms:.0f}" + (
            f" + queue wait {fit.wait_ms:.0f} at capacity" if fit.wait_ms else "")
        where = f"{dep}: clients in {region} served from {offer.region} ({offer.gpu_type})"
        if s.sla.max_rtt_ms is not None and rtt > s.sla.max_rtt_ms:
            out.append(f"{where}: RTT {rtt:.0f} ms exceeds max_rtt_ms {s.sla.max_rtt_ms:g}")
        elif expected > sla:
            out.append(f"{where}: expected TTFT {expected:.0f} ms ({terms}) exceeds the SLA {sla:g} ms")
        elif expected > TIGHT_SHARE * sla:
            out.append(f"{where}: expected TTFT {expected:.0f} ms ({terms}) is within "
                       f"{100 - expected / sla * 100:.0f}% of the SLA {sla:g} ms "
                       + ("(a load above capacity will break it)" if fit.wait_ms else "(queueing will break it)"))
    return out
