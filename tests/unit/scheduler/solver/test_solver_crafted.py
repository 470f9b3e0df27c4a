"""Crafted placement instances whose optimal answer is known by hand."""

from __future__ import annotations

import dataclasses

import pytest
import solver_cases as sc

from meridian import fleet, latency
from meridian import spec as spec_mod
from scheduler import solver
from scheduler.control import planner
from scheduler.solver import candidates, inputs

LIMIT_S = 10.0


def solve(prob: solver.PlacementProblem, **kw: object) -> solver.PlacementResult:
    result = solver.solve(prob, time_limit_s=kw.pop("time_limit_s", LIMIT_S), **kw)
    assert sc.violations(prob, result, kw.get("settings")) == []
    assert "repaired_replicas" not in result.stats  # valid by construction, not by the last check's repair
    return result


def test_cheapest_compatible_pool_wins():
    """Of L4 ($0.80), A10G ($1.00) and a cheaper H100 the spec does not allow, the L4 pool gets both replicas."""
    prob = sc.problem([sc.dep("chat", regions={"na-east": 2}, gpu_types=["L4", "A10G"], profile={"L4": 1, "A10G": 1})],
                      [sc.pool("c1", "aws", "us-east-1", "L4", 0.80), sc.pool("c1", "aws", "us-east-1", "A10G", 1.00),
                       sc.pool("c1", "aws", "us-east-1", "H100", 0.10)])
    result = solve(prob)
    assert result.status is solver.SolveStatus.OPTIMAL
    assert result.placement.to_dict() == {"chat": {"c1/l4-on-demand": 2}}
    assert result.cost_per_hour_usd == pytest.approx(1.60)
    assert result.unplaced == ()


def test_cheaper_gpu_type_needing_more_replicas_is_weighed_per_capacity():
    """Melange: 6 units of demand cost $6 on L4 (1 unit each), $4.80 mixed, $3.60 on two L40S (3 units each)."""
    d = sc.dep("chat", regions={"na-east": 6}, gpu_types=["L4", "L40S"], profile={"L4": 1, "L40S": 3})
    prob = sc.problem([d], [sc.pool("c1", "aws", "us-east-1", "L4", 1.0, nodes_max=8),
                            sc.pool("c1", "aws", "us-east-1", "L40S", 1.8)])
    result = solve(prob)
    assert result.placement.to_dict() == {"chat": {"c1/l40s-on-demand": 2}}
    assert result.cost_per_hour_usd == pytest.approx(3.6)


def test_latency_sla_forces_a_nearer_pricier_region():
    """With max_rtt 80 ms from ap-south, Mumbai ($0.90) wins over a cheaper Virginia ($0.50); without it, Virginia."""
    pools = [sc.pool("use1", "aws", "us-east-1", "L4", 0.50), sc.pool("aps1", "aws", "ap-south-1", "L4", 0.90)]
    strict = solve(sc.problem([sc.dep("chat", regions={"ap-south": 1}, max_rtt_ms=80)], pools))
    assert strict.placement.to_dict() == {"chat": {"aps1/l4-on-demand": 1}}
    assert strict.serving == {("chat", "ap-south", "aps1/l4-on-demand"): 1}
    loose = solve(sc.problem([sc.dep("chat", regions={"ap-south": 1}, ttft_ms=5000)], pools))
    assert loose.placement.to_dict() == {"chat": {"use1/l4-on-demand": 1}}


def test_ttft_headroom_keeps_a_pool_at_the_edge_of_the_target_out():
    """A region whose RTT + prefill leaves 5 ms of the TTFT target is not used with the default 10-ms
    headroom (the router's hop and the engine's scheduling would break the p99): a pricier nearer
    one serves; with no headroom the cheap one does; with only the edge pool, the reason says why."""
    lat = latency.default()
    prefill = candidates.make_view(sc.dep("e", regions={"ap-northeast": 1}), None).prefill_ms_by_type["L4"]
    ttft = lat.rtt_ms("ap-northeast", "us-east-1") + prefill + 5
    assert lat.rtt_ms("ap-northeast", "eu-west-1") + prefill + 10 <= ttft
    edge, near = sc.pool("use1", "aws", "us-east-1", "L4", 0.50), sc.pool("euw1", "aws", "eu-west-1", "L4", 0.90)
    embed = sc.dep("embed", regions={"ap-northeast": 1}, ttft_ms=ttft)
    assert solve(sc.problem([embed], [edge, near])).placement.to_dict() == {"embed": {"euw1/l4-on-demand": 1}}
    bare = solve(sc.problem([embed], [edge, near]), settings=solver.SolverSettings(ttft_headroom_ms=0))
    assert bare.placement.to_dict() == {"embed": {"use1/l4-on-demand": 1}}
    [u] = solve(sc.problem([embed], [edge])).unplaced
    assert u.constraint == "ttft" and "10 ms headroom" in u.reason, u.reason


