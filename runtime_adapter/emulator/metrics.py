"""SGLang's /metrics, by SGLang's names, labels and buckets (0.5.23), in a private registry.

Scheduler gauges (labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank) are read from
the engine at scrape time; request counters and histograms (labels model_name, engine_type, and
is_streaming where SGLang has it) are updated as requests progress. Latencies are wall seconds as
measured, so with ``speedup`` S they are the model's latencies divided by S."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import prometheus_client as prom
from prometheus_client import core as prom_core

from runtime_adapter.emulator import engine as engine_mod

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
               0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
QUEUE_BUCKETS = (0.0, 0.001, 0.005, 0.010, 0.050, 0.100, 0.200, 0.500, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50,
                 60, 70, 80, 90, 100, 200, 300, 400, 500, 600)
TOKEN_BUCKETS = (100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500,
                 15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000, 200000,
                 300000, 400000, 600000, 800000, 1000000, 1100000)


class _SchedulerGauges:
    """A collector that reads the engine's state when /metrics is scraped."""

    def __init__(self, eng: engine_mod.Engine, labels: dict[str, str], context_len: int) -> None:
        self._engine = eng
        self._labels = labels
        self._context_len = context_len

    def collect(self) -> Iterator[prom_core.Metric]:
        s = self._engine.stats()
        names, values = list(self._labels), list(self._labels.values())
        budget = max(1, s.kv_budget_tokens)
        evictable = min(s.cache_tokens, max(0, s.kv_budget_tokens - s.kv_used_tokens))
        gauges = (
            ("num_running_reqs", "The number of running requests.", s.running),
            ("num_queue_reqs", "The number of requests in the waiting queue.", s.waiting),
            ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0),
            ("gen_throughput", "The generation throughput (token/s).", s.gen_throughput),
            ("cache_hit_rate", "The prefix cache hit rate.", s.cache_hit_rate),
            ("token_usage", "The token usage.", s.kv_used_tokens / budget),
            ("num_used_tokens", "The number of used tokens.", s.kv_used_tokens),
            ("kv_used_tokens", "KV cache tokens held by running requests.", s.kv_used_tokens),
            ("kv_available_tokens", "KV cache tokens free for new requests.",
             max(0, s.kv_budget_tokens - s.kv_used_tokens - evictable)),
            ("kv_evictable_tokens", "KV cache tokens held by the prefix cache only.", evictable),
            ("utilization", "Running requests over max running requests.", s.running / max(1, s.max_running_requests)),
            ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", s.kv_budget_tokens),
            ("context_len", "The context length of the model.", self._context_len),
        )
        for name, doc, value in gauges:
            g = prom_core.GaugeMetricFamily(f"sglang:{name}", doc, labels=names)
            g.add_metric(values, float(value))
            yield g


class EmulatorMetrics:
    """Implements engine.Observer; ``render()`` gives the /metrics body."""

    def __init__(self, eng: engine_mod.Engine, model_name: str, context_len: int) -> None:
        self.registry = prom.CollectorRegistry()
        r = self.registry
        sched_labels = {"model_name": model_name, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
                        "moe_ep_rank": "0"}
        self._tok = {"model_name": model_name, "engine_type": "unified"}
        r.register(_SchedulerGauges(eng, sched_labels, context_len))
        tok = list(self._tok)
        stream = [*tok, "is_streaming"]
        self.queue_time = prom.Histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.",
                                         list(sched_labels), buckets=QUEUE_BUCKETS, registry=r).labels(**sched_labels)
        self.startup_time = prom.Gauge("sglang:startup_time_seconds", "Engine startup duration by phase in seconds.",
                                       [*tok, "phase"], registry=r)
        self.prompt_tokens = prom.Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", stream, registry=r)
        self.generation_tokens = prom.Counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                                              stream, registry=r)
        self.cached_tokens = prom.Counter("sglang:cached_tokens_total",
                                          "Number of cached prompt tokens by source (device/host/storage).",
                                          [*tok, "cache_source"], registry=r)
        self.requests = prom.Counter("sglang:num_requests_total", "Number of requests processed.", stream, registry=r)
        self.aborted = prom.Counter("sglang:num_aborted_requests_total", "Number of requests aborted.", tok, registry=r)
        self.prompt_hist = prom.Histogram("sglang:prompt_tokens_histogram", "Histogram of prompt token length.", tok,
                                          buckets=TOKEN_BUCKETS, registry=r).labels(**self._tok)
        self.generation_hist = prom.Histogram("sglang:generation_tokens_histogram",
                                              "Histogram of generation token length.", tok, buckets=TOKEN_BUCKETS,
                                              registry=r).labels(**self._tok)
        self.ttft = prom.Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                   stream, buckets=TTFT_BUCKETS, registry=r)
        self.itl = prom.Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                                  tok, buckets=ITL_BUCKETS, registry=r).labels(**self._tok)
        self.tpot = prom.Histogram("sglang:request_time_per_output_token_seconds",
                                   "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
                                   stream, buckets=ITL_BUCKETS, registry=r)
        self.e2e = prom.Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                                  stream, buckets=E2E_BUCKETS, registry=r)
        self._streaming = {True: {**self._tok, "is_streaming": "true"}, False: {**self._tok, "is_streaming": "false"}}

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)

    def set_startup_phase(self, phase: str, seconds: float) -> None:
        self.startup_time.labels(**self._tok, phase=phase).set(seconds)

    # ----- engine.Observer ------------------------------------------------------------------------
    def on_admitted(self, req: engine_mod.GenRequest, queue_s: float) -> None:
        self.queue_time.observe(queue_s)

    def on_first_token(self, req: engine_mod.GenRequest, ttft_s: float) -> None:
        self.ttft.labels(**self._streaming[req.stream]).observe(ttft_s)

    def on_decode_step(self, batch: Sequence[engine_mod.GenRequest], now_s: float) -> None:
        observe = self.itl.observe
        for req in batch:
            observe(now_s - req.last_token_s)

    def on_finished(self, req: engine_mod.GenRequest) -> None:
        labels = self._streaming[req.stream]
        self.prompt_tokens.labels(**labels).inc(req.prompt_tokens)
        self.generation_tokens.labels(**labels).inc(req.generated)
        if req.cached_tokens:
            self.cached_tokens.labels(**self._tok, cache_source="device").inc(req.cached_tokens)
        self.requests.labels(**labels).inc()
        self.prompt_hist.observe(req.prompt_tokens)
        self.generation_hist.observe(req.generated)
        if req.finished_s is not None:
            self.e2e.labels(**labels).observe(req.finished_s - req.arrival_s)
            if req.first_token_s is not None and req.generated > 1:
                self.tpot.labels(**labels).observe((req.finished_s - req.first_token_s) / (req.generated - 1))

    def on_aborted(self, req: engine_mod.GenRequest) -> None:
        self.aborted.labels(**self._tok).inc()

