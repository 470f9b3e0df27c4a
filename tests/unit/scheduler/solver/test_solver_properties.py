"""Property tests: on random small fleets no plan breaks a hard constraint, and every unserved
demand is reported with the constraint that stops it. Bounded: few examples, 1 s per solve."""

from __future__ import annotations

import hypothesis
import hypothesis.strategies as st
import solver_cases as sc

from scheduler import solver

CLOUD_REGIONS = [("aws", "us-east-1"), ("aws", "eu-west-1"), ("aws", "ap-south-1"), ("gcp", "us-central1"),
                 ("gcp", "europe-west4"), ("azure", "eastus2"), ("azure", "japaneast")]
CLIENTS = ["na-east", "na-west", "eu-west", "ap-south", "ap-northeast"]
TYPES = [("L4", 1), ("A10G", 1), ("L40S", 1), ("H100", 8)]
CONSTRAINTS = {"gpu_type", "placement", "policy", "excluded", "latency", "capacity", "team_quota", "cloud_quota",
               "budget", "max_replicas", "isolation", "spot", "priority", "time_limit", "error"}


@st.composite
def instances(draw: st.DrawFn) -> solver.PlacementProblem:
    pools = []
    for i in range(draw(st.integers(2, 7))):
        cloud, region = draw(st.sampled_from(CLOUD_REGIONS))
        gpu, per_node = draw(st.sampled_from(TYPES))
        tier = draw(st.sampled_from(["on_demand", "on_demand", "spot", "reserved"]))
        nodes_max = draw(st.integers(0, 5))
        nodes_min = min(nodes_max, 1) if tier == "reserved" else draw(st.integers(0, min(1, nodes_max)))
        price = draw(st.floats(0.2, 4.0)) * per_node
        pools.append(sc.pool(f"c{i}", cloud, region, gpu, round(price, 2), gpus_per_node=per_node,
                             nodes_max=nodes_max, nodes_min=nodes_min, tier=tier, pool_id=f"p{i}"))
    deps = []
    for i in range(draw(st.integers(1, 5))):
        regions = draw(st.lists(st.sampled_from(CLIENTS), min_size=1, max_size=3, unique=True))
        types = draw(st.lists(st.sampled_from([t for t, _ in TYPES]), min_size=1, max_size=4, unique=True))
        prio = draw(st.sampled_from([("batch", 10), ("standard", 100), ("critical", 1000)]))
        deps.append(sc.dep(
            f"d{i}", regions={r: draw(st.integers(0, 4)) for r in regions}, gpu_types=types,
            max_rtt_ms=draw(st.sampled_from([None, 60.0, 100.0, 150.0])), clouds=draw(st.integers(1, 2)),
            distinct_regions=draw(st.integers(1, 2)), spot=draw(st.booleans()),
            spot_share=draw(st.sampled_from([0.0, 0.3, 0.5, 1.0])), team=draw(st.sampled_from(["a", "b", ""])),
            priority_class=prio[0], priority=prio[1], max_replicas=draw(st.integers(2, 12)),
            profile={t: draw(st.sampled_from([0.5, 1.0, 2.0, 4.0])) for t in types}))
    teams = [{"name": t, "max_gpus": draw(st.one_of(st.none(), st.integers(0, 16))),
              "max_gpus_by_type": draw(st.dictionaries(st.sampled_from(["L4", "H100"]), st.integers(0, 8), max_size=1)),
              "budget_per_hour_usd": draw(st.one_of(st.none(), st.floats(0, 60)))} for t in ("a", "b")]
    clouds = [{"name": c, "max_gpus": draw(st.one_of(st.none(), st.integers(0, 24)))} for c in ("aws", "gcp", "azure")]
    pol = sc.policy(teams=teams, clouds=clouds, budget_per_hour_usd=draw(st.one_of(st.none(), st.floats(10, 200))),
                    spot={"allowed": draw(st.booleans()), "max_share": draw(st.sampled_from([0.3, 0.6, 1.0]))})
    excluded = {p.key: "stock-out" for p in pools if draw(st.integers(0, 5)) == 0}
    return sc.problem(deps, pools, pol, excluded)


@hypothesis.settings(max_examples=60, deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
@hypothesis.given(instances())
def test_no_plan_violates_a_hard_constraint_and_unserved_demand_is_explained(prob: solver.PlacementProblem):
    """Capacity, quotas, budgets, latency, isolation, spot share, max_replicas hold; shortfalls carry reasons."""
    result = solver.solve(prob, time_limit_s=1.0)
    assert result.status in (solver.SolveStatus.OPTIMAL, solver.SolveStatus.FEASIBLE)
    assert sc.violations(prob, result) == []
    for u in result.unplaced:
        assert u.constraint in CONSTRAINTS
        assert u.deployment in u.reason and u.client_region in u.reason
    assert result.lower_bound <= result.objective + 1e-6


@hypothesis.settings(max_examples=25, deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
@hypothesis.given(instances(), st.integers(0, 4))
def test_warm_started_resolve_after_a_change_stays_valid(prob: solver.PlacementProblem, extra: int):
    """Re-solving from a plan after one deployment's demand changes yields a plan that breaks nothing."""
    first = solver.solve(prob, time_limit_s=1.0)
    d = prob.deployments[0]
    region = sorted(d.replicas_by_region)[0]
    changed = sc.problem([sc.dep(d.name, regions={**d.replicas_by_region, region: extra},
                                 gpu_types=d.spec.resources.gpu_types, team=d.team,
                                 profile=dict(d.spec.resources.throughput_profile)), *prob.deployments[1:]],
                         prob.pools, prob.policy, dict(prob.excluded_pools))
    again = solver.solve(changed, time_limit_s=1.0, current=first.placement)
    assert sc.violations(changed, again) == []