def test_isolation_forces_two_clouds():
    """min_distinct_clouds 2 puts one replica on GCP although AWS is cheaper and has room for both."""
    prob = sc.problem([sc.dep("chat", regions={"na-east": 2}, clouds=2)],
                      [sc.pool("aws1", "aws", "us-east-1", "L4", 0.8), sc.pool("gcp1", "gcp", "us-east4", "L4", 1.1)])
    result = solve(prob)
    assert result.placement.to_dict() == {"chat": {"aws1/l4-on-demand": 1, "gcp1/l4-on-demand": 1}}


def test_isolation_across_regions():
    """min_distinct_regions 2 spreads replicas over two regions."""
    prob = sc.problem([sc.dep("chat", regions={"na-east": 2}, distinct_regions=2)],
                      [sc.pool("a", "aws", "us-east-1", "L4", 0.8), sc.pool("b", "aws", "us-east-2", "L4", 0.9)])
    result = solve(prob)
    assert set(result.placement.of("chat")) == {"a/l4-on-demand", "b/l4-on-demand"}


def test_team_quota_forces_a_split():
    """A team quota of 2 L4 GPUs sends the other 2 replicas to the pricier A10G pool."""
    pol = sc.policy(teams=[{"name": "t1", "max_gpus_by_type": {"L4": 2}}])
    prob = sc.problem([sc.dep("chat", regions={"na-east": 4}, gpu_types=["L4", "A10G"], team="t1",
                              profile={"L4": 1, "A10G": 1})],
                      [sc.pool("c", "aws", "us-east-1", "L4", 0.8), sc.pool("c", "aws", "us-east-1", "A10G", 1.2)], pol)
    result = solve(prob)
    assert result.placement.to_dict() == {"chat": {"c/a10g-on-demand": 2, "c/l4-on-demand": 2}}


def test_cloud_quota_forces_a_split():
    """An AWS quota of 3 GPUs puts the fourth replica on GCP."""
    pol = sc.policy(clouds=[{"name": "aws", "max_gpus": 3}, {"name": "gcp"}])
    prob = sc.problem([sc.dep("chat", regions={"na-east": 4})],
                      [sc.pool("a", "aws", "us-east-1", "L4", 0.8), sc.pool("g", "gcp", "us-east4", "L4", 1.0)], pol)
    result = solve(prob)
    assert result.placement.to_dict() == {"chat": {"a/l4-on-demand": 3, "g/l4-on-demand": 1}}


def test_spot_share_cap_with_on_demand_fallback():
    """Spot at $0.30 is capped at half the replicas; on-demand covers the rest (spot counts 0.85 each)."""
    pol = sc.policy(spot={"allowed": True, "max_share": 1.0})
    prob = sc.problem([sc.dep("chat", regions={"na-east": 4}, spot=True, spot_share=0.5)],
                      [sc.pool("c", "aws", "us-east-1", "L4", 1.0, nodes_max=8),
                       sc.pool("c", "aws", "us-east-1", "L4", 0.30, tier="spot", nodes_max=8)], pol)
    result = solve(prob)
    # 4 on-demand = $4.00; 3 on-demand + 2 spot (4.7 units, share 2/5) = $3.60; 2 + 2 is 3.7 units (short).
    assert result.placement.to_dict() == {"chat": {"c/l4-on-demand": 3, "c/l4-spot": 2}}
    assert result.cost_per_hour_usd == pytest.approx(3.6)


def test_policy_forbids_spot():
    """A policy with spot disallowed keeps a spot-tolerant deployment off spot pools."""
    pol = sc.policy(spot={"allowed": False})
    prob = sc.problem([sc.dep("chat", regions={"na-east": 2}, spot=True)],
                      [sc.pool("c", "aws", "us-east-1", "L4", 1.0), sc.pool("c", "aws", "us-east-1", "L4", 0.3, tier="spot")],
                      pol)
    assert solve(prob).placement.to_dict() == {"chat": {"c/l4-on-demand": 2}}


