"""What one replica does with a given arrival rate over one tick, from the shared capacity model
(``meridian.capacity``: the same roofline the emulator, the autoscaler and the solver read).

Steady state of a generative replica at arrival rate lambda (requests/s), with prompt P, output O:
- a request lives ``per_request_s(B) = O x decode_step_s(B, B x ctx) + prefill_s x B`` at batch B
  (the capacity model's own accounting: every running request's decode stalls once for each other
  request's prefill), so by Little's law ``B = lambda x per_request_s(B)`` (solved exactly, since
  the step time is linear in the KV it reads; a bisection checks it when it is not);
- beyond the largest batch the KV budget holds (``max_batch``) the replica is saturated: it serves
  ``mu_max = max_batch / per_request_s(max_batch)`` and the rest queues (a backlog carried between
  ticks, bounded by the engine's queue; the overflow fails);
- TPOT = ``per_request_s(B) / O`` (what a client sees, prefill stalls included);
- TTFT = RTT + wait + prefill, the wait being half a decode step plus an M/D/1 queue on prefill
  (utilisation ``lambda x prefill_s``), plus backlog / mu_max when saturated.
An embedding replica is one M/D/1 server whose service time is the prefill.

Tails (documented approximation): prompt lengths are lognormal with the workload's mean and
coefficient of variation ``prompt_cv``, or a replayed trace's own lengths (``recorded_factors``), at 11
points, each the mean within a slice of probability, finer in the tail (``PROMPT_BINS``); the wait is 0 with probability
1 - rho and exponential beyond (4 points); a request's TPOT is lognormal around the mean with
log-sd ``tpot_sigma``. A request meets the SLO when TTFT <= ttft_p99_ms and TPOT <= tpot_p99_ms."""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Sequence

import numpy as np

from meridian import capacity
from meridian.spec import deployment as deployment_spec

# Prompt lengths are modelled at a few points, each the mean length within a slice of probability.
# The slices are finer in the tail: a p99 TTFT target is decided by the longest few percent of
# prompts, which 8 equal slices (the earlier model) folded into one point of 12.5%.
PROMPT_BINS = np.array([0.0, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0])
PROMPT_PROBS = np.diff(PROMPT_BINS)
MIN_RECORDED = 1000  # prompt lengths a trace needs for its own spread (each slice >= 1 length)
_WAIT_Q = np.array([0.125, 0.375, 0.625, 0.875])
_EXP_WAIT = -np.log(1.0 - _WAIT_Q)
_EXP_WAIT = _EXP_WAIT / _EXP_WAIT.mean()
_SATURATED_WAIT = np.array([0.6, 0.85, 1.15, 1.4])


@dataclasses.dataclass(frozen=True)
class Steady:
    """One replica over one tick. Rates per second, times in ms unless named ``_s``."""

    arrival_rps: float
    served_rps: float
    running: float
    queued: float
    tpot_ms: float
    prefill_ms: float
    wait_ms: float
    wait_rho: float
    wait_tail_ms: float
    saturated: bool
    backlog_next: float
    dropped: float
    kv_usage: float
    request_s: float
    decode_share: float

    @property
    def concurrency(self) -> float:
        return self.running + self.queued


def recorded_factors(tokens: Sequence[float]) -> tuple[float, ...]:
    """Prompt lengths as recorded (a trace's), at the points of ``PROMPT_BINS``: the mean of the
    sorted lengths in each slice, over the overall mean. A trace's tail is its own, not a fitted
    curve's."""
    values = np.sort(np.asarray(tokens, dtype=float))
    if len(values) < MIN_RECORDED or values.mean() <= 0:
        raise ValueError(f"need at least {MIN_RECORDED} prompt lengths with a positive mean, got {len(values)}")
    cuts = np.round(PROMPT_BINS * len(values)).astype(int)
    f = np.array([values[a:b].mean() for a, b in zip(cuts[:-1], cuts[1:], strict=True)]) / values.mean()
    return tuple(float(x) for x in f / float(f @ PROMPT_PROBS))


