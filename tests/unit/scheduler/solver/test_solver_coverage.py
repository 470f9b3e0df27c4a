"""Coverage: every client region that sends traffic (or is always served) gets a replica within its
SLA's reach, even where demand alone asks for fewer replicas; what cannot be covered is named with
the constraint that binds. Crafted fleets whose answer is known by hand."""

from __future__ import annotations

import pytest
import solver_cases as sc

from scheduler import solver
from scheduler.solver import candidates, formulation, greedy, linear

EMBED = "BAAI/bge-large-en-v1.5"
REGIONS = ("na-east", "eu-west", "ap-northeast")


def solve(prob: solver.PlacementProblem, **kw: object) -> solver.PlacementResult:
    result = solver.solve(prob, time_limit_s=kw.pop("time_limit_s", 10.0), **kw)
    assert sc.violations(prob, result, kw.get("settings")) == []
    assert "repaired_replicas" not in result.stats
    return result


def embed(demand: dict[str, int], **kw: object) -> solver.DeploymentDemand:
    """bge-large on L4, TTFT 50 ms: no cloud region is within reach of two of na-east, eu-west and
    ap-northeast (us-east-1 <-> eu-west is 81 ms)."""
    return sc.dep("embed", regions=demand, source_regions=kw.pop("source_regions", REGIONS), gpu_types=["L4"],
                  source=EMBED, embedding=True, ttft_ms=50, **kw)


def three_pools() -> list[solver.PoolOffer]:
    return [sc.pool("use1", "aws", "us-east-1", "L4", 0.8), sc.pool("euw1", "aws", "eu-west-1", "L4", 0.9),
            sc.pool("ane1", "gcp", "asia-northeast1", "L4", 1.0), sc.pool("usw2", "aws", "us-west-2", "L4", 0.5)]


def regions_of(prob: solver.PlacementProblem, placement: solver.Placement, name: str) -> set[str]:
    offers = {p.key: p for p in prob.pools}
    return {offers[k].region for k in placement.of(name)}


def test_demand_for_one_replica_but_three_regions_with_traffic_get_three():
    """Demand asks for one replica (na-east's), traffic comes from three regions no one pool can
    serve within 50 ms: the plan places three replicas, one within reach of each region."""
    prob = sc.problem([embed({"na-east": 1, "eu-west": 0, "ap-northeast": 0}, covered=REGIONS)], three_pools())
    result = solve(prob)
    assert result.placement.total("embed") == 3
    assert regions_of(prob, result.placement, "embed") == {"us-east-1", "eu-west-1", "asia-northeast1"}
    assert result.uncovered == () and result.unplaced == ()


def test_without_coverage_demand_alone_places_one():
    """The same fleet covering only the regions with demand (the default) places the one replica."""
    prob = sc.problem([embed({"na-east": 1, "eu-west": 0, "ap-northeast": 0})], three_pools())
    assert solve(prob).placement.to_dict() == {"embed": {"use1/l4-on-demand": 1}}


def test_max_replicas_that_forbids_coverage_names_the_uncovered_region():
    """max_replicas 2 of the three needed: the region with demand and one other are covered; the
    third is named uncovered with max_replicas as the binding constraint."""
    prob = sc.problem([embed({"na-east": 1, "eu-west": 0, "ap-northeast": 0}, covered=REGIONS, max_replicas=2)],
                      three_pools())
    result = solve(prob)
    assert result.placement.total("embed") == 2
    [u] = result.uncovered
    assert u.constraint == "max_replicas" and "max_replicas (2)" in u.reason, u.reason
    assert u.client_region in ("eu-west", "ap-northeast") and u.client_region in u.reason
    assert "na-east" in {r for r in REGIONS if r != u.client_region}


def test_coverage_comes_before_more_capacity_within_a_deployment():
    """max_replicas 2; na-east's demand wants 2 replicas, eu-west sends traffic too: the plan covers
    eu-west and leaves one replica of na-east's demand unplaced (the documented priority rule), rather
    than put both in na-east's reach."""
    d = embed({"na-east": 2, "eu-west": 0}, covered=("na-east", "eu-west"), max_replicas=2,
              source_regions=("na-east", "eu-west"))
    prob = sc.problem([d], three_pools())
    result = solve(prob)
    assert regions_of(prob, result.placement, "embed") == {"us-east-1", "eu-west-1"}
    assert result.uncovered == ()
    [u] = result.unplaced
    assert (u.client_region, u.constraint) == ("na-east", "max_replicas")


