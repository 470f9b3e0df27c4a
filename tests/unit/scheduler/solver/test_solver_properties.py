"""Property tests: on random small fleets no plan breaks a hard constraint, every unserved demand
is reported with the constraint that stops it and every covered region has a replica within reach
or is reported uncovered with its cause, by whichever path the solve meets its time
limit (CP-SAT in time, a tiny limit, no CP-SAT solution, CP-SAT's first solution, the LP out of
time: ``solver_cases.TIMEOUT_PATHS``), first placements and warm-started re-solves alike.
Bounded: few examples, at most 1 s per solve (most take tens of ms). Settings: the
``meridian-solver`` profile (conftest.py), derandomized under CI."""

from __future__ import annotations

import dataclasses
import random

import hypothesis
import hypothesis.strategies as st
import pytest
import solver_cases as sc

from scheduler import solver

CLOUD_REGIONS = [("aws", "us-east-1"), ("aws", "eu-west-1"), ("aws", "ap-south-1"), ("gcp", "us-central1"),
                 ("gcp", "europe-west4"), ("azure", "eastus2"), ("azure", "japaneast")]
CLIENTS = ["na-east", "na-west", "eu-west", "ap-south", "ap-northeast"]
TYPES = [("L4", 1), ("A10G", 1), ("L40S", 1), ("H100", 8)]
CONSTRAINTS = set(solver.problem.CONSTRAINTS)


@st.composite
def instances(draw: st.DrawFn) -> solver.PlacementProblem:
    pools = []
    for i in range(draw(st.integers(2, 7))):
        cloud, region = draw(st.sampled_from(CLOUD_REGIONS))
        gpu, per_node = draw(st.sampled_from(TYPES))
        tier = draw(st.sampled_from(["on_demand", "on_demand", "spot", "reserved"]))
        nodes_max = draw(st.integers(0, 5))
        nodes_min = min(nodes_max, 1) if tier == "reserved" else draw(st.integers(0, min(1, nodes_max)))
        # Round prices often repeat, so identical pools of a region merge into one group.
        price = draw(st.one_of(st.floats(0.2, 4.0), st.sampled_from([0.5, 1.0, 2.0]))) * per_node
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
            profile={t: draw(st.sampled_from([0.5, 1.0, 2.0, 4.0])) for t in types},
            # Coverage: traffic from regions demand may not reach (None: the regions with demand).
            covered=draw(st.one_of(st.none(), st.lists(st.sampled_from(regions), unique=True))),
            always_served=draw(st.lists(st.sampled_from(regions), max_size=1))))
    teams = [{"name": t, "max_gpus": draw(st.one_of(st.none(), st.integers(0, 16))),
              "max_gpus_by_type": draw(st.dictionaries(st.sampled_from(["L4", "H100"]), st.integers(0, 8), max_size=1)),
              "budget_per_hour_usd": draw(st.one_of(st.none(), st.floats(0, 60)))} for t in ("a", "b")]
    clouds = [{"name": c, "max_gpus": draw(st.one_of(st.none(), st.integers(0, 24)))} for c in ("aws", "gcp", "azure")]
    pol = sc.policy(teams=teams, clouds=clouds, budget_per_hour_usd=draw(st.one_of(st.none(), st.floats(10, 200))),
                    spot={"allowed": draw(st.booleans()), "max_share": draw(st.sampled_from([0.3, 0.6, 1.0]))})
    excluded = {p.key: "stock-out" for p in pools if draw(st.integers(0, 5)) == 0}
    return sc.problem(deps, pools, pol, excluded)


PROFILE = hypothesis.settings.get_profile("meridian-solver")
PATHS = list(sc.TIMEOUT_PATHS)


def check(prob: solver.PlacementProblem, result: solver.PlacementResult) -> None:
    """A returned plan breaks nothing, and what it leaves unserved is explained."""
    assert result.status in (solver.SolveStatus.OPTIMAL, solver.SolveStatus.FEASIBLE)
    assert sc.violations(prob, result) == []
    for u in (*result.unplaced, *result.uncovered):
        assert u.constraint in CONSTRAINTS
        assert u.deployment in u.reason and u.client_region in u.reason
    assert result.lower_bound <= result.objective + 1e-6


