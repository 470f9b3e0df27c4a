"""Search backends: what turns the start into the plan, a registry by name
(``SolverSettings.backend``; the scheduler's ``solver_backend``).

- ``search``: on a model of at most ``restrict_above_pairs`` pairs one CP-SAT search of the whole
  model hinted with the start; on a larger one the large-neighbourhood search (``neighbourhood``)
  over the restricted pairs. Fast, and the only path an incremental re-solve takes.
- ``mip``: HiGHS (``mip.solve_mip``) on the whole model, every pair the filters allow, started
  from the start; it proves a bound as it goes.
- ``portfolio`` (default): ``search`` for ``1 - mip_share`` of the time, then ``mip`` on the whole
  model started from the search's plan; the better plan by the model's objective is kept (HiGHS
  starts from it, so it can only be as good or better). The search finds a good plan fast; HiGHS
  reaches pairs the restriction hid, and proves a bound. An incremental re-solve, a CP-SAT search
  that proved its plan optimal, or a model of more than ``mip_max_pairs`` pairs skips the second
  part.

Every backend returns a plan feasible in the model (the start, when it finds nothing better)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from scheduler.solver import candidates as cand_mod
from scheduler.solver import formulation, greedy, linear, mip, neighbourhood, problem, starts


@dataclasses.dataclass
class Job:
    """One search: the model, where it starts, until when.

    ``full``: the model with every pair; ``model``: what CP-SAT sees (``full``, or restricted on a
    large fleet without the neighbourhood search: ``restricted``); ``usable``: the restricted pairs
    of the neighbourhood search (None: all); ``lower``: the LP bound (-inf without one)."""

    prob: problem.PlacementProblem
    c: cand_mod.Candidates
    settings: problem.SolverSettings
    full: formulation.Built
    model: formulation.Built
    restricted: bool
    local: bool
    begin: greedy.Solution
    active: list[int]
    deadline: float  # perf_counter seconds
    current: Mapping[tuple[int, int], int] | None
    fixed: Mapping[int, list[tuple[int, int]]]
    wanted: Mapping[int, set[int]]
    usable: set[int] | None
    lp_cost: Mapping[int, float]
    lower: float
    incremental: bool


@dataclasses.dataclass
class Found:
    """A backend's plan (group level, with flows), its status, the best bound it proved on the
    full model (-inf: none), a message for the result and its figures for ``stats``."""

    solution: greedy.Solution
    status: problem.SolveStatus
    bound: float = -math.inf
    message: str = ""
    stats: dict[str, float] = dataclasses.field(default_factory=dict)


class Backend(Protocol):
    name: str

    def run(self, job: Job) -> Found: ...


BACKENDS: dict[str, Callable[[], Backend]] = {}


def register(name: str) -> Callable[[Callable[[], Backend]], Callable[[], Backend]]:
    def wrap(factory: Callable[[], Backend]) -> Callable[[], Backend]:
        BACKENDS[name] = factory
        return factory
    return wrap


def get(name: str) -> Backend:
    """The backend registered as ``name``; ValueError naming the setting and the valid names."""
    if name not in BACKENDS:
        raise ValueError(f"SolverSettings.backend: unknown backend {name!r}; valid: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]()


def value(job: Job, sol: greedy.Solution) -> float:
    """The full model's objective at ``sol`` (the one objective function: see
    ``formulation.replica_score`` and ``evaluate.breakdown``)."""
    return job.full.model.value(starts.complete(job.c, job.full, sol))


@register("search")
class Search:
    """CP-SAT on the whole model (small fleets), else the neighbourhood search."""

    name = "search"

    def run(self, job: Job) -> Found:
        t = time.perf_counter()
        c, settings = job.c, job.settings
        if job.local:
            found = neighbourhood.search(job.prob, c, settings, job.begin, job.active, job.deadline,
                                         current=job.current, fixed=job.fixed, wanted_groups=job.wanted,
                                         pairs=job.usable, lp_cost=job.lp_cost)
            return Found(found.solution, problem.SolveStatus.FEASIBLE, stats={
                "neighbourhood_s": time.perf_counter() - t, "neighbourhood_steps": found.steps,
                "neighbourhood_improved": found.improved, "neighbourhood_gain_usd": found.gain_usd, **found.wide})
        built = job.model
        hint = starts.complete(c, built, job.begin)
        small = not job.restricted and len(built.x) <= settings.small_model_pairs
        workers = settings.small_model_workers if small else settings.num_search_workers
        sat = linear.solve_sat(built.model, time_limit_s=max(0.05, job.deadline - time.perf_counter()),
                               workers=workers, relative_gap=settings.relative_gap, hint=hint, seed=settings.seed,
                               known_bound=job.lower)
        stats = {"workers": workers, "sat_s": time.perf_counter() - t, "sat_bound": sat.bound}
        if sat.status not in ("optimal", "feasible"):
            # Out of time without a CP-SAT solution: the start is a feasible plan (the greedy repair
            # of the current placement or of the LP rounding, next to the replicas kept).
            sol = (starts.with_flows(c, job.begin, job.active) if job.begin.counts
                   else greedy.place(job.prob, c, job.active, fixed=job.fixed))
            return Found(sol, problem.SolveStatus.FEASIBLE,
                         message=f"CP-SAT returned {sat.status} within the time limit; the greedy start plan returned",
                         stats=stats)
        sol = starts.with_flows(c, greedy.Solution({p: sat.values[v] for p, v in built.x.items()
                                                    if sat.values[v] > 0}), job.active)
        optimal = sat.status == "optimal" and not job.restricted  # optimal among the kept pairs only
        # CP-SAT's bound holds for the full model only.
        return Found(sol, problem.SolveStatus.OPTIMAL if optimal else problem.SolveStatus.FEASIBLE,
                     -math.inf if job.restricted else sat.bound, stats=stats)


@register("mip")
class Mip:
    """HiGHS on the whole model from the start (one thread), until the deadline or proven within
    ``relative_gap``."""

    name = "mip"

    def run(self, job: Job) -> Found:
        return self.improve(job, job.begin, problem.SolveStatus.FEASIBLE)

    def improve(self, job: Job, sol: greedy.Solution, status: problem.SolveStatus) -> Found:
        """``sol`` (feasible in the full model, with ``status``) or HiGHS's better plan."""
        t = time.perf_counter()
        built = job.full
        hint = starts.complete(job.c, built, sol)
        before = built.model.value(hint)
        out = mip.solve_mip(built.model, time_limit_s=max(0.05, job.deadline - t), hint=hint,
                            relative_gap=job.settings.relative_gap, seed=job.settings.seed)
        stats = {"mip_s": time.perf_counter() - t, "mip_bound": out.bound, "mip_objective": out.objective,
                 "mip_start": before}
        if out.status not in ("optimal", "feasible"):
            return Found(sol, status, stats=stats)
        values = dict(enumerate(out.values))
        found = greedy.Solution({p: out.values[v] for p, v in built.x.items() if out.values[v] > 0})
        found = starts.with_flows(job.c, found, job.active)
        # Rounded to integers and scored as every plan is (flows recomputed); kept only if it
        # holds every row exactly and is no worse than where it started.
        if not built.model.feasible(values) or value(job, found) > before + 1e-6:
            return Found(sol, status, out.bound, stats=stats)
        done = out.status == "optimal" or (out.objective - out.bound) <= job.settings.relative_gap * abs(out.objective)
        return Found(found, problem.SolveStatus.OPTIMAL if done else problem.SolveStatus.FEASIBLE, out.bound,
                     stats=stats)


@register("portfolio")
class Portfolio:
    """``search`` for ``1 - mip_share`` of the time, then ``mip`` from its plan; the better kept."""

    name = "portfolio"

    def run(self, job: Job) -> Found:
        if job.incremental or len(job.full.x) > job.settings.mip_max_pairs:
            return Search().run(job)
        now = time.perf_counter()
        split = now + (1.0 - job.settings.mip_share) * (job.deadline - now)
        first = Search().run(dataclasses.replace(job, deadline=split))
        if first.status is problem.SolveStatus.OPTIMAL or job.deadline - time.perf_counter() < 0.2:
            return first
        second = Mip().improve(job, first.solution, first.status)
        best = second if value(job, second.solution) <= value(job, first.solution) else first
        stats = {**first.stats, **second.stats, "portfolio_search": value(job, first.solution),
                 "portfolio_mip": value(job, second.solution)}
        message = "; ".join(m for m in (first.message, second.message) if m)
        return Found(best.solution, best.status, max(first.bound, second.bound), message, stats)