def test_reserved_capacity_is_used_first():
    """A reserved 8-GPU node is paid anyway, so replicas go there before a cheap on-demand L4 pool."""
    d = sc.dep("chat", regions={"na-east": 4}, gpu_types=["L4", "H100"], profile={"L4": 1, "H100": 1})
    reserved = sc.pool("r", "aws", "us-east-1", "H100", 30.0, gpus_per_node=8, nodes_min=1, nodes_max=1, tier="reserved")
    prob = sc.problem([d], [reserved, sc.pool("c", "aws", "us-east-1", "L4", 0.8)])
    result = solve(prob)
    assert result.placement.to_dict() == {"chat": {"r/h100-reserved": 4}}
    assert result.cost_per_hour_usd == pytest.approx(30.0)


def test_priority_preempts_only_when_capacity_is_short():
    """A critical deployment takes a batch replica's GPU only when no other pool can hold it."""
    low = sc.dep("low", regions={"na-east": 3}, priority_class="batch", priority=10)
    high = sc.dep("high", regions={"na-east": 2}, priority_class="critical", priority=1000)
    current = solver.Placement({("low", "c/l4-on-demand"): 3}, {("low", "na-east", "c/l4-on-demand"): 3})
    short = sc.problem([low, high], [sc.pool("c", "aws", "us-east-1", "L4", 0.8, nodes_max=4)])
    result = solve(short, current=current)
    assert result.placement.of("high") == {"c/l4-on-demand": 2}
    assert result.placement.of("low") == {"c/l4-on-demand": 2}
    assert [(u.deployment, u.constraint) for u in result.unplaced] == [("low", "priority")]
    roomy = sc.problem([low, high], [sc.pool("c", "aws", "us-east-1", "L4", 0.8, nodes_max=4),
                                     sc.pool("d", "aws", "us-east-1", "L4", 0.85, nodes_max=4)])
    result = solve(roomy, current=current)
    assert result.placement.of("low") == {"c/l4-on-demand": 3}
    assert result.placement.total("high") == 2  # the free GPU of c, then d
    assert result.unplaced == ()


def test_no_preemption_of_a_class_the_higher_one_does_not_list():
    """A class that does not list 'standard' in preempts leaves its current replicas alone."""
    pol = sc.policy(priority_classes=[{"name": "vip", "value": 500, "preempts": ["batch"]},
                                      {"name": "standard", "value": 100}, {"name": "batch", "value": 10}])
    low = sc.dep("std", regions={"na-east": 3}, priority_class="standard", priority=100)
    high = sc.dep("vip", regions={"na-east": 2}, priority_class="vip", priority=500)
    current = solver.Placement({("std", "c/l4-on-demand"): 3}, {("std", "na-east", "c/l4-on-demand"): 3})
    result = solve(sc.problem([low, high], [sc.pool("c", "aws", "us-east-1", "L4", 0.8, nodes_max=4)], pol),
                   current=current)
    assert result.placement.of("std") == {"c/l4-on-demand": 3}
    assert result.placement.of("vip") == {"c/l4-on-demand": 1}
    assert [(u.deployment, u.replicas) for u in result.unplaced] == [("vip", 1.0)]


def test_no_pool_within_max_rtt_serves_from_the_nearest_that_meets_ttft_or_is_explained_when_strict():
    """No H100 within 80 ms of ap-south: by default the region is served from Virginia, which still
    meets the 2 s TTFT (an SLA risk, as routers fail over there anyway) instead of not at all; with
    relax_max_rtt off the demand is reported unplaced with that reason, the rest is placed."""
    big = sc.dep("big", regions={"ap-south": 1}, gpu_types=["H100"], gpus=4, source=sc.BIG, max_rtt_ms=80)
    small = sc.dep("chat", regions={"na-east": 1})
    prob = sc.problem([big, small], [sc.pool("use1", "aws", "us-east-1", "H100", 60.0, gpus_per_node=8),
                                     sc.pool("use1", "aws", "us-east-1", "L4", 0.8)])
    relaxed = solve(prob)
    assert relaxed.placement.to_dict() == {"big": {"use1/h100-on-demand": 1}, "chat": {"use1/l4-on-demand": 1}}
    assert relaxed.unplaced == ()
    strict = solve(prob, settings=solver.SolverSettings(relax_max_rtt=False))
    assert strict.placement.to_dict() == {"chat": {"use1/l4-on-demand": 1}}
    [u] = strict.unplaced
    assert (u.deployment, u.client_region, u.constraint) == ("big", "ap-south", "max_rtt")
    assert "no H100 within 80 ms of ap-south" in u.reason
    assert "nearest is use1/h100-on-demand in us-east-1" in u.reason


