"""Crafted cases where a plan used to break a hard constraint (merged pools split back onto member
pools, replicas an incremental re-solve keeps, a time-limit fallback), and the last check that
makes any returned plan valid (``scheduler.solver.validate``)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import solver_cases as sc

from scheduler import solver
from scheduler.solver import candidates, evaluate, greedy, linear, starts, validate

ALWAYS = solver.SolverSettings(incremental="always")


def solve(prob: solver.PlacementProblem, repaired: bool = False, **kw: object) -> solver.PlacementResult:
    """solve() with its plan checked; unless ``repaired``, valid by construction (the last check found nothing)."""
    result = solver.solve(prob, time_limit_s=kw.pop("time_limit_s", 10.0), **kw)
    assert result.status in (solver.SolveStatus.OPTIMAL, solver.SolveStatus.FEASIBLE)
    assert sc.violations(prob, result) == []
    assert ("repaired_replicas" in result.stats) is repaired
    return result


def test_merged_pools_fill_the_paid_node_before_opening_one():
    """Two identical pools merge; the replicas go on the node one of them pays for anyway, not onto a new node of the other."""
    pol = sc.policy(budget_per_hour_usd=3.2)  # exactly the paid node: a second node breaks the fleet budget
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 3.2, gpus_per_node=4, nodes_max=2),
             sc.pool("b", "aws", "us-east-1", "L4", 3.2, gpus_per_node=4, nodes_max=2, nodes_min=1)]
    result = solve(sc.problem([sc.dep("chat", regions={"na-east": 2})], pools, pol))
    assert result.stats["groups"] == 1
    assert result.placement.to_dict() == {"chat": {"b/l4-on-demand": 2}}
    assert result.cost_per_hour_usd == pytest.approx(3.2)


def test_warm_start_in_merged_pools_does_not_run_more_nodes_than_the_model_counts():
    """Keeping each deployment where it runs would open a second node of a merged group under a cloud quota of one node; the split packs them instead."""
    pol = sc.policy(clouds=[{"name": "aws", "max_gpus": 4}, {"name": "gcp"}, {"name": "azure"}])
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 3.2, gpus_per_node=4, nodes_max=2),
             sc.pool("b", "aws", "us-east-1", "L4", 3.2, gpus_per_node=4, nodes_max=2)]
    deps = [sc.dep("x", regions={"na-east": 1}), sc.dep("y", regions={"na-east": 1})]
    current = solver.Placement({("x", "a/l4-on-demand"): 1, ("y", "b/l4-on-demand"): 1},
                               {("x", "na-east", "a/l4-on-demand"): 1.0, ("y", "na-east", "b/l4-on-demand"): 1.0})
    result = solve(sc.problem(deps, pools, pol), current=current, settings=solver.SolverSettings(incremental="never"))
    assert len({key for (_, key) in result.placement.replicas}) == 1
    assert result.cost_per_hour_usd == pytest.approx(3.2)


def test_incremental_resolve_fits_new_replicas_around_kept_ones_in_merged_pools():
    """A kept deployment fills most of one member of a merged group; the changed one's new replicas go where there is room."""
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8), sc.pool("b", "aws", "us-east-1", "L4", 0.8)]
    kept, grow = sc.dep("kept", regions={"na-east": 3}), sc.dep("grow", regions={"na-east": 0})
    first = solve(sc.problem([kept, grow], pools))
    assert first.placement.to_dict() == {"kept": {"a/l4-on-demand": 3}}
    grown = sc.dep("grow", regions={"na-east": 2})
    result = solve(sc.problem([kept, grown], pools), current=first.placement, settings=ALWAYS)
    assert result.mode == "incremental"
    assert result.placement.of("kept") == {"a/l4-on-demand": 3}
    assert result.placement.total("grow") == 2 and result.unplaced == ()


def test_incremental_resolve_moves_kept_replicas_a_shrunk_pool_no_longer_holds():
    """A pool lost half its GPUs: the deployment whose demand did not change is re-placed instead of kept over capacity."""
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8), sc.pool("b", "aws", "us-east-2", "L4", 0.9)]
    deps = [sc.dep("kept", regions={"na-east": 3}), sc.dep("grow", regions={"na-east": 1})]
    first = solve(sc.problem(deps, pools))
    assert first.placement.of("kept") == {"a/l4-on-demand": 3}
    shrunk = [dataclasses.replace(pools[0], gpus_capacity=2), pools[1]]
    grown = [deps[0], sc.dep("grow", regions={"na-east": 2})]
    result = solve(sc.problem(grown, shrunk), current=first.placement, settings=ALWAYS)
    assert result.placement.total("kept") == 3 and result.placement.total("grow") == 2
    assert result.unplaced == ()


