"""The large-neighbourhood search that improves a large fleet's plan a few deployments at a time."""

from __future__ import annotations

import random
import time

import hypothesis
import pytest
import solver_cases as sc
from test_solver_properties import PROFILE, check, instances

from bench.solver import fleet
from scheduler import solver
from scheduler.solver import candidates, dive, evaluate, formulation, greedy, linear, neighbourhood, starts, validate


def setup(prob: solver.PlacementProblem, settings: solver.SolverSettings):
    c = candidates.build(prob, settings)
    active = [d for d in range(len(c.views)) if c.views[d].demand.demand_replicas and c.arcs_by_d[d]
              and not candidates.isolation_reason(c, d)]
    return c, active


def dive_start(prob: solver.PlacementProblem, settings: solver.SolverSettings):
    """Candidates, active deployments, the LP relaxation and the LP dive's start plan."""
    c, active = setup(prob, settings)
    built = formulation.build(c, prob, settings, None, {}, active)
    lp = linear.solve_lp(built.model)
    assert lp.ok
    return c, active, lp, dive.dive(prob, c, settings, built, lp.values, time.perf_counter() + 5.0)


def objective(prob, c, settings, active, sol) -> float:
    placement = evaluate.split(c, sol, None)
    assert placement is not None
    return evaluate.breakdown(prob, c, settings, sol, placement, None, evaluate.covered(c, sol.flows),
                              set(active)).objective


def valid(prob, c, settings, sol) -> list:
    placement = evaluate.split(c, sol, None)
    assert placement is not None
    planned = {d.name: dict(d.replicas_by_region) for d in prob.deployments}
    whole = solver.Placement(dict(placement.replicas), dict(placement.serving), planned)
    return validate.violations(prob, whole, settings, {v.name: v for v in c.views})


def pair_of(c, d: int, pool_id: str) -> int:
    return next(p for p in c.pairs_by_d[d] if any(m.pool.pool_id == pool_id for m in c.groups[c.pairs[p].g].members))


def test_search_moves_replicas_from_a_dear_pool_to_a_cheap_one_with_room():
    """Started on a pool at three times the price, the search moves the replicas to the cheap pool
    of the same region, and stops on its own once no step gains (well before its deadline)."""
    prob = sc.problem([sc.dep("chat", regions={"na-east": 2})],
                      [sc.pool("c1", "aws", "us-east-1", "L4", 1.0, pool_id="cheap"),
                       sc.pool("c1", "aws", "us-east-1", "L4", 3.0, pool_id="dear")])
    settings = solver.SolverSettings(neighbourhood_size=1)
    c, active = setup(prob, settings)
    dear, cheap = pair_of(c, 0, "dear"), pair_of(c, 0, "cheap")
    start = greedy.Solution({dear: 2}, {})
    deadline = time.perf_counter() + 60.0
    out = neighbourhood.search(prob, c, settings, start, active, deadline)
    assert out.solution.counts == {cheap: 2}
    assert out.improved >= 1 and out.gain_usd == pytest.approx(4.0, abs=0.01)
    assert time.perf_counter() < deadline - 30.0  # a local optimum ends the search, not the clock


@pytest.mark.parametrize("emptying", [True, False])
def test_an_expensive_node_filled_by_more_deployments_than_a_step_frees_is_closed(monkeypatch, emptying):
    """Seven deployments each keep one 1-GPU replica on one 8-GPU node at $100/h, beside 1-GPU nodes
    at $1/h: moving any of them alone (or two at a time, the step size) costs $1 more and closes
    nothing; only a step that frees all seven closes the node. The emptying steps do; without them
    the plan stays where it started."""
    if not emptying:
        monkeypatch.setattr(neighbourhood, "EMPTY_SHARE", 0.0)
    names = [f"d{i}" for i in range(7)]
    prob = sc.problem([sc.dep(n, regions={"na-east": 1}) for n in names],
                      [sc.pool("c1", "aws", "us-east-1", "L4", 100.0, gpus_per_node=8, nodes_max=1, pool_id="dear"),
                       sc.pool("c1", "aws", "us-east-1", "L4", 1.0, nodes_max=10, pool_id="cheap")])
    # Steps of up to 0.5 s, so a loaded test machine still solves the seven-deployment step.
    settings = solver.SolverSettings(neighbourhood_size=2, neighbourhood_time_s=0.5)
    c, active = setup(prob, settings)
    assert len(active) == len(names)
    start = greedy.Solution({pair_of(c, d, "dear"): 1 for d in active}, {})
    out = neighbourhood.search(prob, c, settings, start, active, time.perf_counter() + 20.0)
    if emptying:
        assert out.solution.counts == {pair_of(c, d, "cheap"): 1 for d in active}
        assert out.gain_usd == pytest.approx(100.0 - 7.0, abs=0.1)
    else:
        assert out.solution.counts == start.counts
        assert out.improved == 0


