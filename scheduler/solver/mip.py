"""The integer model with HiGHS (``highspy``): branch and bound on the whole ``LinearModel``, every
pair the filters allow, started from a feasible plan.

Why beside CP-SAT: on the large fleets the neighbourhood search sees a restricted set of pairs
and improves a few deployments at a time; a MIP solver with LP bounds, cuts and its own
heuristics (RINS, RENS) searches the whole model from the search's plan and proves a bound on it.
Measured on the benchmark's fleets (docs/scheduler-decisions.md). One thread: the scheduler's
machine has two cores and the control loop, gRPC and the router reports need the other.

The model's rows are integers (hundredths of replicas, cents) and its LP-only cuts are valid for
integer points, so both go to HiGHS as they are; the values it returns are rounded to integers and
the objective recomputed from the model's own costs (what every other path reports)."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Mapping

import highspy
import numpy as np

from scheduler.solver import linear

_INF = highspy.kHighsInf
# stall_s and until_better_s count from plans better than the hint by at least this share of its
# value.
_STALL_GAIN = 1e-3
_FIRST = threading.Lock()
_banner_done = False


def _highs() -> highspy.Highs:
    """A silent HiGHS instance. The first one in a process prints a copyright banner straight to
    file descriptor 1 (before any option can turn output off), which would corrupt what a command
    prints there (``meridian plan -o json``); it is sent to /dev/null instead."""
    global _banner_done
    with _FIRST:
        if not _banner_done:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = highspy.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
            _banner_done = True
        else:
            h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return h


def solve_mip(model: linear.LinearModel, *, time_limit_s: float, relative_gap: float,
              hint: Mapping[int, int] | None = None, seed: int = 0, threads: int = 1,
              cuts: bool = True, stall_s: float | None = None,
              until_better_s: float | None = None) -> linear.SatOutcome:
    """``model`` with HiGHS within ``time_limit_s`` (seconds), stopping once its own proven bound
    is within ``relative_gap``. ``hint``: variable -> value of a feasible point (every variable:
    ``starts.complete``), given to HiGHS as its first incumbent; ``cuts``: add the model's LP-only
    cuts as rows; ``stall_s``: also stop once a plan better than the hint was found and no better
    one followed for this long (HiGHS's first gains come after its root cut loop, the later ones
    slowly); ``until_better_s``: also stop after this long once a plan better than the hint was
    found (before that, only ``time_limit_s`` stops it). Same outcome type as ``linear.solve_sat``:
    status optimal | feasible | infeasible | unknown, integer values, the objective at them, the
    proven bound, wall seconds."""
    started = time.perf_counter()
    h = _highs()
    h.setOptionValue("time_limit", max(0.05, float(time_limit_s)))
    h.setOptionValue("mip_rel_gap", float(relative_gap))
    h.setOptionValue("random_seed", int(seed))
    h.setOptionValue("threads", int(threads))
    h.setOptionValue("parallel", "off" if threads <= 1 else "on")
    n = model.size
    if n == 0:
        return linear.SatOutcome("optimal", [], model.constant, model.constant, 0.0)
    h.addVars(n, np.asarray(model.lb, dtype=np.float64), np.asarray(model.ub, dtype=np.float64))
    cols = np.arange(n, dtype=np.int32)
    h.changeColsCost(n, cols, np.asarray(model.cost, dtype=np.float64))
    h.changeColsIntegrality(n, cols, np.full(n, highspy.HighsVarType.kInteger))
    rows = [(idx, coef, lo, hi) for idx, coef, lo, hi in model.rows]
    if cuts:
        rows += [(idx, coef, lo, math.inf) for idx, coef, lo in model.cuts]
    if rows:
        starts = np.zeros(len(rows), dtype=np.int32)
        total = 0
        for i, (idx, _, _, _) in enumerate(rows):
            starts[i] = total
            total += len(idx)
        index = np.fromiter((v for idx, _, _, _ in rows for v in idx), dtype=np.int32, count=total)
        value = np.fromiter((a for _, coef, _, _ in rows for a in coef), dtype=np.float64, count=total)
        lower = np.asarray([-_INF if lo == -math.inf else lo for _, _, lo, _ in rows], dtype=np.float64)
        upper = np.asarray([_INF if hi == math.inf else hi for _, _, _, hi in rows], dtype=np.float64)
        h.addRows(len(rows), lower, upper, total, starts, index, value)
    h.changeObjectiveOffset(float(model.constant))
    if hint:
        items = sorted(hint.items())
        h.setSolution(len(items), np.asarray([i for i, _ in items], dtype=np.int32),
                      np.asarray([min(max(v, model.lb[i]), model.ub[i]) for i, v in items], dtype=np.float64))
    h.setOptionValue("time_limit", max(0.05, float(time_limit_s) - (time.perf_counter() - started)))
    # HiGHS checks its time limit between phases; some (a root cut round on a large model) run
    # for seconds past it, so the deadline is also enforced from its interrupt callbacks.
    deadline = started + float(time_limit_s)
    start_value = model.value(hint) if hint else math.inf
    improved_at = [math.inf]  # when the last plan better than the hint came
    branching_at = [math.inf]  # when the first node past the root came (root LP and cuts done)

    def stop(event: highspy.highs.HighsCallbackEvent) -> None:
        now = time.perf_counter()
        if branching_at[0] == math.inf and event.data_out.mip_node_count > 0:
            branching_at[0] = now
        # The stall clock runs from the last better plan, but not before the root is done: plans
        # a heuristic finds at once are often followed by a second or more of root cuts, and the
        # best plans come after those.
        stalled = now - max(improved_at[0], branching_at[0])
        if now > deadline or (stall_s is not None and improved_at[0] < math.inf and stalled > stall_s):
            event.interrupt()
        elif until_better_s is not None and now > started + until_better_s and improved_at[0] < math.inf:
            event.interrupt()

    def improving(event: highspy.highs.HighsCallbackEvent) -> None:
        # HiGHS's first incumbent is the hint as it repairs it, a few cents off the hint's value:
        # that starts no stall clock.
        if event.data_out.objective_function_value < start_value - max(1e-6, _STALL_GAIN * abs(start_value)):
            improved_at[0] = time.perf_counter()

    h.cbMipInterrupt.subscribe(stop)
    h.cbSimplexInterrupt.subscribe(stop)
    if stall_s is not None or until_better_s is not None:
        h.cbMipImprovingSolution.subscribe(improving)
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    wall = time.perf_counter() - started
    if status == highspy.HighsModelStatus.kInfeasible:
        return linear.SatOutcome("infeasible", [], math.inf, -math.inf, wall)
    if info.primal_solution_status != 2:  # no feasible point (kSolutionStatusFeasible)
        return linear.SatOutcome("unknown", [], math.inf, -math.inf, wall)
    values = [int(round(v)) for v in h.getSolution().col_value]
    objective = sum(c * v for c, v in zip(model.cost, values, strict=True) if c) + model.constant
    bound = info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else -math.inf
    return linear.SatOutcome("optimal" if status == highspy.HighsModelStatus.kOptimal else "feasible",
                             values, objective, bound, wall)
