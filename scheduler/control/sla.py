"""A deployment's SLA, client region by client region, as the leader sees it now: whether the region
must be covered (it sends traffic, or is always served), which live replicas are within its SLA's
reach (the solver's own filters, through ``scheduler.solver.validate.coverage``), the expected TTFT
p99 from the nearest of them (RTT + the capacity model's prefill + the TTFT headroom the plan keeps,
and for an embedding model the p99 queue wait of a replica at its capacity, as the latency filter
counts it),
the TTFT p99 routers measure for that region's requests, and why the plan leaves it unmet (or at risk:
demand unplaced, a hedge the plan could not keep, an expected TTFT above the target once the queue
counts, a measured TTFT near the target).
``meridian get deployment NAME`` prints it; the admin API serves it with the deployment's document.

Pure: the plan, the live replicas and the traffic in, a JSON-ready dict out."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from meridian import latency
from meridian.fleet import models as fm
from meridian.spec import deployment as deployment_spec
from scheduler.control import fleet as fleet_mod
from scheduler.solver import problem, throughput, validate
from scheduler.state import records

# A region whose measured TTFT p99 is above this share of the target is at risk.
AT_RISK_SHARE = 0.9


def status_settings(settings: problem.SolverSettings) -> problem.SolverSettings:
    """``settings`` as the status judges coverage: replicas that run count where they run (a full
    or stocked-out pool still holds them)."""
    return settings.without_filters("capacity", "excluded")


def status(name: str, doc: deployment_spec.ModelDeployment, *, plan: problem.PlacementResult | None,
           prob: problem.PlacementProblem | None, replicas: Sequence[tuple[fleet_mod.ClusterView, fm.ReplicaReport]],
           demand: Iterable[records.Demand], latency_map: latency.LatencyMap,
           settings: problem.SolverSettings | None = None, basis: str = "leader") -> dict:
    """The per-region SLA status of deployment ``name`` (see the module docstring). ``plan`` and
    ``prob``: the leader's last plan and its problem (None on a standby: only measurements then);
    ``replicas``: the live (cluster, replica) pairs of the fleet; ``demand``: router traffic."""
    settings = settings or problem.SolverSettings()
    spec = doc.spec
    sla = spec.sla
    measured = {d.client_region: d for d in demand if d.model == spec.model.served_name}
    mine = [(c, r) for c, r in replicas if r.deployment == name
            and r.state in (fm.ReplicaState.READY, fm.ReplicaState.STARTING)]
    demand_of = next((d for d in prob.deployments if d.name == name), None) if prob is not None else None
    required = set(demand_of.coverage) if demand_of is not None else set(sla.always_served_regions)
    reach: dict[tuple[str, str], validate.Reach] = {}
    if prob is not None:
        # Every client region of the SLA, judged on the replicas that run now, with the solver's filters.
        probe = problem.DeploymentDemand.of(doc, {}, prob.policy, covered_regions=sla.client_regions)
        counts = [(name, problem.pool_key(c.cluster_id, r.pool_id), 1) for c, r in mine]
        live = problem.Placement.from_counts(counts)
        one = problem.PlacementProblem((probe,), prob.pools, prob.policy, prob.latency_map, prob.excluded_pools)
        reach = validate.coverage(one, live, settings)
    unmet = {u.client_region: u for u in plan.uncovered_of(name)} if plan is not None else {}
    unhedged = {u.client_region: u for u in plan.unhedged_of(name)} if plan is not None else {}
    short = {}
    for u in plan.unplaced_of(name) if plan is not None else ():
        short.setdefault(u.client_region, u)
    regions = []
    for region in sla.client_regions:
        got = reach.get((name, region), validate.Reach())
        by_key = {problem.pool_key(c.cluster_id, r.pool_id): (c, r) for c, r in mine}
        near = [_replica(by_key, key, region, spec, latency_map, settings, beyond=False) for key in got.strict]
        near += [_replica(by_key, key, region, spec, latency_map, settings, beyond=True) for key in got.relaxed]
        near = [n for n in near if n is not None]
        near.sort(key=lambda n: n["expected_ttft_p99_ms"])
        traffic = measured.get(region)
        entry = {
            "client_region": region,
            "always_served": region in sla.always_served_regions,
            "required": region in required,
            "traffic_rps": round(traffic.requests_per_s, 3) if traffic else 0.0,
            "covered": got.covered,
            "covered_by": near,
            "expected_ttft_p99_ms": near[0]["expected_ttft_p99_ms"] if near else None,
            "measured_ttft_p99_ms": round(traffic.ttft_p99_ms, 1) if traffic and traffic.ttft_p99_ms > 0 else None,
        }
        entry.update(_verdict(entry, sla, unmet.get(region), short.get(region), unhedged.get(region), basis,
                              settings.ttft_headroom_ms))
        regions.append(entry)
    return {"deployment": name, "basis": basis, "ttft_p99_ms": sla.ttft_p99_ms, "tpot_p99_ms": sla.tpot_p99_ms,
            "max_rtt_ms": sla.max_rtt_ms, "ttft_headroom_ms": settings.ttft_headroom_ms, "regions": regions}


def _replica(by_key: dict, key: str, region: str, spec: deployment_spec.ModelDeploymentSpec,
             latency_map: latency.LatencyMap, settings: problem.SolverSettings, beyond: bool) -> dict | None:
    found = by_key.get(key)
    if found is None:
        return None
    c, r = found
    pool = c.pools.get(r.pool_id)
    gpu_type = pool.gpu_type if pool is not None else ""
    try:
        rtt = latency_map.rtt_ms(region, c.identity.region)
    except latency.UnknownRegion:
        return None
    fit = throughput.assess(spec, gpu_type) if gpu_type else throughput.TypeFit("", 0, None, 0.0)
    return {"replica": r.replica_id, "cluster": c.cluster_id, "region": c.identity.region, "gpu_type": gpu_type,
            "state": r.state.value, "rtt_ms": rtt, "beyond_max_rtt": beyond,
            "prefill_ms": round(fit.prefill_ms, 1), "queue_wait_p99_ms": round(fit.wait_ms, 1),
            "expected_ttft_p99_ms": round(rtt + fit.loaded_ms + settings.ttft_headroom_ms, 1)}


def _verdict(entry: dict, sla: deployment_spec.Sla, uncovered: problem.Uncovered | None,
             unplaced: problem.Unplaced | None, unhedged: problem.Unhedged | None, basis: str,
             headroom_ms: float) -> dict:
    """status (met, at_risk, unmet, not_required, unknown), cause (a constraint code, or measured)
    and reason in words."""
    measured = entry["measured_ttft_p99_ms"]
    if uncovered is not None:
        return {"status": "unmet", "cause": uncovered.constraint, "reason": uncovered.reason}
    if entry["required"] and not entry["covered"] and basis == "leader":
        if entry["covered_by"]:
            return {"status": "unmet", "cause": "max_rtt", "reason": "served only beyond max_rtt_ms"}
        return {"status": "unmet", "cause": "starting", "reason": "no live replica within reach yet (the plan "
                                                                   "covers it: its replica is not running)"}
    if measured is not None and measured > sla.ttft_p99_ms:
        return {"status": "unmet", "cause": "measured", "reason": f"routers measure TTFT p99 {measured:g} ms > "
                                                                  f"target {sla.ttft_p99_ms:g} ms"}
    if unplaced is not None:
        return {"status": "at_risk", "cause": unplaced.constraint, "reason": unplaced.reason}
    if unhedged is not None:
        return {"status": "at_risk", "cause": "hedge", "reason": unhedged.reason}
    expected, nearest = entry["expected_ttft_p99_ms"], (entry["covered_by"] or [{}])[0]
    if entry["required"] and expected is not None and expected > sla.ttft_p99_ms and nearest.get("queue_wait_p99_ms"):
        rtt, prefill, wait = nearest["rtt_ms"], nearest["prefill_ms"], nearest["queue_wait_p99_ms"]
        return {"status": "at_risk", "cause": "queue", "reason": (
            f"expected TTFT p99 {expected:g} ms > target {sla.ttft_p99_ms:g} ms once {nearest['replica']} is loaded "
            f"to its capacity: {rtt:g} ms RTT + {prefill:g} ms prefill + {wait:g} ms queue wait (p99) + "
            f"{headroom_ms:g} ms headroom")}
    if measured is not None and measured > AT_RISK_SHARE * sla.ttft_p99_ms:
        return {"status": "at_risk", "cause": "measured", "reason": f"routers measure TTFT p99 {measured:g} ms, "
                                                                    f"within {100 * (1 - AT_RISK_SHARE):.0f}% of "
                                                                    f"{sla.ttft_p99_ms:g} ms"}
    if basis != "leader":
        return {"status": "unknown", "cause": "", "reason": "this node is a standby: coverage is the leader's"}
    if not entry["required"]:
        return {"status": "not_required", "cause": "", "reason": "no traffic and not always served: no replica needed"}
    return {"status": "met", "cause": "", "reason": ""}