def eight_two_gpu_deployments() -> solver.PlacementProblem:
    """Eight deployments with one 2-GPU replica each, beside two pools of 8-GPU nodes of one region:
    "dear" at $100/h a node and "cheap" at $60/h, two nodes each."""
    return sc.problem([sc.dep(f"big{i}", regions={"na-east": 1}, gpus=2) for i in range(8)],
                      [sc.pool("c1", "aws", "us-east-1", "L4", 100.0, gpus_per_node=8, nodes_max=2, pool_id="dear"),
                       sc.pool("c1", "aws", "us-east-1", "L4", 60.0, gpus_per_node=8, nodes_max=2, pool_id="cheap")])


@pytest.mark.parametrize("wide", [True, False])
def test_the_wide_step_moves_multi_gpu_deployments_together(monkeypatch, wide):
    """Eight deployments with 2-GPU replicas fill two 8-GPU nodes at $100/h beside a pool of 8-GPU
    nodes at $60/h: one of them moving alone opens a cheap node and closes nothing, so no step of
    one deployment gains (emptying steps off); the wide step re-solves all eight at once with HiGHS
    and moves them, $200/h -> $120/h. Without it the plan stays where it started."""
    monkeypatch.setattr(neighbourhood, "EMPTY_SHARE", 0.0)
    prob = eight_two_gpu_deployments()
    settings = solver.SolverSettings(neighbourhood_size=1, wide_step_share=0.5 if wide else 0.0)
    c, active = setup(prob, settings)
    assert neighbourhood.multi_gpu(c, active, None) == active
    start = greedy.Solution({pair_of(c, d, "dear"): 1 for d in active}, {})
    assert objective(prob, c, settings, active, starts.with_flows(c, start, active)) > 200.0
    out = neighbourhood.search(prob, c, settings, start, active, time.perf_counter() + 20.0)
    if wide:
        assert out.solution.counts == {pair_of(c, d, "cheap"): 1 for d in active}
        assert out.wide["wide_step_deployments"] == 8
        assert out.wide["wide_step_gain_usd"] == pytest.approx(80.0, abs=0.5)
        assert not valid(prob, c, settings, out.solution)
    else:
        assert out.solution.counts == start.counts
        assert out.improved == 0 and out.wide == {}


@pytest.mark.parametrize("max_pairs", [2000, 0])
def test_the_wide_step_reaches_pairs_outside_a_restricted_search(monkeypatch, max_pairs):
    """On a restricted model (the cheap nodes' pairs left out of the search's set, as the restriction
    of a large fleet leaves out pairs the best plans use), the wide step's model still has every pair
    of its deployments while they are at most ``wide_step_max_pairs``: the eight 2-GPU deployments
    move to the cheap nodes, $200/h -> $120/h. With the limit at 0 the step keeps to the set and the
    plan stays where it started."""
    monkeypatch.setattr(neighbourhood, "EMPTY_SHARE", 0.0)
    prob = eight_two_gpu_deployments()
    settings = solver.SolverSettings(neighbourhood_size=1, wide_step_share=0.5, wide_step_max_pairs=max_pairs)
    c, active = setup(prob, settings)
    start = greedy.Solution({pair_of(c, d, "dear"): 1 for d in active}, {})
    dear = {pair_of(c, d, "dear") for d in active}
    out = neighbourhood.search(prob, c, settings, start, active, time.perf_counter() + 20.0, pairs=dear)
    if max_pairs:
        assert out.solution.counts == {pair_of(c, d, "cheap"): 1 for d in active}
        assert out.wide["wide_step_every_pair"] == 1.0 and out.wide["wide_step_pairs"] == 16
        assert out.wide["wide_step_gain_usd"] == pytest.approx(80.0, abs=0.5)
        assert not valid(prob, c, settings, out.solution)
    else:
        assert out.solution.counts == start.counts
        assert out.wide["wide_step_every_pair"] == 0.0 and out.wide["wide_step_gain_usd"] == 0.0


