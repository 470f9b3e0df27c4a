"""The one capacity model that the emulator, autoscaler, solver and simulator share.

It follows the roofline shape (see docs/architecture.md, "Capacity model"):
- weights = params x bytes per param; the KV budget is what memory x mem fraction leaves after them;
- decode is memory-bound: a step reads the weights and the batch's KV once, so
  step_s = (weight bytes + KV bytes read) / (bandwidth x efficiency x tp), and every running request
  gets one token per step (compute-bound only at very large batches);
- prefill is compute-bound: 2 x params x prompt tokens / (peak FLOP/s x efficiency x tp);
- TTFT = RTT + queueing + prefill; TPOT = the decode step at the current batch.

A replica's capacity under an SLA is the highest request rate at which p99 TTFT and TPOT hold for a
workload's prompt/output mix: the number the solver needs per (model, GPU type), as in Melange.
"""

from __future__ import annotations

import dataclasses
import math

from meridian.catalog import gpus

DECODE_BANDWIDTH_EFFICIENCY = 0.7
PREFILL_FLOPS_EFFICIENCY = 0.5
# Per decode step fixed cost: kernel launches and the scheduler loop (CUDA graphs keep it small).
STEP_OVERHEAD_S = 0.002
# Tensor-parallel all-reduce cost per decode step and GPU beyond the first.
TP_STEP_OVERHEAD_S = 0.0004
GIB = 1024**3

BYTES_PER_PARAM = {None: 2.0, "": 2.0, "none": 2.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "w8a8_fp8": 1.0,
                   "int8": 1.0, "w8a8_int8": 1.0, "awq": 0.55, "gptq": 0.55, "int4": 0.55, "gguf": 0.6}


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What the capacity model needs to know of a model. Units in names."""

    parameters_b: float
    layers: int
    kv_heads: int
    head_dim: int
    is_embedding: bool = False


# Public model cards (config.json) of models the examples and tests use.
KNOWN_ARCHITECTURES: dict[str, Architecture] = {
    "meta-llama/Llama-3.1-8B-Instruct": Architecture(8.03, 32, 8, 128),
    "meta-llama/Llama-3.1-70B-Instruct": Architecture(70.6, 80, 8, 128),
    "meta-llama/Llama-3.3-70B-Instruct": Architecture(70.6, 80, 8, 128),
    "Qwen/Qwen2.5-7B-Instruct": Architecture(7.62, 28, 4, 128),
    "Qwen/Qwen2.5-72B-Instruct": Architecture(72.7, 80, 8, 128),
    "Qwen/Qwen2.5-0.5B-Instruct": Architecture(0.49, 24, 2, 64),
    "mistralai/Mistral-7B-Instruct-v0.3": Architecture(7.25, 32, 8, 128),
    "BAAI/bge-large-en-v1.5": Architecture(0.335, 24, 16, 64, is_embedding=True),
    "intfloat/e5-mistral-7b-instruct": Architecture(7.11, 32, 8, 128, is_embedding=True),
    "Alibaba-NLP/gte-Qwen2-1.5B-instruct": Architecture(1.78, 28, 2, 128, is_embedding=True),
}


@dataclasses.dataclass(frozen=True)
class Workload:
    """A request mix: mean prompt and output tokens, and the share of the prompt served from cache."""

    prompt_tokens: float = 512.0
    output_tokens: float = 256.0
    cached_prompt_share: float = 0.0


class DoesNotFit(ValueError):
    """The model's weights do not fit the GPUs with room for a KV cache."""


