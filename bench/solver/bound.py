"""A lower bound stronger than the LP relaxation: Lagrangian relaxation of the shared limits, its
multipliers found by column generation (Dantzig-Wolfe), each deployment's own problem solved as an
integer program.

The LP relaxation is weak where a deployment's demand is a few replicas that come in lumps (one
70B replica on H200 is 0.49 of a reference replica): it buys fractions. Relaxing only what
deployments share (pool GPUs and the node rows, team and cloud quotas, budgets) and keeping each
deployment's own rows (Hall's demand rows, isolation, the spot share cap, max_replicas) integer
gives, for any multipliers pi with the right signs,

    L(pi) = sum_d min_{x_d in X_d} (c_d - A_d' pi) x_d + min_{nodes in bounds} (c_n - B' pi) nodes
            + sum_rows pi_row * (lo_row if pi_row > 0 else hi_row)

a valid lower bound of every plan's objective (weak duality). Each deployment's minimum is taken
from CP-SAT's proven bound, less the rounding of its objective to integers. The multipliers are
the duals of a master LP over the deployment plans found so far (column generation), started from
the LP relaxation's duals; the bound is the best L(pi) seen. Used by ``bench.solver`` only: it
proves how far a plan is from the optimum, it does not change the plan."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import os
import time

from scheduler.solver import candidates, formulation, greedy, linear, problem, starts

PRICE_SCALE = 1_000_000  # pricing objective in micro-dollars: rounding error < 1e-6 $ per unit
# A deployment whose own problem is not proven in this time contributes CP-SAT's bound so far (valid,
# weaker); a few of 500 take seconds at the first prices.
PRICE_TIME_S = 5.0
PRICE_THREADS = max(1, min(4, os.cpu_count() or 1))


@dataclasses.dataclass
class Bound:
    lp: float  # the plain LP relaxation
    lagrangian: float  # best L(pi) found (-inf when no round finished)
    rounds: int
    seconds: float

    @property
    def best(self) -> float:
        return max(self.lp, self.lagrangian)


@dataclasses.dataclass
class _Block:
    """One deployment's own variables and rows (indices into the full model)."""

    vars: list[int]
    rows: list[int]


def lagrangian(prob: problem.PlacementProblem, plan: problem.Placement | None, time_budget_s: float,
               progress=None) -> Bound:
    """The bound for ``prob`` (first placement, default settings), improved for ``time_budget_s``.
    ``plan``: a feasible placement whose deployment plans seed the master LP (optional);
    ``progress(round, bound)``: called after each round."""
    started = time.perf_counter()
    settings = problem.SolverSettings()
    c = candidates.build(prob, settings)
    active = [d for d in range(len(c.views)) if c.arcs_by_d[d] and c.views[d].demand.demand_replicas
              and not candidates.isolation_reason(c, d)]
    built = formulation.build(c, prob, settings, None, {}, active)
    m = built.model
    owner = _owners(c, built)
    blocks: dict[int, _Block] = {d: _Block([], []) for d in active}
    for v, d in owner.items():
        blocks[d].vars.append(v)
    shared: list[int] = []
    for i, (idx, _, _, _) in enumerate(m.rows):
        ds = {owner.get(v, -1) for v in idx}
        if len(ds) == 1 and -1 not in ds:
            blocks[ds.pop()].rows.append(i)
        else:
            shared.append(i)
    node_vars = sorted(v for v in range(m.size) if v not in owner)

    # Start: the LP relaxation's duals on the shared rows.
    lp, duals = _lp_duals(m, shared)
    best = -math.inf
    columns: dict[int, list[dict[int, int]]] = {d: [_empty(built, d, blocks[d])] for d in active}
    if plan is not None:
        for d, col in _plan_columns(c, built, plan, blocks).items():
            columns[d].append(col)
    rounds = 0
    pi = duals
    while True:
        value, found = _evaluate(m, blocks, shared, node_vars, pi, deadline=started + time_budget_s)
        if found is None:
            break
        rounds += 1
        best = max(best, value)
        if progress is not None:
            progress(rounds, max(best, lp))
        new = 0
        for d, col in found.items():
            if col not in columns[d]:
                columns[d].append(col)
                new += 1
        if not new or time.perf_counter() > started + time_budget_s:
            break  # no new plan at these prices: the master LP is the Dantzig-Wolfe bound
        pi = _master_duals(m, shared, node_vars, columns)
        if pi is None:
            break  # GLOP gave no optimal master (numerics): the best bound so far stands
    return Bound(lp, best, rounds, time.perf_counter() - started)


