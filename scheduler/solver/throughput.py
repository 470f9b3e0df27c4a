"""What a replica of a deployment can serve on each GPU type, from the one capacity model
(``meridian.capacity``) or the spec's measured ``throughput_profile``; the reference GPU type in
whose replicas demand is counted; and what one replica on another type counts for (Melange).

The autoscaler's ``replica_capacity_rps`` comes from ``capacity_rps`` here as well, so both read
the same figures."""

from __future__ import annotations

import dataclasses
import functools

from meridian import capacity
from meridian.catalog import gpus
from meridian.spec import deployment as deployment_spec

# Demand weights are clipped so that a model with one odd GPU-type figure cannot ask for hundreds
# of replicas (or count one replica as dozens).
MIN_UNITS, MAX_UNITS = 0.02, 50.0


@dataclasses.dataclass(frozen=True)
class TypeFit:
    """One deployment on one GPU type. ``capacity_rps`` None: no figure (no architecture and no
    profile entry); 0 with ``unfit`` set: the type cannot serve the model within the SLA, and
    ``binding`` names why as a constraint code: ``memory`` (the weights leave no KV room), ``ttft``
    (the prompt's prefill alone exceeds the TTFT target), ``tpot`` (no batch, not even one request,
    keeps the TPOT target) or ``gpu_type`` (unknown type). ``tpot_min_ms``: the time per output token
    of a lone request (prefill stall included), the best TPOT the type can give; 0 when unknown.
    ``wait_ms``: for an embedding model, the p99 wait before a request's prefill on a replica loaded
    to ``capacity_rps``, the most a plan loads it (``capacity.queue_wait_p99_s``): its capacity is
    one prefill at a time, 80% busy, and its queue is most of its TTFT tail (11 prefills at p99);
    the latency filter keeps a client region off a pool where RTT + prefill + this wait (+ the
    plan's headroom) breaks the TTFT target when another pool within reach keeps it. 0 for a
    generative model (its capacity is the TPOT-bound batch, the prefill busy a minority of the
    time and chunked in with the decode steps), and when unknown."""

    gpu_type: str
    gpus: int
    capacity_rps: float | None
    prefill_ms: float
    unfit: str = ""
    binding: str = ""
    tpot_min_ms: float = 0.0
    wait_ms: float = 0.0

    @property
    def loaded_ms(self) -> float:
        """What a replica adds to TTFT at its capacity: the mean prompt's prefill + ``wait_ms``."""
        return self.prefill_ms + self.wait_ms


def _loaded(fit: TypeFit, embedding: bool) -> TypeFit:
    """``fit`` with the p99 queue wait of an embedding replica serving its ``capacity_rps``."""
    if not embedding or not fit.capacity_rps or fit.prefill_ms <= 0:
        return dataclasses.replace(fit, wait_ms=0.0) if fit.wait_ms else fit
    service_s = fit.prefill_ms / 1000.0
    return dataclasses.replace(fit, wait_ms=capacity.queue_wait_p99_s(service_s, fit.capacity_rps * service_s) * 1000.0)


def allowed_gpu_types(spec: deployment_spec.ModelDeploymentSpec) -> list[str]:
    """The spec's gpu_types, else every catalog type with at least min_gpu_memory_gib."""
    res = spec.resources
    if res.gpu_types:
        return list(res.gpu_types)
    floor = res.min_gpu_memory_gib or 0
    return [name for name in gpus.names() if gpus.gpu(name).memory_gib >= floor]


def assess(spec: deployment_spec.ModelDeploymentSpec, gpu_type: str) -> TypeFit:
    """Capacity and prefill time of one replica of ``spec`` on ``gpu_type``."""
    arch = spec.architecture()
    count = spec.resources.gpus_for(gpu_type)
    quant = None if spec.runtime.quantization == "none" else spec.runtime.quantization
    key = (arch, gpu_type, count, quant, spec.runtime.mem_fraction_static, spec.workload.prompt_tokens_mean,
           spec.workload.output_tokens_mean, spec.sla.ttft_p99_ms, spec.sla.tpot_p99_ms,
           spec.runtime.max_running_requests)
    fit = _assess(*key)
    profile = spec.resources.throughput_profile.get(gpu_type)
    if profile is not None and not fit.unfit:
        return _loaded(dataclasses.replace(fit, capacity_rps=profile), spec.runtime.is_embedding)
    return fit