def capped(factors: Sequence[float], cap: float) -> tuple[float, ...]:
    """``factors`` with no prompt longer than ``cap`` x the mean (the model's context length over
    the mean prompt): the longest are cut to the cap and the rest stretched so the points still
    average to 1 (the mean the workload declares); all 1 when the cap is at or under the mean."""
    f = np.asarray(factors, dtype=float)
    if cap <= 1.0:
        return (1.0,) * len(f)
    if f.max() <= cap:
        return tuple(float(x) for x in f)
    lo, hi = 1.0, cap / max(1e-12, float(f.min()))
    for _ in range(60):  # the stretch a with mean(min(cap, a x f)) = 1
        mid = (lo + hi) / 2.0
        if float(np.minimum(cap, mid * f) @ PROMPT_PROBS) < 1.0:
            lo = mid
        else:
            hi = mid
    return tuple(float(x) for x in np.minimum(cap, hi * f))


def point_quantiles(values: np.ndarray, cum: np.ndarray, quantiles: Sequence[float]) -> tuple[float, ...]:
    """Quantiles of a distribution given as points sorted by value and their cumulative
    probabilities (a caller that needs ``cum`` for more computes it once): for each quantile, the
    first point whose cumulative probability reaches it."""
    idx = np.minimum(np.searchsorted(cum, np.asarray(quantiles, dtype=float)), len(values) - 1)
    return tuple(float(v) for v in values[idx])


def _lognormal_factors(cv: float) -> np.ndarray:
    """A lognormal with mean 1 and coefficient of variation ``cv`` at the points of ``PROMPT_BINS``:
    its mean within each slice of probability."""
    if cv <= 0:
        return np.ones(len(PROMPT_PROBS))
    sigma = math.sqrt(math.log(1.0 + cv * cv))
    normal = statistics.NormalDist()
    # E[X; X in slice] for X = exp(mu + sigma Z), mu = -sigma^2 / 2: Phi(z_b - sigma) - Phi(z_a - sigma).
    shifted = [0.0 if q <= 0 else 1.0 if q >= 1 else normal.cdf(normal.inv_cdf(float(q)) - sigma) for q in PROMPT_BINS]
    f = np.diff(np.asarray(shifted)) / PROMPT_PROBS
    return f / float(f @ PROMPT_PROBS)


