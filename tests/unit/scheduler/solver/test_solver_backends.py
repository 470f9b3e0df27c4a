"""Search backends (search, mip, portfolio), the one objective function the model, the evaluator
and the benchmark share, and the spot share cap the model and the rules check alike."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import time
from unittest import mock

import pytest

from bench.solver import fleet
from scheduler import config as config_mod
from scheduler import solver
from scheduler.solver import (backends, candidates, dive, evaluate, formulation, greedy, ledger, linear, mip, starts,
                              validate)

import solver_cases as sc

SPOT_POL = sc.policy(spot={"allowed": True, "max_share": 1.0})


def _active(c: candidates.Candidates) -> list[int]:
    return [d for d in range(len(c.views)) if c.views[d].demand.demand_replicas and c.arcs_by_d[d]
            and not candidates.isolation_reason(c, d)]


def _at_cap_problem() -> solver.PlacementProblem:
    """4 reference replicas of a model whose L40S replica is worth 2.7183 of them (a capacity whose
    half is no whole number of 1/10000ths), spot capped at 0.5: 1 spot + 1 on-demand ($2.30) is
    exactly at the cap and the cheapest plan; 2 on-demand cost $3.60, 2 spot break the cap."""
    d = sc.dep("chat", regions={"na-east": 4}, gpu_types=["L4", "L40S"], profile={"L4": 1, "L40S": 2.7183},
               spot=True, spot_share=0.5)
    return sc.problem([d], [sc.pool("c", "aws", "us-east-1", "L40S", 1.8, nodes_max=4),
                            sc.pool("c", "aws", "us-east-1", "L40S", 0.5, tier="spot", nodes_max=4)], SPOT_POL)


def test_a_plan_exactly_at_the_spot_cap_is_inside_the_model_and_every_rule():
    """1 spot + 1 on-demand replica at a 0.5 cap: the model's row, the greedy ledger, the dive's check
    and the last check all accept it, and all refuse 2 spot + 1 on-demand."""
    prob = _at_cap_problem()
    settings = solver.SolverSettings(aggregate_pools=False)
    c = candidates.build(prob, settings)
    built = formulation.build(c, prob, settings, None, {}, _active(c))
    pair = {c.groups[c.pairs[p].g].offer.tier.value: p for p in built.x}
    views = {v.name: v for v in c.views}
    for counts, ok in (({pair["on_demand"]: 1, pair["spot"]: 1}, True), ({pair["on_demand"]: 1, pair["spot"]: 2}, False)):
        sol = starts.with_flows(c, greedy.Solution(dict(counts)), built.active)
        spot_row = [r for r in built.model.rows if len(r[0]) == 2 and r[3] == 0 and min(r[1]) < 0 < max(r[1])]
        values = starts.complete(c, built, sol)
        assert len(spot_row) == 1
        idx, coef, _, hi = spot_row[0]
        assert (sum(a * values[v] for v, a in zip(idx, coef, strict=True)) <= hi) is ok
        book = ledger.Ledger(prob, c)
        book.add(pair["on_demand"])
        for _ in range(counts[pair["spot"]] - 1):
            book.add(pair["spot"])
        assert (book.blocker(pair["spot"]) is None) is ok
        assert dive._valid_alone(c, 0, counts) is ok
        placement = evaluate.split(c, sol, None)
        planned = solver.Placement(placement.replicas, placement.serving, {"chat": {"na-east": 4}})
        assert (not [v for v in validate.violations(prob, planned, settings, views) if v.constraint == "spot"]) is ok


@pytest.mark.parametrize("backend", ["search", "mip", "portfolio"])
def test_every_backend_finds_the_plan_exactly_at_the_spot_cap(backend: str):
    """The cheapest plan sits exactly at the spot cap (1 spot + 1 on-demand, $2.30): every backend
    returns it, proven within the relative gap, where the rounded row used to force 2 on-demand ($3.60)."""
    result = solver.solve(_at_cap_problem(), time_limit_s=5, settings=solver.SolverSettings(backend=backend))
    assert result.placement.to_dict() == {"chat": {"c/l40s-on-demand": 1, "c/l40s-spot": 1}}
    assert result.cost_per_hour_usd == pytest.approx(2.3)
    assert result.gap <= solver.SolverSettings().relative_gap


def test_the_models_objective_of_a_plan_equals_the_evaluators():
    """On a seeded benchmark fleet, for a first plan and for a re-plan against it (churn, priority
    protection), the model's objective at the plan is the objective the solver reports for it."""
    prob = fleet.make(40, 40, seed=3)
    settings = solver.SolverSettings(aggregate_pools=False)
    c = candidates.build(prob, settings)
    active = _active(c)
    first = greedy.place(prob, c, active, order_by="priority")
    built = formulation.build(c, prob, settings, None, {}, active)
    placement = evaluate.split(c, first, None)
    parts = evaluate.breakdown(prob, c, settings, first, placement, None, evaluate.covered(c, first.flows), set(active))
    assert parts.unplaced_usd > 0 and parts.score_usd > 0  # every term of the objective is exercised
    assert built.model.value(starts.complete(c, built, first)) == pytest.approx(parts.objective, rel=1e-12)

    current_g = {(c.pairs[p].d, c.pairs[p].g): n for p, n in first.counts.items() if n > 0}
    current = solver.Placement(placement.replicas, placement.serving)
    # One replica fewer on the first pair: churn, unserved demand and the priority protection move.
    p0 = min(p for p, n in first.counts.items() if n > 0)
    again = starts.with_flows(c, greedy.Solution({**first.counts, p0: first.counts[p0] - 1}), active)
    rebuilt = formulation.build(c, prob, settings, current_g, {}, active)
    moved = evaluate.split(c, again, current)
    parts = evaluate.breakdown(prob, c, settings, again, moved, current, evaluate.covered(c, again.flows), set(active))
    assert parts.churn_usd > 0
    assert rebuilt.model.value(starts.complete(c, rebuilt, again)) == pytest.approx(parts.objective, rel=1e-12)


