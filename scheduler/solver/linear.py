"""A small linear model that compiles to two OR-Tools backends: CP-SAT (the integer decision) and
GLOP (its LP relaxation: a lower bound, and a rounded hint when there is no current placement).

Row coefficients are integers by construction (the formulation scales demand to hundredths of a
replica and money to cents), as CP-SAT needs; the objective is in USD and is scaled to integer
milli-dollars for CP-SAT."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from ortools.linear_solver import pywraplp
from ortools.sat.python import cp_model

OBJECTIVE_SCALE = 1000.0  # CP-SAT objective unit: milli-dollar per hour
INF = math.inf


@dataclasses.dataclass
class LinearModel:
    lb: list[int] = dataclasses.field(default_factory=list)
    ub: list[int] = dataclasses.field(default_factory=list)
    cost: list[float] = dataclasses.field(default_factory=list)
    rows: list[tuple[list[int], list[int], float, float]] = dataclasses.field(default_factory=list)
    # Valid inequalities with fractional coefficients: they tighten the LP relaxation and are
    # implied for integer points, so CP-SAT does not need them.
    cuts: list[tuple[list[int], list[float], float]] = dataclasses.field(default_factory=list)
    constant: float = 0.0

    def var(self, lb: int, ub: int, cost: float = 0.0) -> int:
        if ub < lb:
            raise ValueError(f"variable bounds [{lb}, {ub}] are empty")
        self.lb.append(int(lb))
        self.ub.append(int(ub))
        self.cost.append(cost)
        return len(self.lb) - 1

    def row(self, idx: Sequence[int], coef: Sequence[int], lo: float = -INF, hi: float = INF) -> None:
        if idx:
            self.rows.append((list(idx), [int(c) for c in coef], lo, hi))

    def cut(self, idx: Sequence[int], coef: Sequence[float], lo: float) -> None:
        """An LP-only row ``sum coef x >= lo`` (see ``cuts``)."""
        if idx:
            self.cuts.append((list(idx), list(coef), lo))

    @property
    def size(self) -> int:
        return len(self.lb)


@dataclasses.dataclass(frozen=True)
class SatOutcome:
    status: str  # optimal | feasible | infeasible | unknown | invalid
    values: list[int]
    objective: float
    bound: float
    wall_s: float


def solve_sat(model: LinearModel, *, time_limit_s: float, workers: int, relative_gap: float,
              hint: Mapping[int, int] | None = None, seed: int = 0) -> SatOutcome:
    cp = cp_model.CpModel()
    xs = [cp.new_int_var(lo, hi, "") for lo, hi in zip(model.lb, model.ub, strict=True)]
    for idx, coef, lo, hi in model.rows:
        expr = cp_model.LinearExpr.weighted_sum([xs[i] for i in idx], coef)
        lo_i = -cp_model.INT_MAX if lo == -INF else math.ceil(lo - 1e-9)
        hi_i = cp_model.INT_MAX if hi == INF else math.floor(hi + 1e-9)
        cp.add_linear_constraint(expr, lo_i, hi_i)
    nz = [(i, round(c * OBJECTIVE_SCALE)) for i, c in enumerate(model.cost) if c]
    cp.minimize(cp_model.LinearExpr.weighted_sum([xs[i] for i, _ in nz], [c for _, c in nz]))
    for i, v in (hint or {}).items():
        cp.add_hint(xs[i], int(min(max(v, model.lb[i]), model.ub[i])))
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.05, time_limit_s)
    p.num_workers = workers
    p.relative_gap_limit = relative_gap
    p.random_seed = seed
    code = solver.solve(cp)
    names = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible",
             cp_model.MODEL_INVALID: "invalid"}
    status = names.get(code, "unknown")
    if status in ("optimal", "feasible"):
        values = [int(solver.value(x)) for x in xs]
        # The honest objective with the float costs (CP-SAT saw them rounded to milli-dollars).
        objective = sum(model.cost[i] * values[i] for i, _ in nz) + model.constant
        bound = solver.best_objective_bound / OBJECTIVE_SCALE + model.constant
    else:
        values, objective, bound = [], math.inf, -math.inf
    return SatOutcome(status, values, objective, bound, solver.wall_time)


@dataclasses.dataclass(frozen=True)
class LpOutcome:
    ok: bool
    values: list[float]
    objective: float


def solve_lp(model: LinearModel, *, time_limit_s: float = 10.0) -> LpOutcome:
    """The LP relaxation with GLOP: every integer variable made continuous within its bounds."""
    lp = pywraplp.Solver.CreateSolver("GLOP")
    lp.SetTimeLimit(int(max(0.1, time_limit_s) * 1000))
    # Dual simplex: 2-3x faster than primal on these covering models (measured on the benchmark).
    lp.SetSolverSpecificParametersAsString("use_dual_simplex: true")
    xs = [lp.NumVar(lo, hi, "") for lo, hi in zip(model.lb, model.ub, strict=True)]
    for idx, coef, lo, hi in model.rows:
        ct = lp.RowConstraint(-lp.infinity() if lo == -INF else lo, lp.infinity() if hi == INF else hi, "")
        for i, c in zip(idx, coef, strict=True):
            ct.SetCoefficient(xs[i], c)
    for idx, coef, lo in model.cuts:
        ct = lp.RowConstraint(lo, lp.infinity(), "")
        for i, c in zip(idx, coef, strict=True):
            ct.SetCoefficient(xs[i], c)
    objective = lp.Objective()
    for i, c in enumerate(model.cost):
        if c:
            objective.SetCoefficient(xs[i], c)
    objective.SetMinimization()
    code = lp.Solve()
    if code != pywraplp.Solver.OPTIMAL:
        return LpOutcome(False, [], -math.inf)
    return LpOutcome(True, [x.solution_value() for x in xs], objective.Value() + model.constant)
