"""A small linear model that compiles to two OR-Tools backends: CP-SAT (the integer decision) and
GLOP (its LP relaxation: a lower bound, and a rounded hint when there is no current placement).

Row coefficients are integers by construction (the formulation scales demand to hundredths of a
replica and money to cents), as CP-SAT needs; the objective is in USD and is scaled to integer
milli-dollars for CP-SAT."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping, Sequence

from ortools.linear_solver import linear_solver_pb2, pywraplp
from ortools.sat.python import cp_model

log = logging.getLogger("meridian.scheduler.solver")

OBJECTIVE_SCALE = 1000.0  # CP-SAT objective unit: milli-dollar per hour
INF = math.inf
_BIG = math.inf  # MPModelProto's unbounded side


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
        """``lo <= sum coef x <= hi``. A row with no variable holds or not whatever the plan: one that
        holds is left out; one that cannot (a limit constants alone exceed) is kept, over a variable
        fixed at 0, so the model is infeasible as it should be."""
        if not idx:
            if lo <= 0 <= hi:
                return
            idx, coef = [self.var(0, 0)], [0]
        self.rows.append((list(idx), [int(c) for c in coef], lo, hi))

    def cut(self, idx: Sequence[int], coef: Sequence[float], lo: float) -> None:
        """An LP-only row ``sum coef x >= lo`` (see ``cuts``)."""
        if idx:
            self.cuts.append((list(idx), list(coef), lo))

    @property
    def size(self) -> int:
        return len(self.lb)

    def value(self, values: Mapping[int, int]) -> float:
        """The objective at ``values`` (variable -> value; absent: 0), USD/h, constant included."""
        return sum(self.cost[v] * n for v, n in values.items() if n) + self.constant

    def feasible(self, values: Mapping[int, int]) -> bool:
        """Whether ``values`` (absent: 0) keeps every bound and every row exactly."""
        if any(not self.lb[v] <= values.get(v, 0) <= self.ub[v] for v in range(self.size)):
            return False
        for idx, coef, lo, hi in self.rows:
            total = sum(a * values.get(v, 0) for v, a in zip(idx, coef, strict=True))
            if total < lo - 1e-9 or total > hi + 1e-9:
                return False
        return True


@dataclasses.dataclass(frozen=True)
class SatOutcome:
    status: str  # optimal | feasible | infeasible | unknown | invalid
    values: list[int]
    objective: float
    bound: float
    wall_s: float


class _StopNearBound(cp_model.CpSolverSolutionCallback):
    """Stops the search once a solution is within ``relative_gap`` of a bound CP-SAT does not know
    (the LP relaxation's, often far better than its own early bound)."""

    def __init__(self, bound_scaled: float, relative_gap: float):
        super().__init__()
        self.bound_scaled, self.relative_gap = bound_scaled, relative_gap

    def on_solution_callback(self) -> None:
        value = self.objective_value
        if value <= 0 or (value - self.bound_scaled) / value <= self.relative_gap:
            self.stop_search()


def solve_sat(model: LinearModel, *, time_limit_s: float, workers: int, relative_gap: float,
              hint: Mapping[int, int] | None = None, seed: int = 0, known_bound: float | None = None,
              objective_scale: float = OBJECTIVE_SCALE, presolve: bool = True,
              linearization_level: int | None = None) -> SatOutcome:
    """The integer model with CP-SAT (rows, bounds and objective written straight into its proto).
    ``known_bound``: a valid lower bound of the objective (model units) to stop at within the gap;
    ``objective_scale``: objective units per USD CP-SAT works in (costs are rounded to them);
    ``presolve``, ``linearization_level``: CP-SAT's parameters of those names (None: its default),
    for the neighbourhood search's small models (``neighbourhood.STEP_SAT``)."""
    cp = cp_model.CpModel()
    proto = cp.proto
    for lo, hi in zip(model.lb, model.ub, strict=True):
        proto.variables.add().domain.extend([lo, hi])
    for idx, coef, lo, hi in model.rows:
        linear = proto.constraints.add().linear
        linear.vars.extend(idx)
        linear.coeffs.extend(coef)
        linear.domain.extend([cp_model.INT_MIN if lo == -INF else math.ceil(lo - 1e-9),
                              cp_model.INT_MAX if hi == INF else math.floor(hi + 1e-9)])
    nz = [(i, round(c * objective_scale)) for i, c in enumerate(model.cost) if c]
    proto.objective.vars.extend([i for i, _ in nz])
    proto.objective.coeffs.extend([c for _, c in nz])
    # The constant (nodes no variable may change) is part of the objective CP-SAT's relative gap
    # and the stop near a known bound are measured on, as it was when those nodes were variables.
    proto.objective.offset = model.constant * objective_scale
    if hint:
        items = sorted(hint.items())
        proto.solution_hint.vars.extend([i for i, _ in items])
        proto.solution_hint.values.extend([int(min(max(v, model.lb[i]), model.ub[i])) for i, v in items])
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.05, time_limit_s)
    p.num_workers = workers
    p.relative_gap_limit = relative_gap
    p.random_seed = seed
    p.cp_model_presolve = presolve
    if linearization_level is not None:
        p.linearization_level = linearization_level
    callback = None
    if known_bound is not None and math.isfinite(known_bound):
        callback = _StopNearBound(known_bound * objective_scale, relative_gap)
    code = solver.solve(cp, callback)
    names = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible",
             cp_model.MODEL_INVALID: "invalid"}
    status = names.get(code, "unknown")
    if status in ("optimal", "feasible"):
        values = [int(v) for v in solver.response_proto.solution]
        # The honest objective with the float costs (CP-SAT saw them rounded to milli-dollars).
        objective = sum(model.cost[i] * values[i] for i, _ in nz) + model.constant
        bound = solver.best_objective_bound / objective_scale
    else:
        values, objective, bound = [], math.inf, -math.inf
    return SatOutcome(status, values, objective, bound, solver.wall_time)