class ReplicaModel:
    """Analytic steady state of replicas of one deployment on one GPU type (see module docstring)."""

    def __init__(self, perf: capacity.ReplicaPerf, workload: capacity.Workload, *, max_running: int | None,
                 max_queued: int, ttft_sla_ms: float, tpot_sla_ms: float | None, prompt_cv: float,
                 tpot_sigma: float, prompt_factors: tuple[float, ...] | None = None):
        self.perf = perf
        self.workload = workload
        self.is_embedding = perf.is_embedding
        self.max_queued = max_queued
        self.ttft_sla_ms = ttft_sla_ms
        self.tpot_sla_ms = tpot_sla_ms
        self.tpot_sigma = tpot_sigma
        # Prompt lengths over the mean: a trace's own (``recorded_factors``) or lognormal with ``prompt_cv``.
        self.prompt_factors = (np.asarray(prompt_factors, dtype=float) if prompt_factors
                               else _lognormal_factors(prompt_cv))
        self.prefill_s = perf.prefill_s(workload.prompt_tokens * (1.0 - workload.cached_prompt_share))
        self.output = max(1.0, workload.output_tokens)
        self.ctx = workload.prompt_tokens + workload.output_tokens / 2.0
        self.max_batch = perf.max_batch(workload, max_running)
        if self.is_embedding:
            self.mu_max = 1.0 / self.prefill_s if self.prefill_s > 0 else math.inf
        else:
            self.mu_max = self.max_batch / self.per_request_s(self.max_batch)
        # Decode step = a + k x B: read both off the capacity model, then check linearity once.
        self._a = perf.decode_step_s(1, 0.0)
        self._k = (perf.decode_step_s(1, self.ctx) - self._a)
        hi = float(self.max_batch)
        self._linear = abs(perf.decode_step_s(hi, hi * self.ctx) - (self._a + self._k * hi)) <= 1e-6 * max(1e-9, self._a)

    def step_s(self, batch: float) -> float:
        return self.perf.decode_step_s(max(batch, 1e-9), max(batch, 1e-9) * self.ctx)

    def per_request_s(self, batch: float) -> float:
        b = max(batch, 1e-9)
        return self.output * self.step_s(b) + self.prefill_s * b

    def _batch_for(self, lam: float) -> float | None:
        """B with B = lam x per_request_s(B), or None when it exceeds max_batch (saturated)."""
        if lam <= 0:
            return 0.0
        if self._linear:
            denom = 1.0 - lam * (self.output * self._k + self.prefill_s)
            if denom <= 0:
                return None
            b = lam * self.output * self._a / denom
            return b if b <= self.max_batch else None
        if lam * self.per_request_s(self.max_batch) > self.max_batch:
            return None
        lo, hi = 0.0, float(self.max_batch)
        for _ in range(40):
            mid = (lo + hi) / 2.0
            if lam * self.per_request_s(mid) > mid:
                lo = mid
            else:
                hi = mid
        return hi

    def steady(self, lam: float, backlog: float, tick_s: float) -> Steady:
        """The replica over a tick of ``tick_s`` at ``lam`` requests/s with ``backlog`` queued."""
        if self.is_embedding:
            return self._steady_embedding(lam, backlog, tick_s)
        batch = None if backlog > 0 else self._batch_for(lam)
        if batch is not None:
            per_req = self.per_request_s(batch)
            rho = min(capacity.MAX_QUEUE_UTILISATION, lam * self.prefill_s)
            tail_s = capacity.queue_wait_tail_s(self.prefill_s, rho)
            step = self.step_s(batch)
            wait_s = step / 2.0 + rho * tail_s
            return Steady(lam, lam, batch, 0.0, per_req / self.output * 1000.0, self.prefill_s * 1000.0,
                          wait_s * 1000.0, rho, tail_s * 1000.0, False, 0.0, 0.0,
                          batch * self.ctx / max(1, self.perf.kv_budget_tokens), per_req + wait_s,
                          self._decode_share(per_req))
        batch = float(self.max_batch)
        per_req = self.per_request_s(batch)
        nxt, dropped = self._backlog(lam, backlog, tick_s)
        queued = (backlog + nxt) / 2.0
        wait_s = queued / self.mu_max + self.step_s(batch) / 2.0 + self.prefill_s / 2.0
        served = min(self.mu_max, lam + backlog / tick_s)
        return Steady(lam, served, batch, queued, per_req / self.output * 1000.0, self.prefill_s * 1000.0,
                      wait_s * 1000.0, 1.0, wait_s * 1000.0, True, nxt, dropped,
                      min(1.0, batch * self.ctx / max(1, self.perf.kv_budget_tokens)), per_req + wait_s,
                      self._decode_share(per_req))

    def _steady_embedding(self, lam: float, backlog: float, tick_s: float) -> Steady:
        p = self.prefill_s
        rho = lam * p
        if backlog <= 0 and rho < capacity.MAX_QUEUE_UTILISATION:
            tail_s = capacity.queue_wait_tail_s(p, rho)
            wait_s = rho * tail_s
            return Steady(lam, lam, rho, 0.0, 0.0, p * 1000.0, wait_s * 1000.0, rho, tail_s * 1000.0, False, 0.0,
                          0.0, 0.0, p + wait_s, 0.0)
        nxt, dropped = self._backlog(lam, backlog, tick_s)
        queued = (backlog + nxt) / 2.0
        wait_s = queued / self.mu_max + p / 2.0
        return Steady(lam, min(self.mu_max, lam + backlog / tick_s), 1.0, queued, 0.0, p * 1000.0, wait_s * 1000.0,
                      1.0, wait_s * 1000.0, True, nxt, dropped, 0.0, p + wait_s, 0.0)

    def _backlog(self, lam: float, backlog: float, tick_s: float) -> tuple[float, float]:
        nxt = max(0.0, backlog + (lam - self.mu_max * 0.999) * tick_s)
        dropped = max(0.0, nxt - self.max_queued)
        return nxt - dropped, dropped

    def _decode_share(self, per_req_s: float) -> float:
        """Share of a running request's life after its first byte (a kill then fails it)."""
        return max(0.0, 1.0 - self.prefill_s / per_req_s) if per_req_s > 0 else 0.0

    # ---------------------------------------------------------------- tails

    @staticmethod
    def wait_points(s: Steady) -> tuple[np.ndarray, np.ndarray]:
        """The wait before prefill begins (the engine's queue time) as points and probabilities (ms),
        in ascending order."""
        if s.saturated:
            return s.wait_ms * _SATURATED_WAIT, np.full(4, 0.25)
        base = s.wait_ms - s.wait_rho * s.wait_tail_ms  # the fixed part (half a decode step)
        if s.wait_rho <= 0:
            return np.array([base]), np.array([1.0])
        return (np.concatenate(([base], base + s.wait_tail_ms * _EXP_WAIT)),
                np.concatenate(([1.0 - s.wait_rho], np.full(4, s.wait_rho / 4.0))))

    def queue_time_ms(self, s: Steady, quantiles: Sequence[float]) -> tuple[float, ...]:
        """Quantiles of the queue time (``wait_points``): the first point whose cumulative share
        reaches each quantile."""
        waits, wprob = self.wait_points(s)
        return point_quantiles(waits, np.cumsum(wprob), quantiles)

    def server_ttft_points(self, s: Steady) -> tuple[np.ndarray, np.ndarray]:
        """Server-side TTFT (wait + prefill) as points and probabilities, sorted by value (ms)."""
        waits, wprob = self.wait_points(s)
        prefill = s.prefill_ms * self.prompt_factors
        values = (prefill[:, None] + waits[None, :]).ravel()
        probs = (PROMPT_PROBS[:, None] * wprob[None, :]).ravel()
        order = np.argsort(values, kind="stable")
        return values[order], probs[order]

    def tpot_ok(self, s: Steady) -> float:
        """Probability that a request's TPOT is within the SLA (1 for embeddings)."""
        if self.is_embedding or self.tpot_sla_ms is None:
            return 1.0
        if s.tpot_ms <= 0:
            return 1.0
        if self.tpot_sigma <= 0:
            return 1.0 if s.tpot_ms <= self.tpot_sla_ms else 0.0
        z = (math.log(self.tpot_sla_ms / s.tpot_ms) + self.tpot_sigma ** 2 / 2.0) / self.tpot_sigma
        return statistics.NormalDist().cdf(z)

    def server_ttft_p99_ms(self, s: Steady) -> float:
        values, probs = self.server_ttft_points(s)
        return point_quantiles(values, np.cumsum(probs), (0.99,))[0]


