"""Client traffic for the demo and end-to-end tests, sent with the official ``openai`` SDK.

One ``AsyncOpenAI`` client per client region; each request carries the region in the
``x-meridian-client-region`` header (the router trusts it when told to, as it would from an edge
proxy). Arrivals are Poisson at a rate the caller schedules (spikes are just a higher rate).
Every request is recorded: time to first token, total time, tokens, and any error."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping

import openai

log = logging.getLogger("meridian.demo.traffic")
REGION_HEADER = "x-meridian-client-region"
PROMPTS = (
    "Summarise the trade-offs of running inference across several clouds.",
    "Write a haiku about GPUs waiting in a queue.",
    "Explain continuous batching to a new engineer in three sentences.",
    "List five ways to reduce time to first token for a chat model.",
    "What does a spot interruption notice mean for a serving fleet?",
)
SYSTEM = "You are a concise assistant for an infrastructure team. " * 8  # a shared prefix


@dataclasses.dataclass(frozen=True)
class ModelTraffic:
    """One model's share of traffic."""

    model: str
    share: float
    embedding: bool = False
    max_tokens: int = 48
    stream: bool = True


@dataclasses.dataclass(frozen=True)
class Record:
    """One request: wall time it started, model, client region, success, time to first token (an
    embedding's: its response's arrival) and total time in seconds, completion tokens, error."""

    started_s: float
    model: str
    region: str
    ok: bool
    ttft_s: float | None
    total_s: float
    completion_tokens: int
    error: str = ""


class Recorder:
    """Every finished request, in order; the demo's view and report read from here."""

    def __init__(self) -> None:
        self.records: list[Record] = []

    def add(self, record: Record) -> None:
        self.records.append(record)

    def since(self, t_s: float) -> list[Record]:
        out = []
        for r in reversed(self.records):
            if r.started_s < t_s:
                break
            out.append(r)
        return out


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q / 100.0 * (len(ordered) - 1)))))
    return ordered[index]


class TrafficGenerator:
    """Sends Poisson traffic per client region until stopped."""

    def __init__(self, base_url: str | Mapping[str, str], api_key: str, regions: list[str], models: list[ModelTraffic],
                 rate_rps: Callable[[str, float], float], recorder: Recorder, *,
                 max_in_flight: int = 64, seed: int = 7, timeout_s: float = 30.0):
        self._regions = regions
        self._models = models
        self._rate = rate_rps
        self._recorder = recorder
        self._rng = random.Random(seed)
        self._slots = asyncio.Semaphore(max_in_flight)
        # ``base_url``: one endpoint, or one per client region (its edge router).
        urls = {r: base_url if isinstance(base_url, str) else base_url[r] for r in regions}
        self._clients = {
            r: openai.AsyncOpenAI(base_url=f"{urls[r].rstrip('/')}/v1", api_key=api_key, max_retries=0,
                                  timeout=timeout_s, default_headers={REGION_HEADER: r})
            for r in regions
        }
        self._tasks: set[asyncio.Task] = set()
        self.dropped = 0  # arrivals not sent because max_in_flight was reached

    async def run(self, duration_s: float) -> None:
        started = time.monotonic()
        loops = [asyncio.create_task(self._region_loop(r, started, duration_s)) for r in self._regions]
        try:
            await asyncio.gather(*loops)
            if self._tasks:
                await asyncio.wait(self._tasks, timeout=30)
        finally:
            for t in loops + list(self._tasks):
                t.cancel()
            for client in self._clients.values():
                await client.close()

    async def _region_loop(self, region: str, started: float, duration_s: float) -> None:
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= duration_s:
                return
            rate = max(0.0, self._rate(region, elapsed))
            if rate <= 0:
                await asyncio.sleep(0.5)
                continue
            await asyncio.sleep(self._rng.expovariate(rate))
            if self._slots.locked():
                self.dropped += 1
                continue
            model = self._pick_model()
            task = asyncio.create_task(self._one(region, model))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _pick_model(self) -> ModelTraffic:
        x = self._rng.random() * sum(m.share for m in self._models)
        for m in self._models:
            x -= m.share
            if x <= 0:
                return m
        return self._models[-1]

    async def _one(self, region: str, model: ModelTraffic) -> None:
        async with self._slots:
            client = self._clients[region]
            start_wall = time.time()
            t0 = time.monotonic()
            ttft = None
            tokens = 0
            try:
                if model.embedding:
                    # An embedding's first (and only) token is its answer: TTFT is when the response
                    # has arrived, before the SDK turns 1024 floats into Python objects (tens of ms of
                    # this client's CPU on a loaded machine, not the service's latency); it is then
                    # parsed, so a malformed answer still fails the request.
                    raw = await client.embeddings.with_raw_response.create(model=model.model,
                                                                          input=self._rng.choice(PROMPTS))
                    ttft = time.monotonic() - t0
                    if not raw.parse().data:
                        raise openai.APIResponseValidationError(raw.http_response, None, message="no embedding")
                elif model.stream:
                    stream = await client.chat.completions.create(
                        model=model.model, stream=True, max_tokens=model.max_tokens,
                        stream_options={"include_usage": True},
                        messages=[{"role": "system", "content": SYSTEM},
                                  {"role": "user", "content": self._rng.choice(PROMPTS)}])
                    async for chunk in stream:
                        if chunk.choices and chunk.choices[0].delta.content and ttft is None:
                            ttft = time.monotonic() - t0
                        if chunk.usage is not None:
                            tokens = chunk.usage.completion_tokens
                else:
                    resp = await client.chat.completions.create(
                        model=model.model, max_tokens=model.max_tokens,
                        messages=[{"role": "user", "content": self._rng.choice(PROMPTS)}])
                    ttft = time.monotonic() - t0
                    tokens = resp.usage.completion_tokens if resp.usage else 0
                self._recorder.add(Record(start_wall, model.model, region, True, ttft, time.monotonic() - t0, tokens))
            except (openai.OpenAIError, asyncio.TimeoutError) as exc:
                self._recorder.add(Record(start_wall, model.model, region, False, ttft, time.monotonic() - t0, tokens,
                                          f"{type(exc).__name__}: {str(exc)[:200]}"))