def test_a_wide_step_share_too_short_for_highs_still_lets_it_find_its_first_plan(monkeypatch):
    """The share is where the wide step ends once HiGHS has a better plan, not a cut-off before
    it: with a share of 0.001 of a 20-s search (0.02 s, less than any HiGHS run), the eight 2-GPU
    deployments still move to the cheap nodes together, and the step ends soon after its plan, long
    before half the search time."""
    monkeypatch.setattr(neighbourhood, "EMPTY_SHARE", 0.0)
    prob = eight_two_gpu_deployments()
    settings = solver.SolverSettings(neighbourhood_size=1, wide_step_share=0.001)
    c, active = setup(prob, settings)
    start = greedy.Solution({pair_of(c, d, "dear"): 1 for d in active}, {})
    out = neighbourhood.search(prob, c, settings, start, active, time.perf_counter() + 20.0)
    assert out.wide["wide_step_gain_usd"] == pytest.approx(80.0, abs=0.5)
    assert out.solution.counts == {pair_of(c, d, "cheap"): 1 for d in active}
    assert out.wide["wide_step_s"] < 5.0


def test_only_deployments_whose_every_replica_takes_several_gpus_are_in_the_wide_step():
    """A deployment with 1-GPU replicas, or one that may run on one GPU of some type, is left to the
    ordinary steps; one that takes two GPUs wherever it runs is in."""
    prob = sc.problem([sc.dep("two", regions={"na-east": 1}, gpus=2, gpu_types=("L4", "H100")),
                       sc.dep("one", regions={"na-east": 1}),
                       sc.dep("either", regions={"na-east": 1}, gpus=2, gpu_types=("L4", "H100"),
                              gpus_by_type={"H100": 1})],
                      [sc.pool("c1", "aws", "us-east-1", "L4", 8.0, gpus_per_node=8, pool_id="l4"),
                       sc.pool("c1", "aws", "us-east-1", "H100", 80.0, gpus_per_node=8, pool_id="h100")])
    c, active = setup(prob, solver.SolverSettings())
    assert [c.views[d].name for d in neighbourhood.multi_gpu(c, active, None)] == ["two"]
    # On the pairs a step may use only: "either" without its 1-GPU H100 pair is multi-GPU there.
    usable = {p for p in range(len(c.pairs)) if c.groups[c.pairs[p].g].offer.gpu_type == "L4"}
    assert [c.views[d].name for d in neighbourhood.multi_gpu(c, active, usable)] == ["two", "either"]


def test_the_wide_step_also_frees_the_deployments_that_hold_places_on_the_multi_gpu_nodes():
    """A 1-GPU deployment with its replica on the H100 group a 2-GPU deployment may use is in the
    wide step (it holds a place the other may need); one on the L4 group alone, or with no replica,
    is not; without a multi-GPU deployment there is no wide step."""
    prob = sc.problem([sc.dep("big", regions={"na-east": 1}, gpus=2, gpu_types=("H100",)),
                       sc.dep("on_h100", regions={"na-east": 1}, gpu_types=("L4", "H100")),
                       sc.dep("on_l4", regions={"na-east": 1}, gpu_types=("L4", "H100")),
                       sc.dep("idle", regions={"na-east": 1}, gpu_types=("L4", "H100"))],
                      [sc.pool("c1", "aws", "us-east-1", "L4", 8.0, gpus_per_node=8, pool_id="l4"),
                       sc.pool("c1", "aws", "us-east-1", "H100", 80.0, gpus_per_node=8, pool_id="h100")])
    c, active = setup(prob, solver.SolverSettings())
    by_d = {1: {pair_of(c, 1, "h100"): 1}, 2: {pair_of(c, 2, "l4"): 1}}
    assert [c.views[d].name for d in neighbourhood.wide_deployments(c, active, None, by_d)] == ["big", "on_h100"]
    assert neighbourhood.wide_deployments(c, [1, 2, 3], None, by_d) == []