@dataclasses.dataclass(frozen=True)
class ReplicaPerf:
    """What one replica of a model can do on ``gpu_count`` GPUs of ``gpu_type`` (tp = gpu_count)."""

    gpu_type: str
    gpu_count: int
    weights_gib: float
    kv_bytes_per_token: float
    kv_budget_tokens: int
    prefill_tokens_per_s: float
    weight_read_s: float
    kv_read_s_per_token: float
    is_embedding: bool

    def decode_step_s(self, batch: int, kv_tokens: float) -> float:
        """Time of one decode step for ``batch`` running requests holding ``kv_tokens`` in total."""
        if batch <= 0:
            return 0.0
        tp_cost = TP_STEP_OVERHEAD_S * (self.gpu_count - 1)
        return STEP_OVERHEAD_S + tp_cost + self.weight_read_s + self.kv_read_s_per_token * kv_tokens

    def prefill_s(self, prompt_tokens: float) -> float:
        return prompt_tokens / self.prefill_tokens_per_s

    def max_batch(self, workload: Workload, max_running_requests: int | None = None) -> int:
        """Concurrent requests the KV budget holds at the workload's mean length."""
        per_request = max(1.0, workload.prompt_tokens + (0 if self.is_embedding else workload.output_tokens))
        batch = max(1, int(self.kv_budget_tokens // per_request))
        return min(batch, max_running_requests) if max_running_requests else batch

    def capacity_rps(
        self,
        workload: Workload,
        ttft_p99_ms: float | None = None,
        tpot_p99_ms: float | None = None,
        max_running_requests: int | None = None,
    ) -> float:
        """Highest sustainable requests/s with p99 TTFT and TPOT within the SLA (0 if never).

        The batch is the largest that keeps the client-visible time per output token (decode step
        plus prefill stalls) under the TPOT target and fits the KV budget; throughput is
        batch / time per request. Requests are then held to 80% of that so
        queueing keeps p99 TTFT near the prefill time (beyond ~80% utilisation, waits explode)."""
        uncached = workload.prompt_tokens * (1.0 - workload.cached_prompt_share)
        prefill = self.prefill_s(uncached)
        if ttft_p99_ms is not None and prefill * 1000.0 > ttft_p99_ms:
            return 0.0
        if self.is_embedding:
            return 0.8 / prefill if prefill > 0 else 0.0
        best = 0.0
        hi = self.max_batch(workload, max_running_requests)
        mean_ctx = workload.prompt_tokens + workload.output_tokens / 2
        output = max(1.0, workload.output_tokens)
        for batch in _candidate_batches(hi):
            step = self.decode_step_s(batch, batch * mean_ctx)
            # In steady state each of the batch's requests is prefilled once during another's
            # lifetime, stalling its decode (chunked prefill): that is the TPOT a client sees.
            per_request_s = output * step + prefill * batch
            if tpot_p99_ms is not None and per_request_s / output * 1000.0 > tpot_p99_ms:
                break
            best = max(best, batch / per_request_s)
        return 0.8 * best


# Utilisation at which the queue model stops (beyond it the wait has no steady state).
MAX_QUEUE_UTILISATION = 0.98


def queue_wait_tail_s(service_s: float, utilisation: float) -> float:
    """Mean wait of a request that finds the server busy, in a queue with ``service_s`` seconds of
    work per request and busy ``utilisation`` of the time (M/D/1: Pollaczek-Khinchine's mean wait
    rho x S / (2 (1 - rho)), all of it borne by the rho of requests that wait). Utilisation capped
    at ``MAX_QUEUE_UTILISATION``."""
    rho = min(MAX_QUEUE_UTILISATION, max(0.0, utilisation))
    return service_s / (2.0 * (1.0 - rho))


def queue_wait_p99_s(service_s: float, utilisation: float) -> float:
    """p99 of the wait before a request's prefill starts: no wait with probability 1 - rho, and
    exponential beyond with mean ``queue_wait_tail_s`` (the simulator's model of a replica), so
    P(wait > w) = rho x exp(-w / tail) and the p99 is tail x ln(100 rho); 0 when the server is busy
    1% of the time or less. An embedding replica at its capacity (80% busy) waits 11 prefills at
    p99: 62 ms for a 512-token prompt on L4, whose prefill is 5.7 ms."""
    rho = min(MAX_QUEUE_UTILISATION, max(0.0, utilisation))
    if rho * 100.0 <= 1.0:
        return 0.0
    return queue_wait_tail_s(service_s, rho) * math.log(100.0 * rho)


def _candidate_batches(hi: int) -> list[int]:
    out, b = [], 1
    while b < hi:
        out.append(b)
        b = b + 1 if b < 8 else int(b * 1.25)
    out.append(hi)
    return out


def architecture_for(source: str, override: Architecture | None = None) -> Architecture | None:
    """The architecture of a model: the spec's own figures, else the known table, else None."""
    if override is not None:
        return override
    return KNOWN_ARCHITECTURES.get(source)


def replica_perf(
    arch: Architecture,
    gpu_type: str,
    gpu_count: int,
    quantization: str | None = None,
    mem_fraction_static: float = 0.88,
) -> ReplicaPerf:
    """Performance of one replica; raises DoesNotFit when the weights leave no KV room."""
    spec = gpus.gpu(gpu_type)
    bytes_per_param = BYTES_PER_PARAM.get(quantization, 2.0)
    weights_bytes = arch.parameters_b * 1e9 * bytes_per_param
    usable = spec.memory_gib * GIB * mem_fraction_static * gpu_count
    kv_bytes_per_token = 2.0 * arch.layers * arch.kv_heads * arch.head_dim * 2.0
    kv_room = usable - weights_bytes
    # At least a few thousand tokens of KV, or the replica cannot serve a single long request.
    if kv_room < kv_bytes_per_token * 2048:
        raise DoesNotFit(
            f"{arch.parameters_b:g}B parameters need {weights_bytes / GIB:.0f} GiB of weights; "
            f"{gpu_count}x{gpu_type} offers {usable / GIB:.0f} GiB at mem fraction {mem_fraction_static:g}"
        )
    bandwidth = spec.bandwidth_gb_per_s * 1e9 * DECODE_BANDWIDTH_EFFICIENCY * gpu_count
    flops = spec.bf16_tflops * 1e12 * PREFILL_FLOPS_EFFICIENCY * gpu_count
    if bytes_per_param <= 1.0 and spec.fp8:
        flops *= 2.0
    return ReplicaPerf(
        gpu_type=gpu_type,
        gpu_count=gpu_count,
        weights_gib=weights_bytes / GIB,
        kv_bytes_per_token=kv_bytes_per_token,
        kv_budget_tokens=int(kv_room / kv_bytes_per_token),
        prefill_tokens_per_s=flops / (2.0 * arch.parameters_b * 1e9),
        weight_read_s=weights_bytes / bandwidth,
        kv_read_s_per_token=kv_bytes_per_token / bandwidth,
        is_embedding=arch.is_embedding,
    )


def fits(arch: Architecture, gpu_type: str, gpu_count: int, quantization: str | None = None,
         mem_fraction_static: float = 0.88) -> tuple[bool, str]:
    """Whether the model fits; the reason when it does not."""
    try:
        replica_perf(arch, gpu_type, gpu_count, quantization, mem_fraction_static)
    except DoesNotFit as exc:
        return False, str(exc)
    return True, ""


def min_gpus_to_fit(arch: Architecture, gpu_type: str, quantization: str | None = None,
                    mem_fraction_static: float = 0.88, max_gpus: int = 8) -> int | None:
    """The smallest power-of-two GPU count (tensor parallel) that holds the model, or None."""
    count = 1
    while count <= max_gpus:
        if fits(arch, gpu_type, count, quantization, mem_fraction_static)[0]:
            return count
        count *= 2
    return None


def ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b)) if b > 0 else 0