def test_the_solvers_reported_objective_is_never_below_its_bound():
    """Objective and bound are on the same function: a plan proven optimal by HiGHS reports a gap of
    (almost) nothing and never a negative one."""
    prob = fleet.make(12, 16, seed=5)
    result = solver.solve(prob, time_limit_s=10, settings=solver.SolverSettings(backend="mip", aggregate_pools=False))
    assert result.status is solver.SolveStatus.OPTIMAL
    assert result.stats["mip_bound"] <= result.objective + 1e-6
    assert 0 <= result.gap <= 0.002 + 1e-9


def test_mip_backend_solves_a_small_instance_to_its_known_optimum():
    """HiGHS alone, started from the greedy plan: 3 on-demand + 2 spot L4s ($3.60) under a 50% cap,
    proven optimal within a second."""
    prob = sc.problem([sc.dep("chat", regions={"na-east": 4}, spot=True, spot_share=0.5)],
                      [sc.pool("c", "aws", "us-east-1", "L4", 1.0, nodes_max=8),
                       sc.pool("c", "aws", "us-east-1", "L4", 0.30, tier="spot", nodes_max=8)], SPOT_POL)
    t = time.perf_counter()
    result = solver.solve(prob, time_limit_s=5, settings=solver.SolverSettings(backend="mip"))
    assert time.perf_counter() - t < 5
    assert result.placement.to_dict() == {"chat": {"c/l4-on-demand": 3, "c/l4-spot": 2}}
    assert result.status is solver.SolveStatus.OPTIMAL
    assert "mip_s" in result.stats and "sat_s" not in result.stats and "neighbourhood_steps" not in result.stats


def test_portfolio_keeps_the_mip_plan_when_the_search_finds_nothing():
    """CP-SAT out of time without a solution: the portfolio hands the greedy start to HiGHS and
    returns HiGHS's better plan, proven optimal."""
    pools = [sc.pool("a", "aws", "us-east-1", "L4", 0.8, nodes_max=8), sc.pool("b", "aws", "us-east-2", "L4", 0.9, nodes_max=8)]
    prob = sc.problem([sc.dep("x", regions={"na-east": 3}), sc.dep("y", regions={"na-east": 4})], pools)
    with sc.timeout_path("no_cp_sat_solution") as calls:
        result = solver.solve(prob, time_limit_s=5, settings=solver.SolverSettings(backend="portfolio"))
    assert calls
    assert result.status is solver.SolveStatus.OPTIMAL
    assert result.cost_per_hour_usd == pytest.approx(7 * 0.8)
    assert result.stats["portfolio_mip"] <= result.stats["portfolio_search"]


def test_portfolio_keeps_the_search_plan_when_the_mip_answer_breaks_the_model():
    """HiGHS claiming "optimal" for a point that breaks the model's rows (every variable at least 1)
    is dropped: the portfolio returns its search's plan, valid. (Its own search phase, not a separate
    search run: two timed searches need not find the same plan, and on a loaded machine one found a
    plan 0.2% better than the other.)"""
    prob = fleet.make(12, 16, seed=5)
    settings = solver.SolverSettings(backend="portfolio", aggregate_pools=False)

    def worse(model: linear.LinearModel, **kw: object) -> linear.SatOutcome:
        values = [int(min(max(1, lo), hi)) for lo, hi in zip(model.lb, model.ub, strict=True)]
        return linear.SatOutcome("optimal", values, model.value(dict(enumerate(values))), -math.inf, 0.0)

    real_sat = linear.solve_sat

    def sat(model: linear.LinearModel, **kw: object) -> linear.SatOutcome:
        return dataclasses.replace(real_sat(model, **kw), status="feasible")  # not proven: HiGHS gets its turn

    with mock.patch.object(linear, "solve_sat", sat), mock.patch.object(mip, "solve_mip", worse):
        result = solver.solve(prob, time_limit_s=5, settings=settings)
    assert result.stats["portfolio_mip"] == pytest.approx(result.stats["portfolio_search"])
    assert result.objective == pytest.approx(result.stats["portfolio_search"], rel=1e-6)
    assert validate.violations(prob, result.placement, settings, None) == []