def test_incremental_resolve_respects_a_lowered_team_quota():
    """The team quota drops below what a kept deployment holds: it is re-solved within the quota and the rest is explained."""
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8, nodes_max=8)]
    deps = [sc.dep("kept", regions={"na-east": 3}, team="t"), sc.dep("grow", regions={"na-east": 1})]
    first = solve(sc.problem(deps, pools, sc.policy(teams=[{"name": "t"}])))
    grown = [deps[0], sc.dep("grow", regions={"na-east": 2})]
    result = solve(sc.problem(grown, pools, sc.policy(teams=[{"name": "t", "max_gpus": 2}])),
                   current=first.placement, settings=ALWAYS)
    assert result.placement.total("kept") == 2 and result.placement.total("grow") == 2
    [u] = result.unplaced
    assert (u.deployment, u.constraint, u.replicas) == ("kept", "team_quota", 1.0)


@pytest.mark.parametrize("incremental", ["never", "always"])
def test_no_cp_sat_solution_in_time_returns_the_warm_start_plan(incremental: str):
    """CP-SAT out of time without a solution: the search backend returns the greedy repair of the current placement, valid, in either mode."""
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8), sc.pool("b", "aws", "us-east-2", "L4", 0.9, nodes_max=8)]
    deps = [sc.dep("kept", regions={"na-east": 3}), sc.dep("grow", regions={"na-east": 1})]
    first = solve(sc.problem(deps, pools))
    grown = sc.problem([deps[0], sc.dep("grow", regions={"na-east": 4})], pools, excluded={"a/l4-on-demand": "stock-out"})
    with sc.timeout_path("no_cp_sat_solution") as calls:
        result = solve(grown, current=first.placement,
                       settings=solver.SolverSettings(incremental=incremental, backend="search"))
    assert calls and "CP-SAT returned unknown" in result.message
    assert result.status is solver.SolveStatus.FEASIBLE
    assert result.placement.to_dict() == {"grow": {"b/l4-on-demand": 4}, "kept": {"b/l4-on-demand": 3}}


def test_an_invalid_answer_from_the_optimiser_is_repaired_not_returned(monkeypatch: pytest.MonkeyPatch):
    """Whatever the optimiser answers (here every variable at its upper bound), the plan returned breaks nothing and says what it dropped."""
    def everything(model: linear.LinearModel, **kw: object) -> linear.SatOutcome:
        return linear.SatOutcome("optimal", list(model.ub), math.inf, -math.inf, 0.0)

    monkeypatch.setattr(linear, "solve_sat", everything)
    pol = sc.policy(teams=[{"name": "t", "max_gpus": 3}], spot={"allowed": True, "max_share": 1.0})
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8), sc.pool("s", "aws", "us-east-1", "L4", 0.3, tier="spot"),
             sc.pool("g", "gcp", "us-east4", "L4", 0.9)]
    deps = [sc.dep("chat", regions={"na-east": 3}, team="t", spot=True, spot_share=0.3),
            sc.dep("batch", regions={"na-east": 2}, priority_class="batch", priority=10, clouds=2, max_replicas=3)]
    result = solve(sc.problem(deps, pools, pol), repaired=True, settings=solver.SolverSettings(aggregate_pools=False))
    assert result.status is solver.SolveStatus.FEASIBLE
    assert "plan repaired" in result.message and result.stats["repaired_replicas"] > 0
    assert result.placement.replicas  # repaired, not emptied (solve() checked it breaks nothing and explains shortfalls)


def test_validate_names_every_broken_constraint():
    """A hand-made plan on an excluded pool, over capacity, spot share, isolation, max_replicas and latency is reported constraint by constraint."""
    pol = sc.policy(teams=[{"name": "t", "max_gpus": 2}], spot={"allowed": True, "max_share": 1.0})
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8, nodes_max=2), sc.pool("s", "aws", "us-east-1", "L4", 0.3, tier="spot"),
             sc.pool("x", "aws", "us-east-2", "L4", 0.8), sc.pool("m", "aws", "ap-south-1", "L4", 0.8)]
    deps = [sc.dep("chat", regions={"na-east": 3}, team="t", spot=True, spot_share=0.3, max_replicas=4, max_rtt_ms=60),
            sc.dep("iso", regions={"na-east": 1}, clouds=2)]
    prob = sc.problem(deps, pools, pol, {"x/l4-on-demand": "stock-out"})
    bad = solver.Placement(
        {("chat", "a/l4-on-demand"): 3, ("chat", "s/l4-spot"): 3, ("chat", "x/l4-on-demand"): 1,
         ("chat", "m/l4-on-demand"): 1, ("iso", "a/l4-on-demand"): 1},
        {("chat", "na-east", "a/l4-on-demand"): 3.0, ("chat", "na-east", "m/l4-on-demand"): 1.0,
         ("iso", "na-east", "a/l4-on-demand"): 2.0})
    found = {v.constraint for v in validate.violations(prob, bad)}
    assert found >= {"stock_out", "capacity", "team_quota", "max_replicas", "spot", "isolation", "max_rtt"}
    repaired = validate.repair(prob, bad)
    assert validate.violations(prob, repaired.placement) == []
    # (Uncovered regions are named by solve from the repaired plan, not by repair itself.)
    assert sc.violations(prob, solver.PlacementResult(solver.SolveStatus.FEASIBLE, repaired.placement, 0, 0, 0, 0,
                                                      repaired.unplaced), coverage=False) == []
    assert repaired.dropped_replicas > 0 and {u.deployment for u in repaired.unplaced} <= {"chat", "iso"}


