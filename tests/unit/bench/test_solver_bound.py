"""The benchmark's Lagrangian lower bound: never above a proven optimum, and stronger than the LP
relaxation where demand comes in lumps."""

from __future__ import annotations

from bench.solver import bound, fleet
from scheduler import solver


def test_lagrangian_bound_lies_between_the_lp_bound_and_a_proven_optimum():
    """On a small seeded fleet that CP-SAT solves to optimality, the bound is a valid lower bound
    (at most the optimal objective) and closes most of the LP relaxation's gap to it."""
    prob = fleet.make(20, 20, seed=7)
    result = solver.solve(prob, time_limit_s=20)
    # Optimal within CP-SAT's relative gap (0.2%): the reported gap is that, not 0, now that the plan
    # is scored by the model's own objective (it used to score below the model's bound, so 0).
    assert result.status is solver.SolveStatus.OPTIMAL and result.gap <= solver.SolverSettings().relative_gap
    found = bound.lagrangian(prob, result.placement, time_budget_s=30)
    assert found.rounds >= 1
    assert found.lagrangian <= result.objective + 1e-6
    assert found.lp < result.objective - 50  # the LP relaxation is weak here: 217 against 302
    assert found.best - found.lp > 0.4 * (result.objective - found.lp)


def test_lagrangian_bound_without_a_plan_or_time_is_the_lp_bound():
    """With no time for a pricing round the best bound falls back to the LP relaxation's."""
    prob = fleet.make(20, 20, seed=7)
    found = bound.lagrangian(prob, None, time_budget_s=0.0)
    assert found.rounds == 0
    assert found.best == found.lp
