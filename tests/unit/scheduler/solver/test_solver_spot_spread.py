"""The per-region spot cap (placement.spot.max_share_per_region): a deployment allowed wholly on spot
keeps no more than that share of its capacity on spot in any one region, in every backend, in the
greedy start and the dive, and in the last check."""

from __future__ import annotations

import pytest

from meridian import fleet
from meridian.spec import deployment as deployment_spec
from scheduler import solver
from scheduler.solver import candidates, dive, evaluate, formulation, greedy, ledger, starts, validate

import solver_cases as sc

SPOT_POL = sc.policy(spot={"allowed": True, "max_share": 1.0})


def _two_region_problem(region_share: float | None = 0.5) -> solver.PlacementProblem:
    """2 reference replicas, wholly on spot allowed: spot L4 at $0.30 in us-east-1 and $0.35 in
    us-east-2, on-demand at $0.80. Spot counts 0.85 of a replica, so 3 spot replicas serve 2; all
    in us-east-1 is cheapest ($0.90) and breaks a 0.5 per-region cap; 2 + 2 ($1.30) keeps it."""
    d = sc.dep("chat", regions={"na-east": 2}, spot=True, spot_share=1.0, spot_region_share=region_share)
    return sc.problem([d], [sc.pool("a", "aws", "us-east-1", "L4", 0.30, tier="spot"),
                            sc.pool("b", "aws", "us-east-2", "L4", 0.35, tier="spot"),
                            sc.pool("a", "aws", "us-east-1", "L4", 0.80)], SPOT_POL)


def _spot_by_region(prob: solver.PlacementProblem, result: solver.PlacementResult) -> dict[str, int]:
    offers = {p.key: p for p in prob.pools}
    out: dict[str, int] = {}
    for (_, key), n in result.placement.replicas.items():
        if n > 0 and offers[key].tier is fleet.Tier.SPOT:
            out[offers[key].region] = out.get(offers[key].region, 0) + n
    return out


def test_the_default_keeps_a_third_of_the_capacity_off_any_one_regions_spot():
    """A spec that says nothing gets max_share_per_region 0.67; it binds only where max_share is above it."""
    spot = deployment_spec.SpotRules()
    assert spot.max_share_per_region == 0.67
    loose = candidates.make_view(sc.dep("x", regions={"na-east": 1}, spot=True, spot_share=1.0), SPOT_POL)
    capped = candidates.make_view(sc.dep("x", regions={"na-east": 1}, spot=True, spot_share=0.6), SPOT_POL)
    no_spot = candidates.make_view(sc.dep("x", regions={"na-east": 1}, spot=False), SPOT_POL)
    assert loose.spot_region_binds and not capped.spot_region_binds and not no_spot.spot_region_binds


@pytest.mark.parametrize("backend", ["search", "mip", "portfolio"])
def test_every_backend_spreads_spot_over_regions(backend: str):
    """Every backend returns the cheapest plan that keeps the cap (2 spot replicas in each region,
    $1.30), which the independent check and the last check both accept."""
    prob = _two_region_problem()
    result = solver.solve(prob, time_limit_s=5, settings=solver.SolverSettings(backend=backend))
    assert result.placement.to_dict() == {"chat": {"a/l4-spot": 2, "b/l4-spot": 2}}
    assert result.cost_per_hour_usd == pytest.approx(1.30)
    assert sc.violations(prob, result) == []
    assert validate.violations(prob, result.placement) == []


def test_without_the_cap_spot_goes_to_the_cheapest_region_alone():
    """max_share_per_region 1 turns the rule off: all three spot replicas in us-east-1 ($0.90)."""
    prob = _two_region_problem(region_share=1.0)
    result = solver.solve(prob, time_limit_s=5)
    assert result.placement.to_dict() == {"chat": {"a/l4-spot": 3}}


def test_one_spot_region_and_on_demand_falls_back_to_on_demand_beside_spot():
    """With spot in one region only, the (default) cap is kept by on-demand capacity beside it, never
    by all spot in that region: at least a third of the plan's capacity is off that region's spot."""
    d = sc.dep("chat", regions={"na-east": 3}, spot=True, spot_share=1.0)
    prob = sc.problem([d], [sc.pool("a", "aws", "us-east-1", "L4", 0.30, tier="spot"),
                            sc.pool("a", "aws", "us-east-1", "L4", 0.80)], SPOT_POL)
    result = solver.solve(prob, time_limit_s=5)
    plan = result.placement.to_dict()["chat"]
    spot, on_demand = plan.get("a/l4-spot", 0), plan.get("a/l4-on-demand", 0)
    assert spot >= 1 and spot <= 0.67 * (spot + on_demand)
    assert sc.violations(prob, result) == [] and not result.unplaced