@functools.lru_cache(maxsize=256)
def _model(arch: capacity.Architecture, gpu_type: str, gpus: int, quant: str | None, mem_fraction: float,
           prompt: float, output: float, max_running: int | None, max_queued: int, ttft_ms: float,
           tpot_ms: float | None, prompt_cv: float, tpot_sigma: float,
           prompt_factors: tuple[float, ...] | None) -> ReplicaModel:
    perf = capacity.replica_perf(arch, gpu_type, gpus, quant, mem_fraction)
    return ReplicaModel(perf, capacity.Workload(prompt, output), max_running=max_running, max_queued=max_queued,
                        ttft_sla_ms=ttft_ms, tpot_sla_ms=tpot_ms, prompt_cv=prompt_cv, tpot_sigma=tpot_sigma,
                        prompt_factors=prompt_factors)


class UnknownArchitecture(ValueError):
    """The simulator needs a model's architecture (known table or the spec's own figures)."""


def model_for(spec: deployment_spec.ModelDeploymentSpec, gpu_type: str, *, prompt_cv: float,
              tpot_sigma: float, default_max_queued: int = 1024,
              prompt_factors: tuple[float, ...] | None = None) -> ReplicaModel:
    """The replica model of ``spec`` on ``gpu_type`` (GPUs per replica from the spec); prompt
    lengths spread as ``prompt_factors`` (a replayed trace's, ``recorded_factors``) when given,
    else lognormal with ``prompt_cv``; none longer than ``runtime.context_length`` (``capped``)."""
    arch = spec.architecture()
    if arch is None:
        raise UnknownArchitecture(f"model {spec.model.source!r} is not in the capacity model's table; give "
                                  "model.architecture in its ModelDeployment")
    quant = None if spec.runtime.quantization == "none" else spec.runtime.quantization
    if spec.runtime.context_length is not None:
        prompt_factors = capped(prompt_factors or tuple(_lognormal_factors(prompt_cv)),
                                spec.runtime.context_length / spec.workload.prompt_tokens_mean)
    return _model(arch, gpu_type, spec.resources.gpus_for(gpu_type), quant, spec.runtime.mem_fraction_static,
                  spec.workload.prompt_tokens_mean, 0.0 if spec.runtime.is_embedding else spec.workload.output_tokens_mean,
                  spec.runtime.max_running_requests, spec.runtime.max_queued_requests or default_max_queued,
                  spec.sla.ttft_p99_ms, spec.sla.tpot_p99_ms, prompt_cv, tpot_sigma, prompt_factors)


def cold_start_s(model: ReplicaModel, base_s: float, per_gib_s: float) -> float:
    """Seconds from start to READY: a fixed part plus the weights' size (download and load)."""
    return base_s + per_gib_s * model.perf.weights_gib