def test_a_pool_within_max_rtt_keeps_the_limit_hard_even_when_a_farther_one_is_cheaper():
    """Relaxing applies only where nothing is within reach: with a Mumbai L4 at $0.90 and a Virginia
    L4 at $0.50, max_rtt 80 ms still puts ap-south's replica in Mumbai."""
    pools = [sc.pool("use1", "aws", "us-east-1", "L4", 0.50), sc.pool("aps1", "aws", "ap-south-1", "L4", 0.90)]
    result = solve(sc.problem([sc.dep("chat", regions={"ap-south": 1}, max_rtt_ms=80)], pools))
    assert result.placement.to_dict() == {"chat": {"aps1/l4-on-demand": 1}}


def test_team_quota_blocking_is_explained():
    """An H100 near ap-south exists but the team's H100 quota is spent: the reason names the team quota."""
    pol = sc.policy(teams=[{"name": "research", "max_gpus_by_type": {"H100": 4}}])
    first = sc.dep("first", regions={"ap-south": 1}, gpu_types=["H100"], gpus=4, source=sc.BIG, team="research",
                   priority_class="critical", priority=1000)
    second = sc.dep("second", regions={"ap-south": 1}, gpu_types=["H100"], gpus=4, source=sc.BIG, team="research",
                    max_rtt_ms=80)
    prob = sc.problem([first, second], [sc.pool("aps1", "aws", "ap-south-1", "H100", 60.0, gpus_per_node=8)], pol)
    result = solve(prob)
    assert result.placement.to_dict() == {"first": {"aps1/h100-on-demand": 1}}
    [u] = result.unplaced
    assert u.constraint == "team_quota"
    assert "no H100 within 80 ms of ap-south under team quota (research H100: 4/4 GPUs)" in u.reason


def test_gpu_type_that_cannot_hold_the_model_is_explained():
    """A 70B model on GPUs with >= 24 GiB, where only 1-GPU L4 replicas are offered: unplaced, constraint
    memory (the weights do not fit the GPU), not gpu_type."""
    d = sc.dep("big", regions={"na-east": 1}, gpu_types=[], min_memory_gib=24, source=sc.BIG)
    result = solve(sc.problem([d], [sc.pool("c", "aws", "us-east-1", "L4", 0.8)]))
    [u] = result.unplaced
    assert u.constraint == "memory" and "does not fit" in u.reason


def test_isolation_impossible_is_explained():
    """Two clouds asked, only AWS offers a compatible pool: the whole deployment is unplaced, naming isolation."""
    d = sc.dep("chat", regions={"na-east": 2}, clouds=2)
    result = solve(sc.problem([d], [sc.pool("a", "aws", "us-east-1", "L4", 0.8), sc.pool("g", "gcp", "us-east4", "A10G", 0.8)]))
    assert result.placement.to_dict() == {}
    [u] = result.unplaced
    assert u.constraint == "isolation" and "only aws" in u.reason


def test_stocked_out_pool_is_avoided_and_named():
    """An excluded (stocked-out) pool is skipped; when it was the only one, the reason says so."""
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8), sc.pool("b", "aws", "us-east-2", "L4", 0.9)]
    d = sc.dep("chat", regions={"na-east": 2})
    result = solve(sc.problem([d], pools, excluded={"a/l4-on-demand": "stock-out at 12:00"}))
    assert result.placement.to_dict() == {"chat": {"b/l4-on-demand": 2}}
    only = solve(sc.problem([d], pools[:1], excluded={"a/l4-on-demand": "stock-out at 12:00"}))
    [u] = only.unplaced
    assert u.constraint == "stock_out" and "stock-out at 12:00" in u.reason


