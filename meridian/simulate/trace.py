"""The traffic trace: request arrivals per tick and stream (deployment, client region), drawn once
from the scenario's seed so every compared policy replays exactly the same requests; or, for a
traffic entry with ``trace``, the recorded arrivals of a trace file, replayed (``replay``)."""

from __future__ import annotations

import array
import dataclasses
import functools
import math
import pathlib

import numpy as np

from meridian import spec, traces
from meridian.simulate import perf
from meridian.simulate import scenario as scenario_mod
from meridian.spec import deployment as deployment_spec
from scheduler.solver import throughput


@dataclasses.dataclass(frozen=True)
class Stream:
    deployment: str
    client_region: str


@dataclasses.dataclass(frozen=True)
class Trace:
    """``arrivals[tick, stream]``: requests that arrive in that tick; ``rate_rps`` the mean rate."""

    streams: tuple[Stream, ...]
    arrivals: np.ndarray
    rate_rps: np.ndarray
    tick_s: float
    # deployment -> (prompt, output) mean tokens and the p99 prompt (0: unknown) of the trace it
    # replays with tokens: trace
    workload: dict[str, tuple[float, float, float]] = dataclasses.field(default_factory=dict)
    # stream index -> what it replays (file, scale = requests/s multiplier before the day shape)
    replays: dict[int, tuple[str, float]] = dataclasses.field(default_factory=dict)
    # deployment -> its trace's prompt lengths over their mean, as equal-probability points
    # (``perf.recorded_factors``), for the deployments in ``workload``
    prompt_factors: dict[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)

    @property
    def ticks(self) -> int:
        return int(self.arrivals.shape[0])

    def total_requests(self) -> int:
        return int(self.arrivals.sum())

    def mean_rps(self, deployment: str) -> dict[str, float]:
        """Mean requests/s per client region of ``deployment`` over the whole trace."""
        return {s.client_region: float(self.rate_rps[:, i].mean())
                for i, s in enumerate(self.streams) if s.deployment == deployment}


def diurnal(local_hour: float, peak_local_hour: float, trough_share: float) -> float:
    """Share of the peak rate at ``local_hour``: 1 at the peak, ``trough_share`` 12 h away."""
    phase = 2.0 * math.pi * (local_hour - peak_local_hour) / 24.0
    return trough_share + (1.0 - trough_share) * 0.5 * (1.0 + math.cos(phase))