def test_repair_drops_the_lowest_priority_replicas_first_and_reports_their_demand():
    """Two deployments over one pool's capacity: the batch one gives up a replica, reported unplaced for capacity."""
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8, nodes_max=3)]
    deps = [sc.dep("high", regions={"na-east": 2}, priority_class="critical", priority=1000),
            sc.dep("low", regions={"na-east": 2}, priority_class="batch", priority=10)]
    prob = sc.problem(deps, pools)
    over = solver.Placement({("high", "a/l4-on-demand"): 2, ("low", "a/l4-on-demand"): 2},
                            {("high", "na-east", "a/l4-on-demand"): 2.0, ("low", "na-east", "a/l4-on-demand"): 2.0})
    repaired = validate.repair(prob, over)
    assert repaired.placement.to_dict() == {"high": {"a/l4-on-demand": 2}, "low": {"a/l4-on-demand": 1}}
    [u] = repaired.unplaced
    assert (u.deployment, u.client_region, u.constraint, u.replicas) == ("low", "na-east", "capacity", 1.0)
    assert "low" in u.reason and "na-east" in u.reason


def test_a_valid_plan_passes_the_check_untouched():
    """repair() returns a valid plan as it is, with nothing found and nothing dropped."""
    prob = sc.problem([sc.dep("chat", regions={"na-east": 2})], [sc.pool("a", "aws", "us-east-1", "L4", 0.8)])
    result = solve(prob)
    repaired = validate.repair(prob, result.placement)
    assert repaired.placement is result.placement
    assert (repaired.found, repaired.dropped_replicas, repaired.unplaced) == ((), 0, ())


def test_a_split_that_fits_no_member_is_overfilled_then_repaired_with_the_loss_reported():
    """Two merged 8-GPU pools with 4 GPUs left on each cannot hold one 8-GPU replica: the plain split
    fails; the overfilled one (for a solve with no time to re-solve unmerged) puts it beyond a
    member's capacity, which the last check finds and repairs by dropping a replica."""
    prob = sc.problem([sc.dep("big", regions={"na-east": 1}, gpu_types=["H100"], gpus=8, source=sc.BIG)],
                      [sc.pool("c1", "aws", "us-east-1", "H100", 30.0, gpus_per_node=8, nodes_max=1, pool_id="a"),
                       sc.pool("c2", "aws", "us-east-1", "H100", 30.0, gpus_per_node=8, nodes_max=1, pool_id="b")])
    c = candidates.build(prob, solver.SolverSettings())
    (p,) = c.pairs_by_d[0]
    held = {m.key: 4 for m in c.groups[c.pairs[p].g].members}
    sol = starts.with_flows(c, greedy.Solution({p: 1}, {}), [0])
    assert evaluate.split(c, sol, None, held) is None
    over = evaluate.split(c, sol, None, held, overfill=True)
    assert sum(over.replicas.values()) == 1
    # The held GPUs are what an incremental re-solve keeps: as kept replicas of another deployment.
    kept = sc.dep("kept", regions={"na-east": 0}, gpu_types=["H100"], gpus=4, source=sc.BIG)
    whole = sc.problem([*prob.deployments, kept], prob.pools)
    placement = solver.Placement({**over.replicas, ("kept", "c1/a"): 1, ("kept", "c2/b"): 1}, dict(over.serving))
    assert any(v.constraint == "capacity" for v in validate.violations(whole, placement))
    fixed = validate.repair(whole, placement)
    assert validate.violations(whole, fixed.placement) == []
    assert fixed.dropped_replicas >= 1


def test_fragmentation_with_no_time_left_repairs_instead_of_solving_again(monkeypatch: pytest.MonkeyPatch):
    """When the merged plan does not split onto member pools and less than half the time is left,
    the solve overfills the split and repairs it rather than re-solving the unmerged model (which
    returned a greedy plan): the plan it returns is valid."""
    real = evaluate.split
    calls: list[bool] = []

    def fragmented(*args, overfill: bool = False, **kw):
        calls.append(overfill)
        return real(*args, overfill=overfill, **kw) if overfill else None

    monkeypatch.setattr(evaluate, "split", fragmented)
    prob = sc.problem([sc.dep("chat", regions={"na-east": 2})],
                      [sc.pool("a", "aws", "us-east-1", "L4", 1.0), sc.pool("b", "aws", "us-east-1", "L4", 1.0)])
    result = solver.solve(prob, time_limit_s=0.001)
    assert calls == [False, True]
    assert sc.violations(prob, result) == []