def test_budget_limits_the_plan_and_is_explained():
    """A $2/h team budget buys 2 of 4 wanted replicas at $0.80; the rest is unplaced for the budget."""
    pol = sc.policy(teams=[{"name": "t", "budget_per_hour_usd": 2.0}])
    result = solve(sc.problem([sc.dep("chat", regions={"na-east": 4}, team="t")],
                              [sc.pool("c", "aws", "us-east-1", "L4", 0.8)], pol))
    assert result.placement.total("chat") == 2
    [u] = result.unplaced
    assert u.constraint == "budget" and u.replicas == pytest.approx(2.0)


def test_identical_pools_merge_and_split_back_within_capacity():
    """Two identical pools of one region act as one in the model and the split fills each within its GPUs."""
    pools = [sc.pool("z1", "aws", "us-east-1", "L4", 0.8, nodes_max=2), sc.pool("z2", "aws", "us-east-1", "L4", 0.8, nodes_max=2)]
    result = solve(sc.problem([sc.dep("chat", regions={"na-east": 3})], pools))
    assert result.stats["groups"] == 1
    assert sum(result.placement.of("chat").values()) == 3
    assert max(result.placement.of("chat").values()) <= 2


def test_warm_start_keeps_the_plan_and_incremental_resolve_changes_one_deployment():
    """Re-solving an unchanged problem from its own plan changes nothing; one changed demand is solved alone."""
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8, nodes_max=16), sc.pool("b", "gcp", "europe-west4", "L4", 0.9, nodes_max=16)]
    deps = [sc.dep(f"d{i}", regions={"na-east": 1, "eu-west": 1}) for i in range(12)]
    first = solve(sc.problem(deps, pools))
    again = solve(sc.problem(deps, pools), current=first.placement)
    assert solver.diff(first.placement, again.placement).empty
    assert again.mode == "incremental"
    changed = deps[:-1] + [sc.dep("d11", regions={"na-east": 3, "eu-west": 1})]
    third = solve(sc.problem(changed, pools), current=first.placement)
    assert third.mode == "incremental"
    plan = solver.diff(first.placement, third.placement)
    assert {c.deployment for c in plan.changes} == {"d11"}
    assert plan.replicas_added == 2 and plan.replicas_removed == 0


def test_short_time_limit_still_returns_a_valid_plan():
    """A 0.3 s limit on a mid-size instance returns a plan (optimal or best found) that breaks nothing."""
    pools = [sc.pool(f"c{i}", "aws", r, "L4", 0.8 + i / 100, nodes_max=6)
             for i, r in enumerate(["us-east-1", "us-east-2", "us-west-2", "eu-west-1", "eu-central-1"])]
    deps = [sc.dep(f"d{i}", regions={"na-east": 1 + i % 3, "eu-west": 1}) for i in range(20)]
    result = solve(sc.problem(deps, pools), time_limit_s=0.3)
    assert result.status in (solver.SolveStatus.OPTIMAL, solver.SolveStatus.FEASIBLE)


def test_diff_lists_adds_and_removes_per_pool():
    """diff() pairs current and target counts per (deployment, pool)."""
    cur = solver.Placement({("a", "p1"): 2, ("a", "p2"): 1, ("b", "p1"): 1})
    tgt = solver.Placement({("a", "p1"): 3, ("b", "p1"): 1, ("b", "p3"): 2})
    plan = solver.diff(cur, tgt)
    assert [(c.deployment, c.pool, c.delta) for c in plan.changes] == [("a", "p1", 1), ("a", "p2", -1), ("b", "p3", 2)]
    assert plan.replicas_added == 3 and plan.replicas_removed == 1
    assert plan.by_pool() == {"p1": 1, "p2": -1, "p3": 2}
    assert solver.diff(cur, cur).empty


def test_bad_inputs_are_refused_with_the_parameter_named():
    """A non-positive time limit, an unknown plugin and duplicate pools fail loudly, naming what is wrong."""
    prob = sc.problem([sc.dep("chat", regions={"na-east": 1})], [sc.pool("c", "aws", "us-east-1", "L4", 0.8)])
    with pytest.raises(ValueError, match="time_limit_s"):
        solver.solve(prob, time_limit_s=0)
    with pytest.raises(solver.framework.UnknownPlugin, match="latency"):
        solver.solve(prob, time_limit_s=1, settings=solver.SolverSettings(filters=("latncy",)))
    with pytest.raises(ValueError, match="pool keys must be unique"):
        sc.problem([], [sc.pool("c", "aws", "us-east-1", "L4", 0.8), sc.pool("c", "aws", "us-east-1", "L4", 0.8)])