def test_an_emptying_step_is_drawn_only_where_freeing_its_deployments_can_close_a_node():
    """Three deployments with one 1-GPU replica each on an 8-GPU node: an emptying step frees all
    three. Not where the node is within the pool's nodes_min (paid anyway), nor where replicas
    held by an incremental re-solve need that node."""

    def draw(nodes_min: int, held: int) -> list[int]:
        prob = sc.problem([sc.dep(f"d{i}", regions={"na-east": 1}) for i in range(3)],
                          [sc.pool("c1", "aws", "us-east-1", "L4", 100.0, gpus_per_node=8, nodes_max=2,
                                   nodes_min=nodes_min, pool_id="dear"),
                           sc.pool("c1", "aws", "us-east-1", "L4", 1.0, nodes_max=10, pool_id="cheap")])
        c, active = setup(prob, solver.SolverSettings())
        by_d = {d: {pair_of(c, d, "dear"): 1} for d in active}
        group = c.pairs[pair_of(c, 0, "dear")].g
        return neighbourhood._emptying(c, random.Random(1), active, by_d, {group: held} if held else {})

    assert draw(nodes_min=0, held=0) == [0, 1, 2]
    assert draw(nodes_min=1, held=0) == []
    assert draw(nodes_min=0, held=5) == []  # 8 GPUs: the held 5 keep the one node
    assert draw(nodes_min=0, held=6) == [0, 1, 2]  # 9 GPUs, 2 nodes: the three keep the second


def test_search_uses_only_the_pairs_it_is_given_besides_those_in_use():
    """With the cheap pool left out of the usable pairs (a restricted large model), the replicas
    stay where they are: a step never places on a pair outside the set."""
    prob = sc.problem([sc.dep("chat", regions={"na-east": 2})],
                      [sc.pool("c1", "aws", "us-east-1", "L4", 1.0, pool_id="cheap"),
                       sc.pool("c1", "aws", "us-east-1", "L4", 3.0, pool_id="dear")])
    settings = solver.SolverSettings(neighbourhood_size=1)
    c, active = setup(prob, settings)
    dear = pair_of(c, 0, "dear")
    out = neighbourhood.search(prob, c, settings, greedy.Solution({dear: 2}, {}), active,
                               time.perf_counter() + 60.0, pairs=set())
    assert out.solution.counts == {dear: 2}


def test_search_never_moves_fixed_replicas_and_fits_next_to_them():
    """Replicas an incremental re-solve holds stay out of every step, and what the search places
    fits the pool next to them: the held deployment keeps the cheap pool, the other takes the dear one."""
    prob = sc.problem([sc.dep("held", regions={"na-east": 2}), sc.dep("free", regions={"na-east": 2})],
                      [sc.pool("c1", "aws", "us-east-1", "L4", 1.0, pool_id="cheap", nodes_max=2),
                       sc.pool("c1", "aws", "us-east-1", "L4", 3.0, pool_id="dear")])
    settings = solver.SolverSettings(neighbourhood_size=2)
    c, _ = setup(prob, settings)
    cheap_group = c.pairs[pair_of(c, 0, "cheap")].g
    start = greedy.Solution({pair_of(c, 1, "dear"): 2}, {})
    out = neighbourhood.search(prob, c, settings, start, [1], time.perf_counter() + 60.0,
                               fixed={0: [(cheap_group, 2)]})
    assert out.solution.counts == {pair_of(c, 1, "dear"): 2}
    assert out.improved == 0


