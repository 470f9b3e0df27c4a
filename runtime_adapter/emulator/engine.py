"""The emulator's scheduler: continuous batching driven by ``meridian.capacity``.

Each iteration runs one prefill chunk (up to ``chunked_prefill_size`` uncached prompt tokens of
admitted requests; prefix-cache hits are skipped) and one decode step for the running batch, then
sleeps their model time: prefill tokens / ``prefill_tokens_per_s`` plus ``decode_step_s(batch,
kv_tokens)``, times the slowdown fault, divided by ``speedup``. Requests are admitted FCFS while the
batch is below ``max_running_requests`` and their KV need (prompt + output) fits the budget;
otherwise they wait in the queue, and past ``max_queued_requests`` they are refused. A request's
first token comes out of its prefill; each decode step gives every running request one more.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from meridian import capacity
from runtime_adapter import clock as clock_mod
from runtime_adapter.emulator import radix, tokens

log = logging.getLogger(__name__)

THROUGHPUT_WINDOW_S = 5.0
HIT_RATE_WINDOW_REQUESTS = 256
# When the loop falls behind (CPU-bound at high speedup), forget lateness beyond this.
MAX_LATENESS_S = 0.05


class QueueFull(Exception):
    """The waiting queue is at --max-queued-requests (SGLang: 'The request queue is full.')."""


class TooLarge(ValueError):
    """The request can never fit this replica's KV budget."""