def test_a_region_without_traffic_that_is_not_always_served_needs_no_replica():
    """Scale to zero keeps its meaning: no demand and no traffic anywhere places nothing."""
    prob = sc.problem([embed({r: 0 for r in REGIONS}, covered=())], three_pools())
    result = solve(prob)
    assert result.placement.to_dict() == {} and result.uncovered == ()


def test_an_always_served_region_keeps_a_replica_without_traffic():
    """sla.always_served_regions: eu-west keeps a replica within reach though nothing asks for one."""
    prob = sc.problem([embed({r: 0 for r in REGIONS}, covered=(), always_served=["eu-west"])], three_pools())
    result = solve(prob)
    assert result.placement.to_dict() == {"embed": {"euw1/l4-on-demand": 1}}


def test_a_region_no_pool_can_reach_within_the_ttft_is_named_with_the_nearest_miss():
    """No pool near ap-northeast: it is reported uncovered (ttft), naming the nearest pool."""
    pools = [p for p in three_pools() if p.region != "asia-northeast1"]
    prob = sc.problem([embed({"na-east": 1}, covered=REGIONS)], pools)
    result = solve(prob)
    [u] = result.uncovered
    assert (u.client_region, u.constraint) == ("ap-northeast", "ttft")
    assert "no replica of embed within reach of ap-northeast" in u.reason and "headroom" in u.reason, u.reason


def test_a_region_served_beyond_max_rtt_is_named_with_the_pool_that_serves_it():
    """max_rtt_ms 20 and no pool within 20 ms of ap-south: the region is served from the nearest pool
    that meets the TTFT, and named (max_rtt, served_from) as an SLA it does not meet."""
    d = sc.dep("chat", regions={"ap-south": 1}, max_rtt_ms=20)
    prob = sc.problem([d], [sc.pool("euw1", "aws", "eu-west-1", "L4", 0.9)])
    result = solve(prob)
    assert result.placement.to_dict() == {"chat": {"euw1/l4-on-demand": 1}}
    [u] = result.uncovered
    assert (u.constraint, u.served_from) == ("max_rtt", "euw1/l4-on-demand") and "max_rtt_ms 20" in u.reason


def test_every_solver_path_keeps_coverage():
    """The one CP-SAT search, the neighbourhood search (a model forced large), a tiny time limit and
    the greedy start all cover the three regions."""
    prob = sc.problem([embed({"na-east": 1, "eu-west": 0, "ap-northeast": 0}, covered=REGIONS),
                       sc.dep("chat", regions={"na-east": 2})], three_pools())
    for settings in (solver.SolverSettings(), solver.SolverSettings(restrict_above_pairs=0),
                     solver.SolverSettings(lp_hint=False)):
        result = solve(prob, settings=settings)
        assert regions_of(prob, result.placement, "embed") == {"us-east-1", "eu-west-1", "asia-northeast1"}, settings
    tiny = solver.solve(prob, time_limit_s=0.05)
    assert sc.violations(prob, tiny) == []
    c = candidates.build(prob, solver.SolverSettings())
    start = greedy.place(prob, c)
    assert c.uncovered(0, start.counts) == []


def test_the_linear_model_states_coverage_as_rows_a_mip_solver_can_take():
    """The full LinearModel has one coverage row per covered region (replicas within reach + miss
    >= 1, integer coefficients); solved alone it covers every region."""
    prob = sc.problem([embed({"na-east": 1, "eu-west": 0, "ap-northeast": 0}, covered=REGIONS)], three_pools())
    settings = solver.SolverSettings()
    c = candidates.build(prob, settings)
    built = formulation.build(c, prob, settings, None, {}, [0])
    assert set(built.miss) == {(0, r) for r in REGIONS}
    rows = [r for r in built.model.rows if any(v in r[0] for v in built.miss.values())]
    assert len(rows) == len(REGIONS) and all(lo == 1 and set(coef) == {1} for _, coef, lo, _ in rows)
    out = linear.solve_sat(built.model, time_limit_s=5, workers=1, relative_gap=0.0)
    counts = {p: out.values[v] for p, v in built.x.items() if out.values[v] > 0}
    assert c.uncovered(0, counts) == [] and all(out.values[v] == 0 for v in built.miss.values())