def test_a_step_found_before_another_changed_the_plan_is_kept_only_if_it_still_fits():
    """Two steps run at once: one found next to a plan that has since filled the pool is rejected
    (its replicas no longer fit), one that still fits is accepted."""
    prob = sc.problem([sc.dep("a", regions={"na-east": 2}), sc.dep("b", regions={"na-east": 2})],
                      [sc.pool("c1", "aws", "us-east-1", "L4", 1.0, pool_id="cheap", nodes_max=3),
                       sc.pool("c1", "aws", "us-east-1", "L4", 3.0, pool_id="dear")])
    settings = solver.SolverSettings()
    c, _ = setup(prob, settings)
    cheap_a, cheap_b = pair_of(c, 0, "cheap"), pair_of(c, 1, "cheap")
    # "a" now holds 2 of the cheap pool's 3 nodes; "b" was re-solved before that happened.
    now = formulation.build(c, prob, settings, None, {0: [(c.pairs[cheap_a].g, 2)]}, [1], lp_cuts=False)
    for counts, fits in (({cheap_b: 2}, False), ({cheap_b: 1, pair_of(c, 1, "dear"): 1}, True)):
        found = greedy.Solution(counts, {})
        values = starts.complete(c, now, starts.with_flows(c, found, [1]))
        assert neighbourhood._fits(now, found, values) is fits


def test_search_on_a_contended_fleet_returns_a_valid_plan_cheaper_than_its_start():
    """On the benchmark's seeded fleet (many deployments sharing a few cheap pools), a few seconds
    of search from the LP dive's start give a plan that breaks nothing and costs less than the start."""
    prob = fleet.make(100, 60, seed=7)
    settings = solver.SolverSettings()
    c, active, lp, start = dive_start(prob, settings)
    out = neighbourhood.search(prob, c, settings, start, active, time.perf_counter() + 3.0)
    assert valid(prob, c, settings, out.solution) == []
    before, after = objective(prob, c, settings, active, start), objective(prob, c, settings, active, out.solution)
    assert out.improved > 0
    assert after < before - 1.0
    assert after >= lp.objective - 1e-6


def test_a_large_fleet_is_solved_by_the_neighbourhood_search():
    """Above ``restrict_above_pairs`` the solve improves its start by the search (its steps in the
    stats), and the plan it returns passes the independent checker."""
    prob = fleet.make(60, 40, seed=3)
    result = solver.solve(prob, time_limit_s=3.0, settings=solver.SolverSettings(restrict_above_pairs=0))
    assert result.stats["neighbourhood_steps"] > 0
    check(prob, result)


@hypothesis.settings(PROFILE, max_examples=30)
@hypothesis.given(instances())
def test_neighbourhood_plans_break_nothing_first_and_warm_started(prob: solver.PlacementProblem):
    """With the search forced on small random fleets, a first placement and a warm-started re-solve
    break no hard constraint and explain what they leave unserved."""
    settings = solver.SolverSettings(restrict_above_pairs=0, neighbourhood_size=2)
    first = solver.solve(prob, time_limit_s=1.0, settings=settings)
    check(prob, first)
    again = solver.solve(prob, time_limit_s=1.0, current=first.placement,
                         settings=settings.model_copy(update={"incremental": "never"}))
    check(prob, again)