@functools.lru_cache(maxsize=4096)
def _assess(arch: capacity.Architecture | None, gpu_type: str, count: int, quant: str | None, mem_fraction: float,
            prompt_tokens: float, output_tokens: float, ttft_ms: float, tpot_ms: float | None,
            max_running: int | None) -> TypeFit:
    if gpu_type not in gpus.GPUS:
        return TypeFit(gpu_type, count, 0.0, 0.0, f"unknown GPU type {gpu_type}", "gpu_type")
    if arch is None:
        return TypeFit(gpu_type, count, None, 0.0)
    try:
        perf = capacity.replica_perf(arch, gpu_type, count, quant, mem_fraction)
    except capacity.DoesNotFit as exc:
        return TypeFit(gpu_type, count, 0.0, 0.0, f"does not fit {count}x{gpu_type}: {exc}", "memory")
    workload = capacity.Workload(prompt_tokens, output_tokens)
    prefill_ms = perf.prefill_s(prompt_tokens) * 1000.0
    tpot_min_ms = 0.0
    if not arch.is_embedding:
        output = max(1.0, output_tokens)
        # One request alone: its decode steps plus its own prefill, per output token (capacity model).
        tpot_min_ms = (output * perf.decode_step_s(1, prompt_tokens + output / 2) + perf.prefill_s(prompt_tokens)) \
            / output * 1000.0
    rps = perf.capacity_rps(workload, ttft_ms, tpot_ms, max_running)
    if rps <= 0:
        if prefill_ms > ttft_ms:
            why, binding = f"prefill of {prompt_tokens:g} tokens takes {prefill_ms:.0f} ms > TTFT p99 {ttft_ms:g} ms", "ttft"
        else:
            why, binding = (f"TPOT {tpot_min_ms:.0f} ms at batch 1 > TPOT p99 {tpot_ms:g} ms (no batch keeps it)",
                            "tpot")
        return TypeFit(gpu_type, count, 0.0, prefill_ms, f"{count}x{gpu_type}: {why}", binding, tpot_min_ms)
    return _loaded(TypeFit(gpu_type, count, rps, prefill_ms, tpot_min_ms=tpot_min_ms), arch.is_embedding)


def prefill_ms(spec: deployment_spec.ModelDeploymentSpec, gpu_type: str, prompt_tokens: float) -> float | None:
    """Prefill of one prompt of ``prompt_tokens`` on a replica of ``spec`` on ``gpu_type`` (ms), from
    the capacity model; None without a figure (no architecture, unknown type, does not fit)."""
    arch = spec.architecture()
    if arch is None or gpu_type not in gpus.GPUS:
        return None
    quant = None if spec.runtime.quantization == "none" else spec.runtime.quantization
    try:
        perf = capacity.replica_perf(arch, gpu_type, spec.resources.gpus_for(gpu_type), quant,
                                     spec.runtime.mem_fraction_static)
    except capacity.DoesNotFit:
        return None
    return perf.prefill_s(prompt_tokens) * 1000.0


def reference_gpu_type(spec: deployment_spec.ModelDeploymentSpec, preferred: str | None = None) -> str:
    """The GPU type demand is counted in: ``preferred`` when it fits, else the first fitting type of
    ``gpu_types``, else (memory-only specs) the smallest-memory fitting type. Falls back to the first
    allowed type when none fits (the solver then reports the deployment unplaceable)."""
    allowed = allowed_gpu_types(spec)
    if preferred is not None and not assess(spec, preferred).unfit:
        return preferred
    fitting = [t for t in allowed if not assess(spec, t).unfit]
    if not fitting:
        return preferred or (allowed[0] if allowed else "")
    if spec.resources.gpu_types:
        return fitting[0]
    return min(fitting, key=lambda t: (gpus.gpu(t).memory_gib, t))


def capacity_rps(spec: deployment_spec.ModelDeploymentSpec, gpu_type: str | None = None) -> float | None:
    """Requests/s one replica serves within the SLA on ``gpu_type`` (default: the reference type);
    None when nothing is known, 0 when it cannot serve."""
    return assess(spec, gpu_type or reference_gpu_type(spec)).capacity_rps


def units_by_type(spec: deployment_spec.ModelDeploymentSpec, reference: str) -> dict[str, float]:
    """What one replica on each allowed, fitting type counts for in replicas of ``reference``.

    Unknown figures count as 1 (same as the reference)."""
    ref = assess(spec, reference).capacity_rps
    out: dict[str, float] = {}
    for gpu_type in allowed_gpu_types(spec):
        fit = assess(spec, gpu_type)
        if fit.unfit:
            continue
        if ref and fit.capacity_rps:
            out[gpu_type] = min(MAX_UNITS, max(MIN_UNITS, fit.capacity_rps / ref))
        else:
            out[gpu_type] = 1.0
    return out