def test_one_replica_serves_several_regions_within_their_sla():
    """A replica in Virginia serves both na-east and na-central (one H100 worth 4 units covers 2 + 2)."""
    d = sc.dep("chat", regions={"na-east": 2, "na-central": 2}, gpu_types=["L4", "H100"],
               profile={"L4": 1.0, "H100": 4.0}, max_rtt_ms=60)
    prob = sc.problem([d], [sc.pool("c", "aws", "us-east-1", "H100", 8.0, gpus_per_node=8, nodes_max=1)])
    result = solve(prob)
    assert result.placement.to_dict() == {"chat": {"c/h100-on-demand": 1}}
    assert result.serving == {("chat", "na-east", "c/h100-on-demand"): 2.0, ("chat", "na-central", "c/h100-on-demand"): 2.0}


def test_many_client_regions_use_flow_variables_and_stay_within_sla():
    """Beyond HALL_MAX_REGIONS regions the model switches to flow variables; each region still gets nearby capacity."""
    regions = {"na-east": 1, "na-central": 1, "na-west": 1, "eu-west": 1, "eu-central": 1, "ap-northeast": 1}
    assert len(regions) > solver.formulation.HALL_MAX_REGIONS
    pools = [sc.pool("use1", "aws", "us-east-1", "L4", 0.8), sc.pool("usw2", "aws", "us-west-2", "L4", 0.8),
             sc.pool("euw1", "aws", "eu-west-1", "L4", 0.9), sc.pool("euc1", "aws", "eu-central-1", "L4", 0.9),
             sc.pool("apne1", "aws", "ap-northeast-1", "L4", 1.0)]
    result = solve(sc.problem([sc.dep("chat", regions=regions, max_rtt_ms=70)], pools))
    assert result.unplaced == ()
    assert result.placement.total("chat") == 6
    for region in regions:
        assert sum(v for (_, r, _), v in result.serving.items() if r == region) >= 1.0 - 1e-9


def test_pools_from_cluster_specs_take_catalog_spot_and_reserved_prices():
    """Declared pools get the catalog price, the spot price for spot pools and the commitment price for reserved ones."""
    loaded = spec_mod.load_files(["examples/capacity-policy.yaml", "examples/clusters.yaml"])
    policy = loaded.of_kind("CapacityPolicy")[0].spec
    offers = {p.key: p for p in inputs.pools_from_clusters(loaded.of_kind("Cluster"), policy)}
    assert offers["aws-use1/h100"].price_per_node_hour_usd == 31.46  # reserved commitment
    assert offers["aws-use1/h100"].pool.nodes_min == 1
    assert offers["aws-use1/l4-spot"].price_per_node_hour_usd < offers["aws-use1/l4"].price_per_node_hour_usd
    assert offers["gcp-usc1/l4"].price_per_node_hour_usd == 0.70  # policy price override
    assert offers["aws-use1/l4"].gpus_capacity == 8  # one node free now + 7 more it may grow to


def test_a_reserved_pool_offers_only_the_nodes_its_commitment_covers():
    """A reserved-tier pool that may grow to 3 nodes under a 1-node commitment offers one node's
    GPUs: a second would be planned at the committed $31.46 but billed on demand."""
    loaded = spec_mod.load_files(["examples/capacity-policy.yaml", "examples/clusters.yaml"])
    policy = loaded.of_kind("CapacityPolicy")[0].spec
    clusters = [c.model_copy(deep=True) for c in loaded.of_kind("Cluster")]
    use1 = next(c for c in clusters if c.metadata.name == "aws-use1")
    h100 = next(p for p in use1.spec.pools if p.name == "h100")
    object.__setattr__(h100, "max_nodes", 3)
    offers = {p.key: p for p in inputs.pools_from_clusters(clusters, policy)}
    assert offers["aws-use1/h100"].pool.nodes_max == 3
    assert offers["aws-use1/h100"].gpus_capacity == 8
    more = policy.model_copy(update={"reserved": [r.model_copy(update={"nodes": 2}) for r in policy.reserved]})
    assert {p.key: p for p in inputs.pools_from_clusters(clusters, more)}["aws-use1/h100"].gpus_capacity == 16
    # Nodes that run now stay usable (no running replica is displaced by the cap); only growth stops.
    object.__setattr__(h100, "initial_nodes", 2)
    assert {p.key: p for p in inputs.pools_from_clusters(clusters, policy)}["aws-use1/h100"].gpus_capacity == 16