def test_a_step_counts_as_a_gain_only_when_the_plan_as_served_improves():
    """Deployments with more than HALL_MAX_REGIONS client regions have flow variables: a step is
    weighed with the serving the returned plan will have on both sides (not CP-SAT's own flows for
    the new replicas against the served flows of the old), so the plan never ends worse than its
    start and the gain the search reports is the gain of the plan it returns."""
    pools = [sc.pool("c0", "aws", "eu-north-1", "L4", 1.12, nodes_max=3, pool_id="p0"),
             sc.pool("c1", "aws", "ap-southeast-1", "L4", 0.3, nodes_max=6, pool_id="p1"),
             sc.pool("c2", "azure", "westus2", "L4", 1.94, nodes_max=6, pool_id="p2"),
             sc.pool("c3", "azure", "eastus2", "L4", 0.84, nodes_max=1, pool_id="p3"),
             sc.pool("c4", "gcp", "us-central1", "L4", 1.13, nodes_max=2, pool_id="p4"),
             sc.pool("c5", "azure", "southcentralus", "L4", 1.85, nodes_max=5, pool_id="p5"),
             sc.pool("c6", "aws", "eu-west-1", "L4", 0.63, nodes_max=5, pool_id="p6")]
    deps = [sc.dep("d0", regions={"sa-east": 2, "ap-south": 1, "na-east": 1, "ap-southeast": 2, "ap-northeast": 1,
                                  "na-west": 1, "eu-central": 1, "oceania": 2},
                   ttft_ms=5000, max_replicas=20, profile={"L4": 2.0}),
            sc.dep("d1", regions={"oceania": 2, "sa-east": 2, "ap-northeast": 2, "na-central": 1, "ap-southeast": 1,
                                  "ap-south": 1},
                   ttft_ms=5000, max_replicas=20, profile={"L4": 1.0})]
    prob = sc.problem(deps, pools)
    assert all(len(d.replicas_by_region) > formulation.HALL_MAX_REGIONS for d in deps)
    settings = solver.SolverSettings(neighbourhood_size=2)
    c, active, _, start = dive_start(prob, settings)
    out = neighbourhood.search(prob, c, settings, start, active, time.perf_counter() + 2.0)
    before = objective(prob, c, settings, active, starts.with_flows(c, start, active))
    after = objective(prob, c, settings, active, out.solution)
    assert after <= before + 1e-6
    assert out.gain_usd == pytest.approx(before - after, abs=1e-3)


@pytest.mark.parametrize("sat", [{}, neighbourhood.STEP_SAT], ids=["cp-sat-default", "step-settings"])
def test_a_held_group_is_a_constant_that_still_counts_against_quota_and_budget(sat):
    """A step's model has no node variable for a pool only held deployments use: its nodes are a
    constant in the objective and are taken off the cloud quota and fleet budget, so the freed
    deployment still sees them (4-GPU aws quota, 3 held on one pool: 1 of 2 replicas fits). The
    same optimum with the steps' CP-SAT settings (no presolve) as with CP-SAT's defaults."""
    held = sc.dep("held", regions={"na-east": 3}, gpu_types=["A10G"])
    free = sc.dep("free", regions={"na-east": 2})
    pools = [sc.pool("c", "aws", "us-east-1", "A10G", 1.0), sc.pool("c", "aws", "us-east-1", "L4", 0.8)]
    for pol, fits in ((sc.policy(clouds=[{"name": "aws", "max_gpus": 4}]), 1),
                      (sc.policy(budget_per_hour_usd=3.9), 1), (sc.policy(), 2)):
        prob = sc.problem([held, free], pools, pol)
        settings = solver.SolverSettings()
        c = candidates.build(prob, settings)
        a10g = next(g.index for g in c.groups if g.offer.gpu_type == "A10G")
        built = formulation.build(c, prob, settings, None, {0: [(a10g, 3)]}, [1])
        assert set(built.nodes) == {g.index for g in c.groups if g.offer.gpu_type == "L4"}
        assert built.const_nodes == {a10g: 3}
        out = linear.solve_sat(built.model, time_limit_s=1.0, workers=1, relative_gap=0.0, **sat)
        assert out.status == "optimal"
        assert sum(out.values[v] for v in built.x.values()) == fits, pol
        assert out.objective == pytest.approx(3 * 1.0 + fits * 0.8 + (2 - fits) * 5000 * 2.0 + fits * 0.01, abs=0.2)