def rate_at(sc: scenario_mod.Scenario, shape: scenario_mod.TrafficShape, region: str, t_s: float) -> float:
    """Mean requests/s of (shape's deployment, region) at ``t_s`` seconds into the run."""
    utc_h = sc.start_utc_hour + t_s / 3600.0
    local = (utc_h + sc.client_utc_offsets_h[region]) % 24.0
    rate = shape.peak_rps[region] * diurnal(local, shape.peak_local_hour, shape.trough_share)
    at_h = t_s / 3600.0
    for spike in sc.spikes:
        if spike.deployment not in (None, shape.deployment) or spike.client_region not in (None, region):
            continue
        if spike.at_h <= at_h < spike.at_h + spike.duration_min / 60.0:
            rate *= spike.multiplier
    return rate


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A trace file's arrivals (seconds from its first request, sorted), token means and the spread
    of its prompt lengths (``perf.recorded_factors``); the file repeats every ``period_s`` (its last
    arrival rounded up to a whole minute)."""

    arrival_s: np.ndarray
    prompt_tokens_mean: float
    output_tokens_mean: float
    period_s: float
    prompt_factors: tuple[float, ...] = ()
    prompt_tokens_p99: float = 0.0  # the 99th percentile of prompt length (0: too few requests to say)

    @property
    def mean_rps(self) -> float:
        return len(self.arrival_s) / self.period_s

    def count_before(self, t_s: np.ndarray) -> np.ndarray:
        """Arrivals of the tiled trace (the file repeated end to end from t = 0) before ``t_s``."""
        laps, within = np.divmod(t_s, self.period_s)
        return laps * len(self.arrival_s) + np.searchsorted(self.arrival_s, within, side="left")


@functools.lru_cache(maxsize=16)
def recorded(path: str | pathlib.Path) -> Recorded:
    """Read a trace (a shipped short name or a file) once per process. Arrivals and prompt lengths
    are held as packed arrays (16 bytes a request, not Python objects), so a week-long trace fits."""
    times, prompts, output = array.array("d"), array.array("q"), 0
    for r in traces.read(path):
        times.append(r.arrival_s)
        prompts.append(r.input_tokens)
        output += r.output_tokens
    if not times:
        raise traces.TraceError(str(path), 0, "the trace has no requests")
    arr = np.sort(np.frombuffer(times, dtype=float))
    period = max(60.0, math.ceil((arr[-1] + 1e-9) / 60.0) * 60.0)
    mean = sum(prompts) / len(prompts)
    enough = len(prompts) >= perf.MIN_RECORDED and mean > 0
    factors = perf.recorded_factors(prompts) if enough else ()
    p99 = float(np.quantile(np.asarray(prompts, dtype=float), 0.99)) if enough else 0.0
    return Recorded(arr, mean, output / len(arr), period, factors, p99)


def replay(sc: scenario_mod.Scenario, shape: scenario_mod.TrafficShape, region: str) -> tuple[np.ndarray, float]:
    """Arrivals per tick of (shape's deployment, region) replaying ``shape.trace``, and its scale.

    The region plays the tiled trace at trace time = its local time since midnight; tick ``k``'s
    recorded arrivals are multiplied by ``scale = peak_rps / trace mean rps`` (times the diurnal
    share at mid-tick when ``diurnal``, times the spikes) and rounded by carrying the fraction:
    whole arrivals are the differences of the floor of the running total, so over any span the
    count is the recorded count times the multiplier to within one request."""
    assert shape.trace is not None
    rec = recorded(sc.trace_path(shape.trace))
    scale = shape.peak_rps[region] / rec.mean_rps
    ticks = sc.ticks
    offset_s = (sc.start_utc_hour + sc.client_utc_offsets_h[region]) * 3600.0 % (24 * 3600.0)
    edges = offset_s + np.arange(ticks + 1) * sc.tick_s
    recorded_per_tick = np.diff(rec.count_before(edges)).astype(float)
    mult = np.empty(ticks)
    for k in range(ticks):
        mid = (k + 0.5) * sc.tick_s
        if shape.trace.diurnal:
            mult[k] = rate_at(sc, shape, region, mid) / shape.peak_rps[region] * scale if shape.peak_rps[region] else 0.0
        else:
            mult[k] = scale * _spike_factor(sc, shape, region, mid)
    total = np.floor(np.cumsum(recorded_per_tick * mult) + 1e-9)
    return np.diff(np.concatenate([[0.0], total])).astype(np.int64), scale


def _spike_factor(sc: scenario_mod.Scenario, shape: scenario_mod.TrafficShape, region: str, t_s: float) -> float:
    at_h, factor = t_s / 3600.0, 1.0
    for spike in sc.spikes:
        if spike.deployment in (None, shape.deployment) and spike.client_region in (None, region) \
                and spike.at_h <= at_h < spike.at_h + spike.duration_min / 60.0:
            factor *= spike.multiplier
    return factor


def build(sc: scenario_mod.Scenario, specset: spec.SpecSet | None = None) -> Trace:
    """Poisson arrivals at the mid-tick rate of every stream, from ``sc.seed``; streams whose entry
    has ``trace`` replay it instead (``replay``). ``specset`` tells embedding deployments apart
    (they keep their spec's tokens); without it every ``tokens: trace`` entry takes the trace's."""
    streams = tuple(Stream(shape.deployment, region) for shape in sc.traffic for region in sorted(shape.peak_rps))
    shapes = [shape for shape in sc.traffic for _ in sorted(shape.peak_rps)]
    ticks = sc.ticks
    rate = np.zeros((ticks, len(streams)))
    for k in range(ticks):
        mid = (k + 0.5) * sc.tick_s
        for i, (s, shape) in enumerate(zip(streams, shapes, strict=True)):
            rate[k, i] = rate_at(sc, shape, s.client_region, mid)
    rng = np.random.default_rng(sc.seed)
    arrivals = rng.poisson(rate * sc.tick_s).astype(np.int64)
    embedding = set() if specset is None else {
        d.metadata.name for d in specset.of_kind("ModelDeployment") if d.spec.runtime.is_embedding}
    workload: dict[str, tuple[float, float, float]] = {}
    factors: dict[str, tuple[float, ...]] = {}
    replays: dict[int, tuple[str, float]] = {}
    for i, (s, shape) in enumerate(zip(streams, shapes, strict=True)):
        if shape.trace is None:
            continue
        arrivals[:, i], scale = replay(sc, shape, s.client_region)
        rate[:, i] = arrivals[:, i] / sc.tick_s
        replays[i] = (shape.trace.file, scale)
        if shape.trace.tokens == "trace" and s.deployment not in embedding:
            rec = recorded(sc.trace_path(shape.trace))
            workload[s.deployment] = (rec.prompt_tokens_mean, rec.output_tokens_mean, rec.prompt_tokens_p99)
            if rec.prompt_factors:
                factors[s.deployment] = rec.prompt_factors
    return Trace(streams, arrivals, rate, sc.tick_s, workload, replays, factors)


def with_workload(specset: spec.SpecSet, tr: Trace) -> spec.SpecSet:
    """``specset`` with each replayed deployment's ``workload`` set to its trace's mean tokens and
    p99 prompt, so the scheduler plans for the requests the replicas serve (as an operator who
    knows the traffic declares them), without the measured ``resources.throughput_profile``
    figures those tokens void (``replayed_profile``)."""
    if not tr.workload:
        return specset
    docs = []
    for loaded in specset.documents:
        doc = loaded.doc
        if loaded.kind == "ModelDeployment" and doc.metadata.name in tr.workload:
            prompt, output, p99 = tr.workload[doc.metadata.name]
            shape = doc.spec.workload.model_copy(update={"prompt_tokens_mean": prompt, "output_tokens_mean": output,
                                                         "prompt_tokens_p99": max(p99, prompt) if p99 > 0 else None})
            replayed = doc.spec.model_copy(update={"workload": shape})
            profile = replayed_profile(doc.spec, replayed)
            if profile != doc.spec.resources.throughput_profile:
                measured = replayed.resources.throughput_profile_workload if profile else None
                replayed = replayed.model_copy(update={"resources": replayed.resources.model_copy(
                    update={"throughput_profile": profile, "throughput_profile_workload": measured})})
            doc = doc.model_copy(update={"spec": replayed})
            loaded = dataclasses.replace(loaded, doc=doc)
        docs.append(loaded)
    return dataclasses.replace(specset, documents=tuple(docs))


def replayed_profile(declared: deployment_spec.ModelDeploymentSpec,
                     replayed: deployment_spec.ModelDeploymentSpec) -> dict[str, float]:
    """What is left of ``declared``'s measured requests/s per GPU type (``throughput_profile``) once
    a replay sets the trace's tokens (``replayed``'s workload): nothing the capacity model has a
    figure for. A measured figure holds for the tokens it was measured on, and an operator who
    knows the traffic would measure again; in the simulator that measurement is the capacity model
    the replicas run. Kept as it was, a replay of Mooncake's conversation trace (12k-token prompts)
    planned reasoning-70b at its declared 3.2 requests/s on H100 where its replicas served 0.59.
    Entries the model has no figure for (an unknown architecture) stay as declared; the same tokens
    keep the whole profile."""
    profile = dict(declared.resources.throughput_profile)
    if not profile or declared.workload == replayed.workload:
        return profile
    bare = replayed.model_copy(update={"resources": replayed.resources.model_copy(update={"throughput_profile": {}})})
    return {gpu_type: rps for gpu_type, rps in profile.items() if throughput.capacity_rps(bare, gpu_type) is None}