def test_nodes_already_ordered_stay_on_offer_when_the_quota_has_no_room_left():
    """A spot H100 pool whose node was just reclaimed: none running, two ordered (the replacement
    and the group's backfill), no quota left beyond them (agents report the headroom beyond the
    nodes ordered). Its ordered 16 GPUs are on offer, so the plan waits for them rather than order
    an on-demand node elsewhere; before, the pool offered nothing and the plan moved away and back."""
    reclaimed = fleet.GpuPool(
        pool_id="h100-spot", gpu_type="H100", gpu_memory_gib=80, gpus_per_node=8, instance_type="H100x8",
        nodes_current=0, nodes_min=0, nodes_max=2, gpus_free=0, tier=fleet.Tier.SPOT, price_per_node_hour_usd=30.89,
        quota_headroom_gpus=0, nodes_pending=2)
    offer = solver.PoolOffer.of("gcp-usc1", "gcp", "us-central1", reclaimed)
    assert offer.gpus_capacity == 16
    # The quota still caps the nodes not yet ordered: one running, none ordered, room for one more.
    running = dataclasses.replace(reclaimed, nodes_current=1, nodes_pending=0, gpus_free=8, nodes_max=3,
                                  quota_headroom_gpus=8)
    assert solver.PoolOffer.of("gcp-usc1", "gcp", "us-central1", running).gpus_capacity == 16
    big = sc.dep("big", regions={"na-east": 1}, gpu_types=["H100"], gpus=4, source=sc.BIG, spot=True,
                 spot_share=1.0, spot_region_share=1.0, ttft_ms=5000)
    elsewhere = sc.pool("use1", "aws", "us-east-1", "H100", 55.04, gpus_per_node=8, nodes_max=2)
    result = solve(sc.problem([big], [offer, elsewhere], sc.policy(spot={"allowed": True, "max_share": 1.0})))
    assert result.placement.to_dict() == {"big": {"gcp-usc1/h100-spot": 2}}


def test_spot_share_cap_weighs_capacity_not_replicas():
    """A 50% spot cap with one replica type 3x the other: one on-demand L40S (3 units, $1.80) lets
    three spot L4s (3 units, $0.30 each) serve next to it, $2.70 for 6 units; counting replicas
    would allow only one spot L4 and cost more. Spot never holds more than half the capacity."""
    pol = sc.policy(spot={"allowed": True, "max_share": 1.0})
    d = sc.dep("chat", regions={"na-east": 5}, gpu_types=["L4", "L40S"], profile={"L4": 1, "L40S": 3}, spot=True,
               spot_share=0.5)
    prob = sc.problem([d], [sc.pool("c", "aws", "us-east-1", "L40S", 1.8, nodes_max=4),
                            sc.pool("c", "aws", "us-east-1", "L4", 0.30, tier="spot", nodes_max=8)], pol)
    result = solve(prob)
    # 5 units: 1 L40S (3) + 3 spot L4 (3 x 0.85 credit = 2.55) = 5.55 >= 5, spot capacity 3 of 6.
    assert result.placement.to_dict() == {"chat": {"c/l40s-on-demand": 1, "c/l4-spot": 3}}
    assert result.cost_per_hour_usd == pytest.approx(2.70)


def test_serving_beyond_max_rtt_is_kept_by_an_incremental_re_solve():
    """A region served from beyond max_rtt_ms (nothing within it) is a valid plan: when another
    deployment's demand changes, the re-solve is incremental and leaves it as it is."""
    big = sc.dep("big", regions={"ap-south": 1}, gpu_types=["H100"], gpus=4, source=sc.BIG, max_rtt_ms=80)
    pools = [sc.pool("use1", "aws", "us-east-1", "H100", 60.0, gpus_per_node=8), sc.pool("use1", "aws", "us-east-1", "L4", 0.8)]
    first = solve(sc.problem([big, sc.dep("chat", regions={"na-east": 1})], pools))
    changed = sc.problem([big, sc.dep("chat", regions={"na-east": 2})], pools)
    assert solver.changed_deployments(changed, first.placement, solver.SolverSettings()) == {1}  # chat only
    again = solve(changed, current=first.placement, settings=solver.SolverSettings(incremental="always"))
    assert again.mode == "incremental"
    assert again.placement.to_dict() == {"big": {"use1/h100-on-demand": 1}, "chat": {"use1/l4-on-demand": 2}}


