"""``placement.spot.hedge``: a covered client region keeps an on-demand replica or two spot replicas
within its SLA's reach, so one preemption does not leave it uncovered while the replacement starts.
Crafted fleets whose answer is known by hand."""

from __future__ import annotations

import solver_cases as sc

from meridian.latency import map as latency_map
from scheduler import solver
from scheduler.admin import dryrun
from scheduler.solver import candidates, formulation, linear


def solve(prob: solver.PlacementProblem, **kw: object) -> solver.PlacementResult:
    result = solver.solve(prob, time_limit_s=kw.pop("time_limit_s", 10.0), **kw)
    assert sc.violations(prob, result, kw.get("settings")) == []
    return result


def chat(hedge: bool = True, **kw: object) -> solver.DeploymentDemand:
    """A chat model whose only traffic is na-east's, too little for a replica of demand: coverage
    alone asks for one replica within reach; wholly on spot allowed, in one region too."""
    return sc.dep("chat", regions={"na-east": 0}, covered=("na-east",), spot=True, spot_share=1.0,
                  spot_region_share=1.0, hedge=hedge, **kw)


def problem(*deps: solver.DeploymentDemand, offers: list[solver.PoolOffer] | None = None) -> solver.PlacementProblem:
    """The fleet's policy lets a deployment run wholly on spot (as the SkyServe-like scenario's)."""
    return sc.problem(deps, pools() if offers is None else offers, sc.policy(spot={"max_share": 1.0}))


def pools(on_demand_price: float = 0.8) -> list[solver.PoolOffer]:
    return [sc.pool("use1", "aws", "us-east-1", "L4", 0.3, tier="spot"),
            sc.pool("use1", "aws", "us-east-1", "L4", on_demand_price)]


def test_without_hedge_one_spot_replica_covers_the_region():
    prob = problem(chat(hedge=False))
    result = solve(prob)
    assert result.placement.to_dict() == {"chat": {"use1/l4-spot": 1}}
    assert result.unhedged == ()


def test_a_hedged_region_gets_a_second_spot_replica_where_that_is_cheapest():
    """Two spot replicas (0.6 $/h) cost less than one on-demand (0.8 $/h)."""
    result = solve(problem(chat()))
    assert result.placement.to_dict() == {"chat": {"use1/l4-spot": 2}}
    assert result.unhedged == () and result.uncovered == ()
    assert result.cost_per_hour_usd == 0.6


def test_one_on_demand_replica_hedges_a_region_by_itself():
    """On-demand at 0.5 $/h: one on-demand replica is the cheapest hedge (two spot are 0.6 $/h)."""
    result = solve(problem(chat(), offers=pools(on_demand_price=0.5)))
    assert result.placement.to_dict() == {"chat": {"use1/l4-on-demand": 1}}
    assert result.unhedged == ()


def test_a_region_that_cannot_be_hedged_is_still_covered_and_named():
    """max_replicas 1: the one spot replica covers na-east; the plan names the missing hedge, and its
    objective carries the hedge's penalty, as the model's does (model and evaluator agree)."""
    prob = problem(chat(max_replicas=1), offers=[pools()[0]])
    result = solve(prob)
    assert result.placement.to_dict() == {"chat": {"use1/l4-spot": 1}}
    assert result.uncovered == ()
    [h] = result.unhedged
    assert (h.deployment, h.client_region) == ("chat", "na-east")
    assert "only by spot replicas one preemption can take at once (1 on use1/l4-spot)" in h.reason, h.reason
    assert "max_replicas 1" in h.reason, h.reason
    # `meridian plan` lists it among the risks.
    lines = dryrun.risks(prob, result, latency_map.default())
    assert any(line.startswith("chat: na-east not hedged (spot.hedge): na-east of chat is reached only")
               for line in lines), lines
    penalty = formulation.hedge_weight(prob.deployments[0], solver.SolverSettings())
    assert result.objective >= penalty
    assert abs(result.objective - result.lower_bound) < 1e-6 * result.objective