def taken(path: str, calls: list[str], result: solver.PlacementResult) -> None:
    """The forced path really ran (an LP is solved only when some pair survives the filters)."""
    lp_ran = path == "lp_out_of_time" and result.stats.get("pairs")
    if path in ("no_cp_sat_solution", "first_cp_sat_solution") or lp_ran:
        assert calls
    if path == "no_cp_sat_solution":
        assert "CP-SAT returned unknown" in result.message


def changed_demand(prob: solver.PlacementProblem, extra: int) -> solver.PlacementProblem:
    """The first deployment rebuilt with another demand in its first region (and default spec knobs)."""
    d = prob.deployments[0]
    region = sorted(d.replicas_by_region)[0]
    return sc.problem([sc.dep(d.name, regions={**d.replicas_by_region, region: extra},
                              gpu_types=d.spec.resources.gpu_types, team=d.team,
                              profile=dict(d.spec.resources.throughput_profile)), *prob.deployments[1:]],
                      prob.pools, prob.policy, dict(prob.excluded_pools))


@pytest.mark.parametrize("path", PATHS)
@hypothesis.settings(PROFILE, max_examples=40)
@hypothesis.given(instances())
def test_no_plan_violates_a_hard_constraint_and_unserved_demand_is_explained(path: str, prob: solver.PlacementProblem):
    """Capacity, quotas, budgets, latency, isolation, spot share, max_replicas hold; shortfalls carry reasons."""
    with sc.timeout_path(path) as calls:
        result = solver.solve(prob, time_limit_s=sc.TIMEOUT_PATHS[path])
    check(prob, result)
    taken(path, calls, result)


@pytest.mark.parametrize("path", PATHS)
@hypothesis.settings(PROFILE, max_examples=25)
@hypothesis.given(instances(), st.integers(0, 4), st.sampled_from(["auto", "always"]))
def test_warm_started_resolve_after_a_change_stays_valid(path: str, prob: solver.PlacementProblem, extra: int,
                                                         incremental: str):
    """Re-solving from a plan after one deployment's demand changes yields a plan that breaks nothing."""
    settings = solver.SolverSettings(incremental=incremental)
    first = solver.solve(prob, time_limit_s=1.0, settings=settings)
    changed = changed_demand(prob, extra)
    with sc.timeout_path(path) as calls:
        again = solver.solve(changed, time_limit_s=sc.TIMEOUT_PATHS[path], current=first.placement, settings=settings)
    check(changed, again)
    taken(path, calls, again)


@pytest.mark.parametrize("path", PATHS)
@hypothesis.settings(PROFILE, max_examples=25)
@hypothesis.given(instances(), st.sampled_from(["stock-out", "shrink", "quota"]), st.sampled_from(["auto", "always"]),
                  st.randoms(use_true_random=False))
def test_resolve_after_a_pool_or_a_limit_shrinks_stays_valid(path: str, prob: solver.PlacementProblem, change: str,
                                                             incremental: str, rnd: random.Random):
    """A pool the plan uses stocks out or loses half its GPUs, or team quotas drop: the re-solve from
    the old plan (the warm start, the replicas an incremental solve would keep) still breaks nothing."""
    settings = solver.SolverSettings(incremental=incremental)
    first = solver.solve(prob, time_limit_s=1.0, settings=settings)
    used = sorted({key for (_, key), n in first.placement.replicas.items() if n > 0}) or [p.key for p in prob.pools]
    victim = rnd.choice(used)
    pools, excluded, policy = list(prob.pools), dict(prob.excluded_pools), prob.policy
    if change == "stock-out":
        excluded[victim] = "stock-out"
    elif change == "shrink":
        pools = [dataclasses.replace(p, gpus_capacity=p.gpus_capacity // 2) if p.key == victim else p for p in pools]
    else:
        teams = [t.model_copy(update={"max_gpus": rnd.randint(0, 4)}) for t in policy.teams]
        policy = policy.model_copy(update={"teams": teams})
    # The first deployment also asks for one more replica, so an incremental re-solve has work to do.
    d = prob.deployments[0]
    region = sorted(d.replicas_by_region)[0]
    grown = dataclasses.replace(d, replicas_by_region={**d.replicas_by_region, region: d.replicas_by_region[region] + 1})
    changed = sc.problem([grown, *prob.deployments[1:]], pools, policy, excluded)
    with sc.timeout_path(path) as calls:
        again = solver.solve(changed, time_limit_s=sc.TIMEOUT_PATHS[path], current=first.placement, settings=settings)
    check(changed, again)
    taken(path, calls, again)