def test_portfolio_splits_its_time_limit_between_search_and_mip():
    """The search gets 1 - mip_share of the time left when it starts, HiGHS (after it) the rest
    less the reserve: neither budget reaches past the time limit."""
    prob = fleet.make(12, 16, seed=5)
    seen: dict[str, tuple[float, float]] = {}
    real_sat, real_mip = linear.solve_sat, mip.solve_mip

    def sat(model: linear.LinearModel, **kw: object) -> linear.SatOutcome:
        seen["sat"] = (time.perf_counter(), float(kw["time_limit_s"]))
        # Not proven optimal, so HiGHS gets its turn.
        return dataclasses.replace(real_sat(model, **kw), status="feasible")

    def highs(model: linear.LinearModel, **kw: object) -> linear.SatOutcome:
        seen["mip"] = (time.perf_counter(), float(kw["time_limit_s"]))
        return real_mip(model, **kw)

    t0 = time.perf_counter()
    with mock.patch.object(linear, "solve_sat", sat), mock.patch.object(mip, "solve_mip", highs):
        solver.solve(prob, time_limit_s=4.0, settings=solver.SolverSettings(mip_share=0.25))
    (sat_at, sat_s), (mip_at, mip_s) = seen["sat"], seen["mip"]
    assert sat_s <= 0.75 * (t0 + 4.0 - sat_at) + 1e-6  # 1 - mip_share of what was left
    assert sat_at + sat_s <= t0 + 4.0 and mip_at + mip_s <= t0 + 4.0
    assert mip_at >= sat_at


def test_incremental_resolve_keeps_the_fast_search_and_its_budget():
    """A re-solve after one deployment's change takes the incremental path with the search alone
    (HiGHS is never called) and hands CP-SAT no more than its time limit."""
    prob = fleet.make(30, 30, seed=3)
    first = solver.solve(prob, time_limit_s=5)
    deps = list(prob.deployments)
    i = next(i for i, d in enumerate(deps) if d.demand_replicas and d.name in {n for n, _ in first.placement.replicas})
    region = sorted(deps[i].replicas_by_region)[0]
    deps[i] = dataclasses.replace(deps[i], replicas_by_region={**deps[i].replicas_by_region,
                                                               region: deps[i].replicas_by_region[region] + 2})
    limits: list[float] = []
    real_sat = linear.solve_sat

    def sat(model: linear.LinearModel, **kw: object) -> linear.SatOutcome:
        limits.append(float(kw["time_limit_s"]))
        return real_sat(model, **kw)

    with mock.patch.object(linear, "solve_sat", sat), mock.patch.object(mip, "solve_mip") as highs:
        again = solver.solve(dataclasses.replace(prob, deployments=tuple(deps)), time_limit_s=1.0,
                             current=first.placement)
    assert again.mode == "incremental"
    assert not highs.called
    assert limits and all(limit <= 1.0 for limit in limits)


def test_unknown_backend_is_refused_naming_the_setting_and_the_choices():
    """A backend name not in the registry fails the solve at once, and the scheduler's config at start."""
    with pytest.raises(ValueError, match=r"SolverSettings.backend: unknown backend 'cpsat'; valid: mip, portfolio, search"):
        solver.solve(sc.problem([], []), settings=solver.SolverSettings(backend="cpsat"))
    with pytest.raises(ValueError, match="solver_backend"):
        config_mod.SchedulerConfig(solver_backend="cpsat")
    assert sorted(backends.BACKENDS) == ["mip", "portfolio", "search"]


def test_highs_prints_nothing_on_standard_output():
    """HiGHS's first instance in a process prints a banner on file descriptor 1; a solve with the mip
    backend leaves a command's standard output (e.g. ``meridian plan -o json``) untouched."""
    code = ("from scheduler.solver import linear, mip\n"
            "m = linear.LinearModel(); x = m.var(0, 3, 1.0); m.row([x], [1], lo=2)\n"
            "out = mip.solve_mip(m, time_limit_s=5, relative_gap=0.0)\n"
            "assert out.status == 'optimal' and out.values == [2], out\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
