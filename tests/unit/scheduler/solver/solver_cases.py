"""Builders for small placement problems in solver tests, and an independent checker of every hard
constraint (written from the spec, not from the solver's own ledger)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterable, Iterator
from unittest import mock

from meridian import capacity, fleet, latency
from meridian.spec import deployment as deployment_spec
from meridian.spec import policy as policy_spec
from scheduler import solver
from scheduler.solver import candidates, framework, linear, throughput

CHAT = "meta-llama/Llama-3.1-8B-Instruct"
BIG = "meta-llama/Llama-3.1-70B-Instruct"


def dep(name: str, *, regions: dict[str, int], gpu_types: Iterable[str] = ("L4",), ttft_ms: float = 2000,
        max_rtt_ms: float | None = None, clouds: int = 1, distinct_regions: int = 1, spot: bool = False,
        spot_share: float = 0.5, team: str = "", priority_class: str = "standard", priority: int = 100,
        source: str = CHAT, gpus: int = 1, gpus_by_type: dict[str, int] | None = None, max_replicas: int = 50,
        profile: dict[str, float] | None = None, placement_clouds: Iterable[str] = (),
        min_memory_gib: int | None = None, covered: Iterable[str] | None = None, always_served: Iterable[str] = (),
        tpot_ms: float = 200, embedding: bool = False, source_regions: Iterable[str] | None = None,
        spot_region_share: float | None = None, hedge: bool = False) -> solver.DeploymentDemand:
    spec = deployment_spec.ModelDeploymentSpec.model_validate({
        "model": {"source": source, "served_name": name},
        "resources": {"gpus_per_replica": gpus, "gpu_types": list(gpu_types), "gpus_by_type": gpus_by_type or {},
                      "min_gpu_memory_gib": min_memory_gib,
                      "throughput_profile": profile or {}},
        "sla": {"ttft_p99_ms": ttft_ms, "tpot_p99_ms": None if embedding else tpot_ms,
                "client_regions": list(source_regions or regions), "max_rtt_ms": max_rtt_ms,
                "always_served_regions": list(always_served)},
        "runtime": {"is_embedding": embedding},
        "scaling": {"min_replicas": 0, "max_replicas": max_replicas},
        "placement": {"min_distinct_clouds": clouds, "min_distinct_regions": distinct_regions,
                      "clouds": list(placement_clouds), "spot": {"allowed": spot, "max_share": spot_share, "hedge": hedge,
                                                                   **({} if spot_region_share is None else
                                                                      {"max_share_per_region": spot_region_share})}},
        "priority_class": priority_class,
    })
    return solver.DeploymentDemand(name, spec, dict(regions), team, priority_class, priority,
                                   covered_regions=None if covered is None else frozenset(covered))


def pool(cluster: str, cloud: str, region: str, gpu_type: str, price_per_node: float, *, gpus_per_node: int = 1,
         nodes_max: int = 4, nodes_min: int = 0, tier: str = "on_demand", pool_id: str | None = None) -> solver.PoolOffer:
    gpool = fleet.GpuPool(
        pool_id=pool_id or f"{gpu_type.lower()}-{tier.replace('_', '-')}", gpu_type=gpu_type, gpu_memory_gib=80,
        gpus_per_node=gpus_per_node, instance_type=f"{gpu_type}x{gpus_per_node}", nodes_current=nodes_min,
        nodes_min=nodes_min, nodes_max=nodes_max, gpus_free=nodes_min * gpus_per_node, tier=fleet.Tier(tier),
        price_per_node_hour_usd=price_per_node, quota_headroom_gpus=10_000)
    return solver.PoolOffer.of(cluster, cloud, region, gpool)


def policy(**spec: object) -> policy_spec.CapacityPolicySpec:
    base: dict[str, object] = {"clouds": [{"name": "aws"}, {"name": "gcp"}, {"name": "azure"}],
                               "priority_classes": [{"name": "critical", "value": 1000, "preempts": ["batch", "standard"]},
                                                    {"name": "standard", "value": 100, "preempts": ["batch"]},
                                                    {"name": "batch", "value": 10}]}
    base.update(spec)
    return policy_spec.CapacityPolicySpec.model_validate(base)


def problem(deployments: Iterable[solver.DeploymentDemand], pools: Iterable[solver.PoolOffer],
            pol: policy_spec.CapacityPolicySpec | None = None, excluded: dict[str, str] | None = None
            ) -> solver.PlacementProblem:
    return solver.PlacementProblem(tuple(deployments), tuple(pools), pol if pol is not None else policy(),
                                   latency.default(), excluded or {})


def prefill_ms(spec: deployment_spec.ModelDeploymentSpec, gpu_type: str) -> float:
    arch = spec.architecture()
    perf = capacity.replica_perf(arch, gpu_type, spec.resources.gpus_for(gpu_type), None,
                                 spec.runtime.mem_fraction_static)
    return perf.prefill_s(spec.workload.prompt_tokens_mean) * 1000.0


def violations(prob: solver.PlacementProblem, result: solver.PlacementResult,
               settings: solver.SolverSettings | None = None, coverage: bool = True) -> list[str]:
    """Every hard constraint the placement breaks, checked from first principles (and coverage:
    ``coverage_violations``, with the TTFT headroom of ``settings``)."""
    out: list[str] = []
    offers = {p.key: p for p in prob.pools}
    deps = {d.name: d for d in prob.deployments}
    placement = result.placement
    lat = prob.latency_map
    packed: dict[str, int] = {}
    team_gpus: dict[tuple[str, str], int] = {}
    team_usd: dict[str, float] = {}
    for (name, key), n in placement.replicas.items():
        if n <= 0:
            continue
        offer, d = offers.get(key), deps.get(name)
        if offer is None or d is None:
            out.append(f"unknown deployment or pool {(name, key)}")
            continue
        if key in prob.excluded_pools:
            out.append(f"{name} placed on excluded pool {key}")
        g = d.spec.resources.gpus_for(offer.gpu_type)
        per_node = offer.gpus_per_node // g
        if per_node == 0:
            out.append(f"{name}: replica of {g} GPUs on {offer.gpus_per_node}-GPU nodes")
            continue
        packed[key] = packed.get(key, 0) + n * math.ceil(offer.gpus_per_node / per_node)
        res = d.spec.resources
        if res.gpu_types and offer.gpu_type not in res.gpu_types:
            out.append(f"{name} on {offer.gpu_type}, not in {res.gpu_types}")
        if offer.tier is fleet.Tier.SPOT and not d.spec.placement.spot.allowed:
            out.append(f"{name} on spot pool {key} without spot allowed")
        for k in ((d.team, ""), (d.team, offer.gpu_type)):
            team_gpus[k] = team_gpus.get(k, 0) + n * g
        team_usd[d.team] = team_usd.get(d.team, 0.0) + n * g * offer.price_per_gpu_hour_usd
    nodes = {}
    for key, offer in offers.items():
        if key in prob.excluded_pools:
            continue
        if packed.get(key, 0) > offer.gpus_capacity:
            out.append(f"pool {key} holds {packed[key]} GPUs > capacity {offer.gpus_capacity}")
        nodes[key] = max(offer.pool.nodes_min, math.ceil(packed.get(key, 0) / offer.gpus_per_node))
    pol = prob.policy
    if pol is not None:
        for team in pol.teams:
            if team.max_gpus is not None and team_gpus.get((team.name, ""), 0) > team.max_gpus:
                out.append(f"team {team.name} uses {team_gpus[(team.name, '')]} GPUs > quota {team.max_gpus}")
            for t, q in team.max_gpus_by_type.items():
                if team_gpus.get((team.name, t), 0) > q:
                    out.append(f"team {team.name} uses {team_gpus[(team.name, t)]} {t} > quota {q}")
            if team.budget_per_hour_usd is not None and team_usd.get(team.name, 0.0) > team.budget_per_hour_usd + 1e-6:
                out.append(f"team {team.name} spends {team_usd[team.name]:.2f} > budget {team.budget_per_hour_usd}")
        for cloud in pol.clouds:
            for t, q in [("", cloud.max_gpus), *cloud.max_gpus_by_type.items()]:
                if q is None:
                    continue
                chosen = [k for k, o in offers.items() if k in nodes and o.cloud == cloud.name and t in ("", o.gpu_type)]
                used = sum(nodes[k] * offers[k].gpus_per_node for k in chosen)
                floor = sum(offers[k].pool.nodes_min * offers[k].gpus_per_node for k in chosen)
                if used > max(q, floor):
                    out.append(f"cloud {cloud.name} {t} uses {used} GPUs > quota {q}")
        if pol.budget_per_hour_usd is not None:
            total = sum(n * offers[k].price_per_node_hour_usd for k, n in nodes.items())
            floor = sum(o.pool.nodes_min * o.price_per_node_hour_usd for k, o in offers.items() if k in nodes)
            if total > max(pol.budget_per_hour_usd, floor) + 1e-6:
                out.append(f"fleet spends {total:.2f} > budget {pol.budget_per_hour_usd}")
    for name, d in deps.items():
        mine = placement.of(name)
        total = sum(mine.values())
        if total > d.spec.scaling.max_replicas:
            out.append(f"{name}: {total} replicas > max_replicas")
        if total:
            clouds = {offers[k].cloud for k in mine}
            regions = {offers[k].region for k in mine}
            p = d.spec.placement
            if len(clouds) < p.min_distinct_clouds:
                out.append(f"{name}: {len(clouds)} clouds < {p.min_distinct_clouds}")
            if len(regions) < p.min_distinct_regions:
                out.append(f"{name}: {len(regions)} regions < {p.min_distinct_regions}")
            # The cap weighs capacity (reference replicas, no spot credit), not replica counts.
            weight = {k: n * raw_capacity(prob, name, offers[k]) for k, n in mine.items()}
            spot = sum(w for k, w in weight.items() if offers[k].tier is fleet.Tier.SPOT)
            share = min(p.spot.max_share, pol.spot.max_share if pol is not None else 1.0)
            if spot > share * sum(weight.values()) + 1e-6:
                out.append(f"{name}: {spot:.2f} spot capacity of {sum(weight.values()):.2f} > share {share}")
            by_region: dict[str, float] = {}
            for k, w in weight.items():
                if offers[k].tier is fleet.Tier.SPOT:
                    by_region[offers[k].region] = by_region.get(offers[k].region, 0.0) + w
            for region, here in sorted(by_region.items()):
                if here > p.spot.max_share_per_region * sum(weight.values()) + 1e-6:
                    out.append(f"{name}: {here:.2f} spot capacity in {region} of {sum(weight.values()):.2f} > "
                               f"share per region {p.spot.max_share_per_region}")
    for (name, region, key), n in placement.serving.items():
        if n <= 0:
            continue
        d, offer = deps[name], offers[key]
        rtt = lat.rtt_ms(region, offer.region)
        sla = d.spec.sla
        if sla.max_rtt_ms is not None and rtt > sla.max_rtt_ms and within_reach(prob, name, region):
            # Beyond max_rtt_ms only when no pool the deployment may use is within it.
            out.append(f"{name} serves {region} from {offer.region} at {rtt} ms > max_rtt {sla.max_rtt_ms}")
        if rtt + prefill_ms(d.spec, offer.gpu_type) > sla.ttft_p99_ms:
            out.append(f"{name} serves {region} from {offer.region}: RTT + prefill > TTFT")
    for (name, key), n in placement.replicas.items():
        served = sum(v for (d2, _, k2), v in placement.serving.items() if d2 == name and k2 == key)
        if served > n * unit_capacity(prob, name, offers[key]) + 1e-6:
            out.append(f"{name} on {key}: serving {served:.2f} reference replicas > what {n} replicas give")
    for (name, _, key), v in placement.serving.items():
        if v > 0 and placement.replicas.get((name, key), 0) == 0:
            out.append(f"{name} serves from {key} without replicas there")
    for d in prob.deployments:
        for region, wanted in d.replicas_by_region.items():
            got = sum(v for (d2, r2, _), v in placement.serving.items() if d2 == d.name and r2 == region)
            missing = sum(u.replicas for u in result.unplaced if u.deployment == d.name and u.client_region == region)
            if wanted > 0 and got + missing < wanted - 0.011:
                out.append(f"{d.name} in {region}: served {got:.2f} + reported unplaced {missing} < wanted {wanted}")
            if missing and not all(u.reason and u.constraint for u in result.unplaced if u.deployment == d.name):
                out.append(f"{d.name}: unplaced demand without a reason")
    if coverage:
        out += coverage_violations(prob, result, (settings or solver.SolverSettings()).ttft_headroom_ms)
    return out


def coverage_violations(prob: solver.PlacementProblem, result: solver.PlacementResult,
                        headroom_ms: float = 10.0) -> list[str]:
    """Every region a deployment must cover (its regions with demand, those named in
    covered_regions and its always-served ones) has a replica within its SLA's reach (RTT +
    prefill + headroom within TTFT, RTT within max_rtt_ms unless no pool is), or is reported in
    ``uncovered`` with a reason; what is reported uncovered really is (served beyond max_rtt_ms at
    most)."""
    out: list[str] = []
    offers = {p.key: p for p in prob.pools}
    reported = {(u.deployment, u.client_region): u for u in result.uncovered}
    for d in prob.deployments:
        named = set(d.covered_regions or ()) | {r for r, w in d.replicas_by_region.items() if w > 0}
        sla = d.spec.sla
        for region in sorted(set(named) | set(sla.always_served_regions)):
            strict, beyond = [], []
            for key in result.placement.of(d.name):
                offer = offers[key]
                rtt = prob.latency_map.rtt_ms(region, offer.region)
                if rtt + prefill_ms(d.spec, offer.gpu_type) + headroom_ms > sla.ttft_p99_ms:
                    continue
                (beyond if sla.max_rtt_ms is not None and rtt > sla.max_rtt_ms else strict).append(key)
            u = reported.get((d.name, region))
            if strict and u is not None:
                out.append(f"{d.name}: {region} reported uncovered ({u.constraint}) but {strict[0]} is within reach")
            if not strict and u is None:
                out.append(f"{d.name}: {region} has no replica within reach and is not reported uncovered")
            if u is not None and not (u.reason and u.constraint):
                out.append(f"{d.name}: {region} uncovered without a reason")
            if u is not None and u.served_from and within_reach(prob, d.name, region):
                out.append(f"{d.name}: {region} reported served beyond max_rtt_ms though a pool is within it")
            if u is not None and u.served_from and u.served_from not in beyond:
                out.append(f"{d.name}: {region} reported served from {u.served_from}, which holds no replica in reach")
    for key in reported:
        if key[0] not in {d.name for d in prob.deployments}:
            out.append(f"uncovered region of an unknown deployment {key}")
    return out


def within_reach(prob: solver.PlacementProblem, name: str, region: str) -> bool:
    """Some pool the deployment may use (the solver's filter plugins, none relaxed) is within its
    max_rtt_ms of ``region`` and meets its TTFT target."""
    d = next(x for x in prob.deployments if x.name == name)
    settings = solver.SolverSettings()
    cycle = framework.Cycle.of(prob, settings)
    plugins = framework.make_filters(settings.filters)
    return candidates.reachable({}, cycle, plugins, candidates.make_view(d, prob.policy), prob.pools, region)


def raw_capacity(prob: solver.PlacementProblem, name: str, offer: solver.PoolOffer) -> float:
    """Reference replicas one replica of ``name`` on ``offer``'s GPU type serves (no spot credit)."""
    d = next(x for x in prob.deployments if x.name == name)
    ref = throughput.reference_gpu_type(d.spec, d.reference_gpu_type)
    return throughput.units_by_type(d.spec, ref).get(offer.gpu_type, 1.0)


def unit_capacity(prob: solver.PlacementProblem, name: str, offer: solver.PoolOffer) -> float:
    """Reference replicas one replica of ``name`` on ``offer`` gives (spot at the solver's credit)."""
    d = next(x for x in prob.deployments if x.name == name)
    ref = throughput.reference_gpu_type(d.spec, d.reference_gpu_type)
    units = throughput.units_by_type(d.spec, ref).get(offer.gpu_type, 1.0)
    return units * (solver.SolverSettings().spot_capacity_credit if offer.tier is fleet.Tier.SPOT else 1.0)


# How a solve meets its time limit, forced so that every branch runs whatever the machine's speed:
# path -> time limit (s). "tiny_time_limit" is past its deadline before CP-SAT starts; the others
# replace one backend with what it answers when time runs out (see ``timeout_path``).
TIMEOUT_PATHS = {
    "cp_sat_in_time": 1.0,
    "tiny_time_limit": 0.001,
    "no_cp_sat_solution": 1.0,
    "first_cp_sat_solution": 1.0,
    "lp_out_of_time": 1.0,
}


@contextlib.contextmanager
def timeout_path(path: str) -> Iterator[list[str]]:
    """Within the block, the solver meets ``path`` (a TIMEOUT_PATHS key): CP-SAT stopped before
    any solution (status unknown), CP-SAT stopped at its first solution (whatever feasible point it
    reaches first, usually the hint), or the LP relaxation out of time. Yields the list of forced
    backend calls, so a test can check the path was taken."""
    if path not in TIMEOUT_PATHS:
        raise ValueError(f"path must be one of {sorted(TIMEOUT_PATHS)}, got {path!r}")
    calls: list[str] = []
    real_sat = linear.solve_sat

    def no_solution(model: linear.LinearModel, **kw: object) -> linear.SatOutcome:
        calls.append("sat")
        return linear.SatOutcome("unknown", [], math.inf, -math.inf, 0.0)

    def first_solution(model: linear.LinearModel, **kw: object) -> linear.SatOutcome:
        calls.append("sat")
        # With no objective the first feasible point is final; one worker keeps it deterministic.
        flat = dataclasses.replace(model, cost=[0.0] * model.size)
        out = real_sat(flat, **{**kw, "workers": 1, "known_bound": None, "relative_gap": 0.0})
        if out.status not in ("optimal", "feasible"):
            return out
        objective = sum(c * v for c, v in zip(model.cost, out.values, strict=True)) + model.constant
        return dataclasses.replace(out, status="feasible", objective=objective, bound=-math.inf)

    def lp_out_of_time(model: linear.LinearModel, **kw: object) -> linear.LpOutcome:
        calls.append("lp")
        return linear.LpOutcome(False, [], -math.inf)

    forced = {"no_cp_sat_solution": ("solve_sat", no_solution), "first_cp_sat_solution": ("solve_sat", first_solution),
              "lp_out_of_time": ("solve_lp", lp_out_of_time)}.get(path)
    if forced is None:
        yield calls
        return
    with mock.patch.object(linear, forced[0], forced[1]):
        yield calls