@pytest.mark.parametrize("sat", [{}, neighbourhood.STEP_SAT], ids=["cp-sat-default", "step-settings"])
def test_held_nodes_that_alone_break_a_quota_keep_the_model_infeasible(sat):
    """With no variable left in aws, 3 held A10G nodes against a 2-GPU aws quota still make the
    model infeasible (as the row over their node variables did), not silently feasible, with the
    steps' CP-SAT settings too."""
    held = sc.dep("held", regions={"na-east": 3}, gpu_types=["A10G"])
    free = sc.dep("free", regions={"na-east": 1}, placement_clouds=["gcp"])
    pools = [sc.pool("a", "aws", "us-east-1", "A10G", 1.0), sc.pool("g", "gcp", "us-east4", "L4", 0.8)]
    prob = sc.problem([held, free], pools, sc.policy(clouds=[{"name": "aws", "max_gpus": 2}, {"name": "gcp"}]))
    settings = solver.SolverSettings()
    c = candidates.build(prob, settings)
    a10g = next(g.index for g in c.groups if g.offer.gpu_type == "A10G")
    built = formulation.build(c, prob, settings, None, {0: [(a10g, 3)]}, [1])
    assert a10g in built.const_nodes and all(c.groups[g].offer.cloud == "gcp" for g in built.nodes)
    assert linear.solve_sat(built.model, time_limit_s=1.0, workers=1, relative_gap=0.0, **sat).status == "infeasible"


def test_the_constant_counts_once_in_cp_sat_objective_and_bound():
    """The model's constant (nodes no variable may change), now CP-SAT's objective offset, is in
    the objective and bound it returns exactly once."""
    m = linear.LinearModel()
    x = m.var(0, 3, 2.0)
    m.row([x], [1], lo=1)
    m.constant = 100.0
    out = linear.solve_sat(m, time_limit_s=1.0, workers=1, relative_gap=0.0)
    assert out.status == "optimal"
    assert out.objective == pytest.approx(102.0) and out.bound == pytest.approx(102.0)


def test_a_held_total_kept_up_to_date_builds_the_very_model_a_fresh_sum_builds():
    """The neighbourhood search keeps what the plan holds as one total, taking a step's deployments
    off it and adding them back as steps are kept; a step's model built from that total is the
    model built from the held replicas themselves, budgets and quotas included, and the total
    after moves equals a fresh sum to the last cent."""
    prob = fleet.make(40, 50, seed=3)
    settings = solver.SolverSettings()
    c, active, _, start = dive_start(prob, settings)
    by_d: dict[int, list[tuple[int, int]]] = {}
    for p, n in start.counts.items():
        if n:
            by_d.setdefault(c.pairs[p].d, []).append((c.pairs[p].g, n))
    assert any(t.budget_per_hour_usd is not None for t in prob.policy.teams) and len(by_d) > 10
    total = formulation.Held.of(c, by_d)
    rng = random.Random(5)
    for _ in range(20):  # moves as kept steps make them: off the total, changed, back on
        d = rng.choice(sorted(by_d))
        total.add(c, d, by_d[d], -1)
        g = c.pairs[rng.choice(c.pairs_by_d[d])].g
        by_d[d] = [(g, rng.randint(1, 3))]
        total.add(c, d, by_d[d])
    fresh = formulation.Held.of(c, by_d)
    assert {k: v for k, v in total.packed.items() if v} == {k: v for k, v in fresh.packed.items() if v}
    assert {k: v for k, v in total.team_cents.items() if v} == {k: v for k, v in fresh.team_cents.items() if v}
    hood = sorted(by_d)[:5]
    held = {d: e for d, e in by_d.items() if d not in hood}
    a = formulation.build(c, prob, settings, None, held, hood, lp_cuts=False)
    b = formulation.build(c, prob, settings, None, total.without(c, {d: by_d[d] for d in hood}), hood, lp_cuts=False)
    assert (a.model.lb, a.model.ub, a.model.cost, a.model.rows) == (b.model.lb, b.model.ub, b.model.cost, b.model.rows)
    assert a.model.constant == pytest.approx(b.model.constant, abs=1e-9)
    assert a.fixed_packed == b.fixed_packed and a.const_nodes == b.const_nodes