def test_a_ttft_target_the_prefill_and_headroom_use_up_is_explained_as_such():
    """A TTFT target above the prefill but within the headroom of it: no region can serve, and the
    reason says the prefill plus the headroom exceed the target (not "within -4 ms")."""
    probe = sc.dep("e", regions={"na-east": 1})
    prefill = candidates.make_view(probe, None).prefill_ms_by_type["L4"]
    embed = sc.dep("embed", regions={"na-east": 1}, ttft_ms=round(prefill + 6, 1))
    [u] = solve(sc.problem([embed], [sc.pool("use1", "aws", "us-east-1", "L4", 0.5)])).unplaced
    assert u.constraint == "ttft"
    assert "plus the 10 ms headroom exceeds its TTFT p99" in u.reason and "within -" not in u.reason, u.reason


def test_a_deployment_left_unplaced_is_placed_when_a_pool_appears_with_the_same_demand():
    """A plan made before a cluster reported leaves a deployment unplaced; when the cluster's pool
    appears (same demand), the incremental re-solve from that plan places it instead of keeping the
    old plan's nothing."""
    placed = sc.dep("chat", regions={"na-east": 1})
    waiting = sc.dep("embed", regions={"eu-west": 2}, gpu_types=["A10G"], profile={"A10G": 1})
    early = [sc.pool("a", "aws", "us-east-1", "L4", 0.8, nodes_max=4)]
    first = solve(sc.problem([placed, waiting], early))
    assert first.placement.total("embed") == 0 and [u.deployment for u in first.unplaced] == ["embed"]
    later = early + [sc.pool("b", "gcp", "europe-west4", "A10G", 1.0, nodes_max=4)]
    again = solve(sc.problem([placed, waiting], later), current=first.placement)
    assert again.placement.total("embed") == 2 and again.unplaced == ()
    assert again.placement.of("chat") == first.placement.of("chat")


def test_a_full_solve_moves_what_an_incremental_re_solve_keeps_on_a_pool_that_became_dearer_than_another():
    """Planned while only the $2.00 pool had room (the $0.50 one was excluded: its node was still
    coming up), twelve deployments run there. With the cheap pool back and demand unchanged, an
    incremental re-solve re-places nothing (no deployment changed); the full solve the control loop
    runs every ``full_solve_interval_s`` (``planner.full_settings``) moves them: $1.50/h saved per
    replica outweighs its churn ($0.50 to add, $0.50 to remove)."""
    cheap, dear = sc.pool("a", "aws", "us-east-1", "L4", 0.50, nodes_max=16), sc.pool("b", "aws", "us-east-2", "L4", 2.00,
                                                                                        nodes_max=16)
    deps = [sc.dep(f"d{i}", regions={"na-east": 1}) for i in range(12)]
    first = solve(sc.problem(deps, [cheap, dear], excluded={cheap.key: "node provisioning"}))
    assert set(first.placement.of("d0")) == {dear.key}
    kept = solve(sc.problem(deps, [cheap, dear]), current=first.placement)
    assert kept.mode == "incremental" and solver.diff(first.placement, kept.placement).empty
    full = solve(sc.problem(deps, [cheap, dear]), current=first.placement,
                 settings=planner.full_settings(solver.SolverSettings()))
    assert full.mode != "incremental"
    assert all(set(full.placement.of(d.name)) == {cheap.key} for d in deps)
    assert full.cost_per_hour_usd == pytest.approx(12 * 0.50)


def test_a_full_solve_is_due_at_the_first_plan_and_every_interval_after():
    assert planner.full_solve_due(None, 100.0, 600.0)
    assert not planner.full_solve_due(100.0, 699.0, 600.0)
    assert planner.full_solve_due(100.0, 700.0, 600.0)
    assert planner.full_solve_due(100.0, 100.0, 0.0)