@dataclasses.dataclass(eq=False)
class GenRequest:
    """One generation (or embedding) request as the engine sees it. Times are clock seconds."""

    rid: str
    prompt: Sequence[tokens.Token]
    max_new_tokens: int
    stop_after: int  # tokens this request will generate (<= max_new_tokens)
    finish_type: str  # "stop" | "length"
    seed: int
    is_embedding: bool = False
    stream: bool = False
    log_metrics: bool = True
    arrival_s: float = 0.0
    admitted_s: float | None = None
    cached_tokens: int = 0
    prefilled: int = 0
    generated: int = 0
    first_token_s: float | None = None
    last_token_s: float = 0.0
    finished_s: float | None = None
    abort_reason: str = ""
    progress: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)

    @property
    def uncached(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def finished(self) -> bool:
        return self.finished_s is not None or bool(self.abort_reason)

    @property
    def kv_need(self) -> int:
        return self.prompt_tokens + (0 if self.is_embedding else self.stop_after)


class Observer(Protocol):
    """Hooks for metrics (the engine itself stays free of Prometheus)."""

    def on_admitted(self, req: GenRequest, queue_s: float) -> None: ...
    def on_first_token(self, req: GenRequest, ttft_s: float) -> None: ...
    def on_decode_step(self, batch: Sequence[GenRequest], now_s: float) -> None: ...
    def on_finished(self, req: GenRequest) -> None: ...
    def on_aborted(self, req: GenRequest) -> None: ...


class NullObserver:
    def on_admitted(self, req: GenRequest, queue_s: float) -> None:
        return None

    def on_first_token(self, req: GenRequest, ttft_s: float) -> None:
        return None

    def on_decode_step(self, batch: Sequence[GenRequest], now_s: float) -> None:
        return None

    def on_finished(self, req: GenRequest) -> None:
        return None

    def on_aborted(self, req: GenRequest) -> None:
        return None


@dataclasses.dataclass(frozen=True)
class EngineStats:
    running: int
    waiting: int
    kv_used_tokens: int
    kv_budget_tokens: int
    cache_tokens: int
    gen_throughput: float
    cache_hit_rate: float
    max_running_requests: int
    waiting_uncached_tokens: int


class Engine:
    """Continuous-batching scheduler over a ReplicaPerf. ``run()`` is its loop (one task)."""

    def __init__(
        self,
        perf: capacity.ReplicaPerf,
        *,
        max_running_requests: int,
        max_queued_requests: int = 0,
        chunked_prefill_size: int = 8192,
        enable_prefix_cache: bool = True,
        speedup: float = 1.0,
        slowdown: Callable[[], float] = lambda: 1.0,
        hang: Callable[[], bool] = lambda: False,
        clock: clock_mod.Clock | None = None,
        observer: Observer | None = None,
    ) -> None:
        if max_running_requests < 1:
            raise ValueError(f"max_running_requests={max_running_requests} must be >= 1")
        self.perf = perf
        self.max_running_requests = max_running_requests
        self.max_queued_requests = max_queued_requests
        self.chunked_prefill_size = chunked_prefill_size
        self.speedup = speedup
        self._slowdown = slowdown
        self._hang = hang
        self._clock = clock or clock_mod.SystemClock()
        self.observer = observer or NullObserver()
        self.cache = radix.PrefixCache(perf.kv_budget_tokens if enable_prefix_cache else 0)
        self._enable_cache = enable_prefix_cache
        self._waiting: collections.deque[GenRequest] = collections.deque()
        self._prefilling: list[GenRequest] = []
        self._running: list[GenRequest] = []
        self._kv_reserved = 0
        self._wake = asyncio.Event()
        self._closed = False
        self._throughput: collections.deque[tuple[float, int]] = collections.deque()
        self._hits: collections.deque[tuple[int, int]] = collections.deque(maxlen=HIT_RATE_WINDOW_REQUESTS)
        self.last_output_s = 0.0
        self.steps = 0

    # ----- requests ---------------------------------------------------------------------------
    def submit(self, req: GenRequest) -> None:
        """Queue ``req``; raises QueueFull or TooLarge (the HTTP layer maps them to 503 / 400)."""
        if req.kv_need > self.perf.kv_budget_tokens:
            raise TooLarge(f"The request needs {req.kv_need} KV cache tokens but this replica holds "
                           f"{self.perf.kv_budget_tokens} (max_total_num_tokens).")
        if self.max_queued_requests and len(self._waiting) + 1 > self.max_queued_requests:
            raise QueueFull("The request queue is full.")
        req.arrival_s = self._clock.monotonic()
        self._waiting.append(req)
        self._wake.set()

    def abort(self, req: GenRequest, reason: str = "client disconnected") -> None:
        """Drop a request wherever it is (client went away); frees its KV reservation."""
        if req.finished:
            return
        req.abort_reason = reason
        if req in self._waiting:
            self._waiting.remove(req)
        else:
            for batch in (self._prefilling, self._running):
                if req in batch:
                    batch.remove(req)
                    self._kv_reserved -= req.kv_need
        if req.log_metrics:
            self.observer.on_aborted(req)
        req.progress.set()

    @property
    def outstanding(self) -> int:
        return len(self._waiting) + len(self._prefilling) + len(self._running)

    def stats(self) -> EngineStats:
        now = self._clock.monotonic()
        self._trim_throughput(now)
        generated = sum(n for _t, n in self._throughput)
        hits_cached = sum(c for c, _p in self._hits)
        hits_prompt = sum(p for _c, p in self._hits)
        kv_used = sum(r.prompt_tokens + r.generated for r in self._prefilling) + \
            sum(r.prompt_tokens + r.generated for r in self._running)
        return EngineStats(
            running=len(self._prefilling) + len(self._running),
            waiting=len(self._waiting),
            kv_used_tokens=kv_used,
            kv_budget_tokens=self.perf.kv_budget_tokens,
            cache_tokens=self.cache.size_tokens,
            gen_throughput=generated / THROUGHPUT_WINDOW_S,
            cache_hit_rate=(hits_cached / hits_prompt) if hits_prompt else 0.0,
            max_running_requests=self.max_running_requests,
            waiting_uncached_tokens=sum(r.prompt_tokens for r in self._waiting),
        )

    def close(self, reason: str = "server shutting down") -> None:
        """Stop the loop and abort every outstanding request (their handlers answer at once)."""
        self._closed = True
        for req in [*self._waiting, *self._prefilling, *self._running]:
            self.abort(req, reason)
        self._wake.set()

    def flush_cache(self) -> None:
        self.cache.reset()

    # ----- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        next_t = self._clock.monotonic()
        while not self._closed:
            if self._hang():
                await self._clock.sleep(0.05)  # injected hang: no progress at all
                next_t = self._clock.monotonic()
                continue
            self._admit()
            if not self._prefilling and not self._running:
                self._wake.clear()
                await self._wake.wait()
                next_t = self._clock.monotonic()
                continue
            prefill_plan = self._plan_prefill()
            decode_batch = list(self._running)
            model_s = sum(take for _r, take in prefill_plan) / self.perf.prefill_tokens_per_s
            if decode_batch:
                kv_tokens = sum(r.prompt_tokens + r.generated for r in decode_batch)
                model_s += self.perf.decode_step_s(len(decode_batch), kv_tokens)
            real_s = model_s * self._slowdown() / self.speedup
            now = self._clock.monotonic()
            next_t = max(next_t, now - MAX_LATENESS_S) + real_s
            await self._clock.sleep(max(0.0, next_t - now))
            self._apply(prefill_plan, decode_batch, self._clock.monotonic())

    def _admit(self) -> None:
        budget = self.perf.kv_budget_tokens
        while self._waiting and len(self._prefilling) + len(self._running) < self.max_running_requests:
            req = self._waiting[0]
            if self._kv_reserved + req.kv_need > budget:
                break
            self._waiting.popleft()
            self._kv_reserved += req.kv_need
            if self._enable_cache and not req.is_embedding:
                # At least the last prompt token is always computed (it yields the first token).
                req.cached_tokens = min(self.cache.match(req.prompt), max(0, req.prompt_tokens - 1))
            now = self._clock.monotonic()
            req.admitted_s = now
            self._hits.append((req.cached_tokens, req.prompt_tokens))
            if req.log_metrics:
                self.observer.on_admitted(req, now - req.arrival_s)
            self._prefilling.append(req)

    def _plan_prefill(self) -> list[tuple[GenRequest, int]]:
        plan, room = [], self.chunked_prefill_size
        for req in self._prefilling:
            if room <= 0:
                break
            take = min(req.uncached - req.prefilled, room)
            plan.append((req, take))
            room -= take
        return plan

    def _apply(self, prefill_plan: list[tuple[GenRequest, int]], decode_batch: list[GenRequest], now: float) -> None:
        self.steps += 1
        produced = 0
        if decode_batch:
            # Before last_token_s moves: the observer reads each request's gap since its last token.
            self.observer.on_decode_step([r for r in decode_batch if r.log_metrics and not r.finished], now)
        for req in decode_batch:
            if req.finished:
                continue
            req.last_token_s = now
            req.generated += 1
            produced += 1
            req.progress.set()
            if req.generated >= req.stop_after:
                self._finish(req, now)
        if decode_batch:
            self._running = [r for r in self._running if not r.finished]
        for req, take in prefill_plan:
            if req.finished:
                continue
            req.prefilled += take
            if req.prefilled < req.uncached:
                continue
            self._prefilling.remove(req)
            if self._enable_cache and not req.is_embedding:
                self.cache.capacity_tokens = max(0, self.perf.kv_budget_tokens - self._kv_reserved)
                self.cache.insert(req.prompt)
            req.first_token_s = req.last_token_s = now
            if req.log_metrics:
                self.observer.on_first_token(req, now - req.arrival_s)
            if req.is_embedding:
                self._finish(req, now)
                continue
            req.generated = 1
            produced += 1
            req.progress.set()
            if req.generated >= req.stop_after:
                self._finish(req, now)
            else:
                self._running.append(req)
        if produced:
            self.last_output_s = now
            self._throughput.append((now, produced))
            self._trim_throughput(now)

    def _finish(self, req: GenRequest, now: float) -> None:
        req.finished_s = now
        self._kv_reserved -= req.kv_need
        if req.log_metrics:
            self.observer.on_finished(req)
        req.progress.set()
        self.last_output_s = now

    def _trim_throughput(self, now: float) -> None:
        while self._throughput and self._throughput[0][0] < now - THROUGHPUT_WINDOW_S:
            self._throughput.popleft()


def default_max_running_requests(perf: capacity.ReplicaPerf, context_length: int) -> int:
    """SGLang sizes its request pool from the KV budget; here: room for requests of ~2k tokens,
    at least 16 and at most 1024."""
    del context_length
    return max(16, min(1024, perf.kv_budget_tokens // 2048))
