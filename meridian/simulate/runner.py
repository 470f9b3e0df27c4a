"""Runs the compared policies on one scenario's trace, side by side on the CPU's cores.

Each policy's run is independent and deterministic for the scenario's seed (the trace, the clouds'
random draws and the router's are all seeded; the solver runs one CP-SAT worker), so running them
in parallel processes changes nothing but the wall time. Progress comes back through a queue."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Sequence

from meridian import spec
from meridian.simulate import attainable as attainable_mod
from meridian.simulate import bound as bound_mod
from meridian.simulate import engine, metrics, policies, trace
from meridian.simulate import scenario as scenario_mod
from scheduler.control import floor as floor_mod
from scheduler.control import planner

log = logging.getLogger("meridian.simulate.runner")
Progress = Callable[[str, int, int], None]
# Loggers of the components the simulator drives: they log every spot notice, plan and table at
# INFO/WARNING, which over a simulated day is noise; errors still show.
QUIET_LOGGERS = ("meridian.scheduler", "meridian.router", "router", "scheduler", "agents", "meridian.agents")


@dataclasses.dataclass(frozen=True)
class Comparison:
    scenario: scenario_mod.Scenario
    results: tuple[metrics.RunResult, ...]
    requests: int
    wall_s: float
    jobs: int
    floor: floor_mod.Floor | None = None  # the specs' cost floor (None: not computed)
    bound: bound_mod.DemandBound | None = None  # the demand-following bound (None: not computed)
    # (deployment, client region) -> the most of its requests any fleet could serve within SLO
    attainable: dict[tuple[str, str], attainable_mod.Reach] = dataclasses.field(default_factory=dict)

    def result(self, policy: str) -> metrics.RunResult | None:
        return next((r for r in self.results if r.policy == policy), None)


def quiet_components() -> None:
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


_progress_queue: multiprocessing.Queue | None = None


def _init_worker(q: multiprocessing.Queue | None) -> None:
    global _progress_queue
    _progress_queue = q
    quiet_components()


def _send_progress(policy: str, done: int, total: int) -> None:
    if _progress_queue is not None:
        _progress_queue.put((policy, done, total))


def prepare(sc: scenario_mod.Scenario) -> tuple[spec.SpecSet, trace.Trace]:
    """The specs (each replayed deployment's workload set to its trace's tokens) and the trace."""
    specs = sc.load_specs()
    tr = trace.build(sc, specs)
    return trace.with_workload(specs, tr), tr


def _run_one(sc: scenario_mod.Scenario, policy: str) -> metrics.RunResult:
    specs, tr = prepare(sc)
    return engine.run(sc, specs, tr, policies.get(policy), _send_progress)


def default_jobs() -> int:
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1), 4))


def run(sc: scenario_mod.Scenario, names: Sequence[str] = policies.DEFAULT, *, jobs: int | None = None,
        progress: Progress | None = None, with_bound: bool = True) -> Comparison:
    """Every policy in ``names`` on ``sc``; ``jobs`` processes (1: in this process); with the cost
    floor and (``with_bound``) the demand-following bound, computed in this process."""
    for name in names:
        policies.get(name)
    specs, tr = prepare(sc)  # fail fast, before any process starts
    view = planner.SpecView.of(specs, 1)
    floor = floor_mod.compute(view)
    bound = bound_mod.compute(view, tr, down=sc.outage_ticks()) if with_bound else None
    reach = attainable_mod.compute(view, sc.fidelity, tr.prompt_factors)
    jobs = max(1, min(jobs or default_jobs(), len(names)))
    start = time.perf_counter()
    if jobs == 1:
        results = [engine.run(sc, specs, tr, policies.get(n), progress) for n in names]
        return Comparison(sc, tuple(results), tr.total_requests(), time.perf_counter() - start, 1, floor,
                          bound, reach)
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    q = ctx.Queue()
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                                                initargs=(q,)) as pool:
        futures = {pool.submit(_run_one, sc, n): n for n in names}
        pending = set(futures)
        while pending:
            done, pending = concurrent.futures.wait(pending, timeout=0.2,
                                                    return_when=concurrent.futures.FIRST_COMPLETED)
            _drain(q, progress)
            for f in done:
                f.result()  # re-raise a worker's error here, naming nothing lost
        _drain(q, progress)
        by_name = {futures[f]: f.result() for f in futures}
    return Comparison(sc, tuple(by_name[n] for n in names), tr.total_requests(), time.perf_counter() - start, jobs,
                      floor, bound, reach)


def _drain(q: multiprocessing.Queue, progress: Progress | None) -> None:
    while True:
        try:
            item = q.get_nowait()
        except queue.Empty:
            return
        if progress is not None:
            progress(*item)