def test_a_preemption_wave_in_any_one_region_leaves_half_the_capacity():
    """On a fleet with spot in three regions, for every region, the plan's capacity outside that
    region's spot pools is at least a third of it (the default cap, 0.67), with all demand served."""
    d = sc.dep("chat", regions={"na-east": 4, "eu-west": 2}, spot=True, spot_share=1.0)
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.30, tier="spot", nodes_max=8),
             sc.pool("b", "aws", "us-east-2", "L4", 0.33, tier="spot", nodes_max=8),
             sc.pool("c", "aws", "eu-west-1", "L4", 0.36, tier="spot", nodes_max=8),
             sc.pool("a", "aws", "us-east-1", "L4", 0.80, nodes_max=8)]
    prob = sc.problem([d], pools, SPOT_POL)
    result = solver.solve(prob, time_limit_s=5)
    assert sc.violations(prob, result) == [] and not result.unplaced
    total = result.placement.total("chat")
    by_region = _spot_by_region(prob, result)
    assert len(by_region) >= 2
    for region, lost in by_region.items():
        assert total - lost >= 0.33 * total, (region, result.placement.to_dict())


def test_validate_refuses_a_plan_with_all_spot_in_one_region_and_repairs_it_there():
    """A hand-made plan with all three replicas on us-east-1's spot breaks the cap (constraint spot,
    named per region); the repair sheds spot replicas of that region only, until the cap holds."""
    prob = _two_region_problem()
    plan = solver.Placement({("chat", "a/l4-spot"): 3, ("chat", "b/l4-spot"): 1})
    found = [v for v in validate.violations(prob, plan) if v.constraint == "spot"]
    assert len(found) == 1 and "per region" in found[0].detail and "us-east-1" in found[0].detail
    repaired = validate.repair(prob, plan)
    assert repaired.placement.to_dict() == {"chat": {"a/l4-spot": 1, "b/l4-spot": 1}}
    assert validate.violations(prob, repaired.placement) == []


def test_the_model_the_ledger_the_dive_and_the_last_check_agree_at_the_cap():
    """2 spot replicas in each region are exactly at a 0.5 cap: the model's rows, the dive's check
    and the last check accept them; 3 in us-east-1 and 2 in us-east-2 are refused by all of them,
    and the ledger refuses a second replica in either region beside one in each."""
    prob = _two_region_problem()
    settings = solver.SolverSettings(aggregate_pools=False)
    c = candidates.build(prob, settings)
    built = formulation.build(c, prob, settings, None, {}, [0])
    pair = {c.groups[c.pairs[p].g].offer.key: p for p in built.x}
    a, b = pair["a/l4-spot"], pair["b/l4-spot"]
    views = {v.name: v for v in c.views}
    for counts, ok in (({a: 2, b: 2}, True), ({a: 3, b: 2}, False)):
        sol = starts.with_flows(c, greedy.Solution(dict(counts)), built.active)
        values = starts.complete(c, built, sol)
        xs = set(built.x.values())
        spread_rows = [(idx, coef) for idx, coef, _, hi in built.model.rows
                       if hi == 0 and set(idx) == xs and min(coef) < 0 < max(coef)]
        assert len(spread_rows) == 2  # one per region with spot
        assert all(sum(k * values[v] for v, k in zip(idx, coef, strict=True)) <= 0 for idx, coef in spread_rows) is ok
        assert dive._valid_alone(c, 0, counts) is ok
        placement = evaluate.split(c, sol, None)
        spot = [v for v in validate.violations(prob, solver.Placement(placement.replicas), settings, views)
                if v.constraint == "spot"]
        assert (not spot) is ok
    book = ledger.Ledger(prob, c)
    book.add(a)
    book.add(b)
    assert book.blocker(b) is not None and book.blocker(a) is not None
    book.add(pair["a/l4-on-demand"])
    assert book.blocker(a) is None