def test_an_incremental_re_solve_keeps_coverage_replicas_as_they_are():
    """Replicas that only cover a region (they serve no demand) are not spare: re-solving the same
    problem from the plan changes nothing and re-solves no deployment."""
    prob = sc.problem([embed({"na-east": 1, "eu-west": 0, "ap-northeast": 0}, covered=REGIONS),
                       sc.dep("chat", regions={"na-east": 1})], three_pools())
    first = solve(prob)
    assert solver.changed_deployments(prob, first.placement, solver.SolverSettings()) == set()
    again = solve(prob, current=first.placement)
    assert again.placement.to_dict() == first.placement.to_dict()
    grown = sc.problem([embed({"na-east": 1, "eu-west": 0, "ap-northeast": 0}, covered=("na-east",)),
                        sc.dep("chat", regions={"na-east": 1})], three_pools())
    assert solver.changed_deployments(grown, first.placement, solver.SolverSettings()) == {0}


@pytest.mark.parametrize("kind", ["ttft", "tpot", "max_rtt", "gpu_type", "memory", "team_quota", "cloud_quota",
                                  "budget", "max_replicas", "isolation", "stock_out", "priority"])
def test_the_binding_constraint_is_named_for_each_kind(kind: str):
    """Demand that cannot be placed carries the constraint that really stops it, for every kind the
    issue lists: a TTFT target the prefill alone breaks is ttft (not gpu_type), and so on."""
    pol, excluded = sc.policy(), {}
    l4 = sc.pool("use1", "aws", "us-east-1", "L4", 0.8)
    h100 = sc.pool("use1", "aws", "us-east-1", "H100", 60.0, gpus_per_node=8)
    pools, deps = [l4], [sc.dep("d", regions={"na-east": 2})]
    if kind == "ttft":
        deps = [sc.dep("d", regions={"na-east": 1}, gpu_types=["L4", "H100"], ttft_ms=1)]
        pools = [l4, h100]
    elif kind == "tpot":
        deps = [sc.dep("d", regions={"na-east": 1}, gpu_types=["L4", "H100"], tpot_ms=5)]
        pools = [l4, h100]
    elif kind == "max_rtt":
        deps = [sc.dep("d", regions={"ap-south": 1}, max_rtt_ms=50)]
    elif kind == "gpu_type":
        deps = [sc.dep("d", regions={"na-east": 1}, gpu_types=["A10G"])]
    elif kind == "memory":
        deps = [sc.dep("d", regions={"na-east": 1}, gpu_types=[], min_memory_gib=24, source=sc.BIG)]
    elif kind == "team_quota":
        pol = sc.policy(teams=[{"name": "t", "max_gpus": 1}])
        deps = [sc.dep("d", regions={"na-east": 2}, team="t")]
    elif kind == "cloud_quota":
        pol = sc.policy(clouds=[{"name": "aws", "max_gpus": 1}, {"name": "gcp"}, {"name": "azure"}])
    elif kind == "budget":
        pol = sc.policy(teams=[{"name": "t", "budget_per_hour_usd": 1.0}])
        deps = [sc.dep("d", regions={"na-east": 2}, team="t")]
    elif kind == "max_replicas":
        deps = [sc.dep("d", regions={"na-east": 3}, max_replicas=2)]
    elif kind == "isolation":
        deps = [sc.dep("d", regions={"na-east": 1}, clouds=2)]
    elif kind == "stock_out":
        excluded = {l4.key: "stock-out at 12:00"}
    elif kind == "priority":
        pools = [sc.pool("use1", "aws", "us-east-1", "L4", 0.8, nodes_max=1)]
        deps = [sc.dep("d", regions={"na-east": 1}, priority_class="batch", priority=10),
                sc.dep("vip", regions={"na-east": 1}, priority_class="critical", priority=1000)]
    result = solve(sc.problem(deps, pools, pol, excluded), settings=solver.SolverSettings(relax_max_rtt=False))
    [u] = [u for u in result.unplaced if u.deployment == "d"]
    assert u.constraint == kind, u.reason
    assert u.reason.startswith(f"{u.replicas:g} replica(s) of d for {u.client_region} unplaced: ")
    if kind == "ttft":
        assert "best is H100 in us-east-1" in u.reason and "> TTFT 1 ms" in u.reason, u.reason
    if kind == "tpot":
        assert "best is H100" in u.reason and "> TPOT 5 ms" in u.reason, u.reason