def test_two_spot_replicas_that_may_share_a_node_are_no_hedge():
    """Spot nodes of 8 GPUs at 2.4 $/h (0.3 per GPU) and on-demand L4 nodes at 0.8: two 1-GPU replicas on
    the 8-GPU pool may share a node (one preemption takes both), so they count once; the hedge
    takes the one on-demand replica (0.8 $/h) instead of a second spot node (2.4 $/h)."""
    offers = [sc.pool("use1", "aws", "us-east-1", "L4", 2.4, gpus_per_node=8, tier="spot"),
              sc.pool("use1", "aws", "us-east-1", "L4", 0.8)]
    result = solve(problem(chat(), offers=offers))
    assert result.placement.to_dict() == {"chat": {"use1/l4-on-demand": 1}}
    assert result.unhedged == ()
    # Without the on-demand pool: one spot replica covers the region, and the plan says it is not hedged
    # (two replicas on the 8-GPU pool would not be either).
    result = solve(problem(chat(), offers=offers[:1]))
    assert result.placement.to_dict() == {"chat": {"use1/l4-spot": 1}}
    [h] = result.unhedged
    assert "1 on use1/l4-spot" in h.reason, h.reason


def test_the_cost_floor_and_bounds_ignore_hedges():
    """``spot_hedges=False`` (the cost floor's and the demand-following bound's settings): one spot
    replica, as without hedge."""
    settings = solver.SolverSettings(spot_hedges=False)
    result = solve(problem(chat()), settings=settings)
    assert result.placement.to_dict() == {"chat": {"use1/l4-spot": 1}} and result.unhedged == ()
    from scheduler.control import floor
    assert floor.SETTINGS.spot_hedges is False


def test_every_solver_path_keeps_the_hedge():
    """The one CP-SAT search, the neighbourhood search (a model forced large) and the search without
    an LP hint all hedge the region."""
    prob = problem(chat(), sc.dep("other", regions={"na-east": 2}))
    for settings in (solver.SolverSettings(), solver.SolverSettings(restrict_above_pairs=0),
                     solver.SolverSettings(lp_hint=False)):
        result = solve(prob, settings=settings)
        assert result.placement.of("chat") == {"use1/l4-spot": 2}, settings
        assert result.unhedged == ()


def test_the_linear_model_states_the_hedge_as_one_row_per_region():
    """One hedge row per covered region: spot replicas weigh 1, on-demand 2, the miss 2, need 2;
    solved alone it hedges the region."""
    prob = problem(chat())
    settings = solver.SolverSettings()
    c = candidates.build(prob, settings)
    built = formulation.build(c, prob, settings, None, {}, [0])
    assert set(built.unhedged) == {(0, "na-east")}
    [row] = [r for r in built.model.rows if built.unhedged[(0, "na-east")] in r[0]]
    idx, coef, lo, _ = row
    weights = {c.groups[c.pairs[p].g].offer.tier.value: coef[idx.index(v)] for p, v in built.x.items()}
    assert weights == {"spot": 1, "on_demand": 2} and lo == 2
    out = linear.solve_sat(built.model, time_limit_s=5, workers=1, relative_gap=0.0)
    counts = {p: out.values[v] for p, v in built.x.items() if out.values[v] > 0}
    assert c.unhedged(0, counts) == [] and out.values[built.unhedged[(0, "na-east")]] == 0


def test_an_incremental_re_solve_restores_a_hedge_a_preemption_broke():
    """The plan hedges na-east with two spot replicas; one is preempted (the current placement has
    one left): the deployment counts as changed, and the re-solve starts a second one again. A
    hedged plan as it is re-solves nothing."""
    prob = problem(chat(), sc.dep("other", regions={"na-east": 1}))
    first = solve(prob)
    assert first.placement.of("chat") == {"use1/l4-spot": 2}
    assert solver.changed_deployments(prob, first.placement, solver.SolverSettings()) == set()
    left = dict(first.placement.replicas)
    left[("chat", "use1/l4-spot")] = 1
    broken = solver.Placement(left, dict(first.placement.serving), first.placement.demand, first.placement.coverage)
    assert solver.changed_deployments(prob, broken, solver.SolverSettings()) == {0}
    again = solve(prob, current=broken)
    assert again.placement.of("chat") == {"use1/l4-spot": 2}
    assert again.unhedged == ()