@dataclasses.dataclass(frozen=True)
class LpOutcome:
    ok: bool
    values: list[float]
    objective: float
    duals: list[float] = dataclasses.field(default_factory=list)  # per row of ``model.rows``, when asked


def solve_lp(model: LinearModel, *, time_limit_s: float = 10.0, duals: bool = False) -> LpOutcome:
    """The LP relaxation with GLOP: every integer variable made continuous within its bounds.
    ``duals``: also return each row's dual value (cuts excluded).

    The model goes to GLOP as an MPModelProto filled with whole lists at once (10x faster than a
    SetCoefficient call per nonzero)."""
    proto = linear_solver_pb2.MPModelProto()
    proto.maximize = False
    for lo, hi, cost in zip(model.lb, model.ub, model.cost, strict=True):
        var = proto.variable.add()
        var.lower_bound = lo
        var.upper_bound = hi
        var.objective_coefficient = cost
    for idx, coef, lo, hi in model.rows:
        ct = proto.constraint.add()
        ct.var_index.extend(idx)
        ct.coefficient.extend(coef)
        ct.lower_bound = -_BIG if lo == -INF else lo
        ct.upper_bound = _BIG if hi == INF else hi
    for idx, coef, lo in model.cuts:
        ct = proto.constraint.add()
        ct.var_index.extend(idx)
        ct.coefficient.extend(coef)
        ct.lower_bound = lo
        ct.upper_bound = _BIG
    lp = pywraplp.Solver.CreateSolver("GLOP")
    error = lp.LoadModelFromProto(proto)
    if error:
        raise ValueError(f"the LP relaxation could not be loaded: {error}")
    lp.SetTimeLimit(int(max(0.1, time_limit_s) * 1000))
    # Dual simplex: 2-3x faster than primal on these covering models (measured on the benchmark).
    lp.SetSolverSpecificParametersAsString("use_dual_simplex: true")
    started = time.perf_counter()
    code = lp.Solve()
    if code != pywraplp.Solver.OPTIMAL:
        log.warning("solver lp=failed status=%d wall_s=%.2f limit_s=%.2f rows=%d variables=%d", code,
                    time.perf_counter() - started, time_limit_s, len(proto.constraint), len(proto.variable))
        return LpOutcome(False, [], -math.inf)
    prices = [ct.dual_value() for ct in lp.constraints()[:len(model.rows)]] if duals else []
    return LpOutcome(True, [x.solution_value() for x in lp.variables()], lp.Objective().Value() + model.constant,
                     prices)