def _owners(c: candidates.Candidates, built: formulation.Built) -> dict[int, int]:
    owner: dict[int, int] = {}
    for p, v in built.x.items():
        owner[v] = c.pairs[p].d
    for (d, _), v in built.u.items():
        owner[v] = d
    for a, v in built.f.items():
        owner[v] = c.arcs[a].d
    for d, (z, by_cloud, by_region) in built.iso.items():
        for v in (z, *by_cloud.values(), *by_region.values()):
            owner[v] = d
    for d, (v, _) in built.protect.items():
        owner[v] = d
    for p, (v, _) in built.churn.items():
        owner[v] = c.pairs[p].d
    return owner


def _empty(built: formulation.Built, d: int, block: _Block) -> dict[int, int]:
    """Deployment ``d`` not placed: every region unserved (locally feasible by construction)."""
    col = {v: 0 for v in block.vars}
    for (dd, region), u in built.u.items():
        if dd == d:
            col[u] = built.wanted[(dd, region)]
    return col


def _plan_columns(c: candidates.Candidates, built: formulation.Built, plan: problem.Placement,
                  blocks: dict[int, _Block]) -> dict[int, dict[int, int]]:
    member_group = {m.key: g.index for g in c.groups for m in g.members}
    index = {v.name: d for d, v in enumerate(c.views)}
    pair_of = {(c.pairs[p].d, c.pairs[p].g): p for p in built.x}
    sol = greedy.Solution()
    for (name, key), n in plan.replicas.items():
        p = pair_of.get((index.get(name), member_group.get(key)))
        if p is not None and n > 0:
            sol.counts[p] = sol.counts.get(p, 0) + n
    hint = starts.complete(c, built, starts.with_flows(c, sol, built.active))
    return {d: {v: int(hint.get(v, 0)) for v in block.vars} for d, block in blocks.items()}


def _lp_duals(m: linear.LinearModel, shared: list[int]) -> tuple[float, dict[int, float]]:
    lp = linear.solve_lp(m, time_limit_s=600.0, duals=True)
    if not lp.ok:
        raise RuntimeError("the LP relaxation did not solve")
    return lp.objective, {i: lp.duals[i] for i in shared}


def _signed(m: linear.LinearModel, pi: dict[int, float]) -> dict[int, float]:
    """Multipliers with the signs weak duality needs: >= 0 only on rows with a lower side, <= 0
    only on rows with an upper side."""
    out = {}
    for i, y in pi.items():
        _, _, lo, hi = m.rows[i]
        if y > 0 and lo == -math.inf or y < 0 and hi == math.inf:
            y = 0.0
        out[i] = y
    return out


def _evaluate(m: linear.LinearModel, blocks: dict[int, _Block], shared: list[int], node_vars: list[int],
              pi: dict[int, float], deadline: float) -> tuple[float, dict[int, dict[int, int]] | None]:
    """L(pi) and each deployment's best plan at pi; (nan, None) when the deadline passes mid-way."""
    pi = _signed(m, pi)
    reduced = list(m.cost)
    for i in shared:
        y = pi[i]
        if y:
            idx, coef, _, _ = m.rows[i]
            for v, a in zip(idx, coef, strict=True):
                reduced[v] -= y * a
    value = m.constant
    for i in shared:
        y = pi[i]
        _, _, lo, hi = m.rows[i]
        value += y * (lo if y > 0 else hi) if y else 0.0
    for v in node_vars:
        value += min(reduced[v] * m.lb[v], reduced[v] * m.ub[v])
    found: dict[int, dict[int, int]] = {}
    # CP-SAT releases the GIL while it searches: two deployments are priced at once on two cores.
    with concurrent.futures.ThreadPoolExecutor(max_workers=PRICE_THREADS) as pool:
        futures = {d: pool.submit(_price, m, block, reduced, deadline) for d, block in blocks.items()}
        for d, future in futures.items():
            priced = future.result()
            if priced is None:
                for other in futures.values():
                    other.cancel()
                return math.nan, None
            value += priced[0]
            found[d] = priced[1]
    return value, found


def _price(m: linear.LinearModel, block: _Block, reduced: list[float],
           deadline: float) -> tuple[float, dict[int, int]] | None:
    """A proven lower bound of min reduced cost over the deployment's own integer plans, and the
    best plan found; None past ``deadline``."""
    if time.perf_counter() > deadline:
        return None
    local = {v: i for i, v in enumerate(block.vars)}
    own = linear.LinearModel([m.lb[v] for v in block.vars], [m.ub[v] for v in block.vars],
                             [reduced[v] for v in block.vars])
    for r in block.rows:
        idx, coef, lo, hi = m.rows[r]
        own.row([local[v] for v in idx], coef, lo, hi)
    # Rounding each coefficient moves the objective by at most 0.5 / PRICE_SCALE per unit.
    slack = sum(0.5 / PRICE_SCALE * max(abs(m.lb[v]), abs(m.ub[v])) for v in block.vars)
    out = linear.solve_sat(own, time_limit_s=PRICE_TIME_S, workers=1, relative_gap=0.0,
                           objective_scale=PRICE_SCALE)
    if out.status not in ("optimal", "feasible"):
        raise RuntimeError("a deployment's own problem has no plan (the empty plan should be one)")
    return out.bound - slack, {v: out.values[i] for v, i in local.items()}


def _master_duals(m: linear.LinearModel, shared: list[int], node_vars: list[int],
                  columns: dict[int, list[dict[int, int]]]) -> dict[int, float] | None:
    """Duals of the shared rows in the LP over convex combinations of each deployment's plans
    (None if GLOP does not solve it to optimality)."""
    master = linear.LinearModel()
    entries: dict[int, dict[int, int]] = {i: {} for i in shared}  # shared row -> master var -> coefficient
    nodes = {v: master.var(m.lb[v], m.ub[v], m.cost[v]) for v in node_vars}
    by_var: dict[int, list[tuple[int, int]]] = {}
    for i in shared:
        for v, a in zip(m.rows[i][0], m.rows[i][1], strict=True):
            if v in nodes:
                entries[i][nodes[v]] = a
            else:
                by_var.setdefault(v, []).append((i, a))
    convex: list[list[int]] = []
    for cols in columns.values():
        lams = []
        for col in cols:
            lam = master.var(0, 1, sum(m.cost[v] * n for v, n in col.items() if n))
            lams.append(lam)
            for v, n in col.items():
                for i, a in by_var.get(v, ()) if n else ():
                    entries[i][lam] = entries[i].get(lam, 0) + a * n
        convex.append(lams)
    added = []
    for i in shared:
        if entries[i]:
            _, _, lo, hi = m.rows[i]
            master.row(list(entries[i]), list(entries[i].values()), lo, hi)
            added.append(i)
    for lams in convex:
        master.row(lams, [1] * len(lams), 1, 1)
    lp = linear.solve_lp(master, time_limit_s=600.0, duals=True)
    if not lp.ok:
        return None
    out = {i: 0.0 for i in shared}
    out.update(zip(added, lp.duals, strict=False))
    return out
