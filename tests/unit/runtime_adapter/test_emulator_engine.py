"""The emulator's performance model, driven by a virtual clock so model times are exact."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from meridian import capacity
from runtime_adapter import clock as clock_mod
from runtime_adapter.emulator import engine as engine_mod
from runtime_adapter.emulator import tokens

LLAMA_8B = capacity.KNOWN_ARCHITECTURES["meta-llama/Llama-3.1-8B-Instruct"]


def perf_of(gpu: str = "L4") -> capacity.ReplicaPerf:
    return capacity.replica_perf(LLAMA_8B, gpu, 1)


def request(prompt_tokens: int, out_tokens: int = 4, *, prefix: str = "p", rid: str = "r") -> engine_mod.GenRequest:
    prompt = [f"{prefix}{i}" for i in range(prompt_tokens)]
    return engine_mod.GenRequest(rid=rid, prompt=prompt, max_new_tokens=out_tokens, stop_after=out_tokens,
                                 finish_type="length", seed=1)


async def finish(engine: engine_mod.Engine, reqs: list[engine_mod.GenRequest]) -> None:
    """Submit ``reqs`` to a running engine and wait for all of them."""
    for r in reqs:
        engine.submit(r)

    async def done(r: engine_mod.GenRequest) -> None:
        while not r.finished:
            await r.progress.wait()
            r.progress.clear()

    await asyncio.wait_for(asyncio.gather(*(done(r) for r in reqs)), timeout=30)


async def run_all(engine: engine_mod.Engine, *batches: list[engine_mod.GenRequest]) -> None:
    """Run the engine loop through ``batches``, one after the other."""
    task = asyncio.create_task(engine.run())
    try:
        for reqs in batches:
            await finish(engine, reqs)
    finally:
        engine.close()
        await asyncio.wait_for(task, timeout=5)


def make_engine(perf: capacity.ReplicaPerf | None = None, **kw) -> tuple[engine_mod.Engine, clock_mod.VirtualClock]:
    clock = clock_mod.VirtualClock()
    kw.setdefault("max_running_requests", 64)
    return engine_mod.Engine(perf or perf_of(), clock=clock, **kw), clock


def ttft(r: engine_mod.GenRequest) -> float:
    assert r.first_token_s is not None
    return r.first_token_s - r.arrival_s


async def test_ttft_on_idle_replica_is_the_prefill_time():
    """An idle replica's TTFT is prompt tokens / prefill throughput of the capacity model."""
    perf = perf_of()
    engine, _ = make_engine(perf, chunked_prefill_size=1024)
    r = request(3000)
    await run_all(engine, [r])
    assert ttft(r) == pytest.approx(3000 / perf.prefill_tokens_per_s)


async def test_ttft_grows_with_prompt_length():
    """A long prompt waits longer for its first token than a short one."""
    short, long_ = request(50, rid="s"), request(4000, prefix="q", rid="l")
    engine, _ = make_engine()
    await run_all(engine, [short])
    engine2, _ = make_engine()
    await run_all(engine2, [long_])
    assert ttft(long_) > 20 * ttft(short)


async def test_ttft_grows_with_queue_depth():
    """With one running slot, each queued request's TTFT includes the requests ahead of it."""
    engine, _ = make_engine(max_running_requests=1)
    reqs = [request(500, 8, prefix=f"x{i}_", rid=f"r{i}") for i in range(4)]
    await run_all(engine, reqs)
    ttfts = [ttft(r) for r in reqs]
    assert ttfts == sorted(ttfts) and len(set(ttfts)) == 4
    single_e2e = reqs[0].finished_s - reqs[0].arrival_s
    assert ttfts[3] >= 3 * single_e2e


async def test_prefix_cache_hit_cuts_ttft():
    """A prompt that extends a cached one skips the cached part of its prefill."""
    engine, _ = make_engine()
    first = request(4000, rid="a")
    second = engine_mod.GenRequest(rid="b", prompt=list(first.prompt) + ["tail1", "tail2"], max_new_tokens=4,
                                   stop_after=4, finish_type="length", seed=1)
    await run_all(engine, [first], [second])
    assert second.cached_tokens == 4000
    assert ttft(second) < ttft(first) / 50


async def test_disabled_prefix_cache_never_hits():
    """--disable-radix-cache: a repeated prompt is prefilled in full again."""
    engine, _ = make_engine(enable_prefix_cache=False)
    a, b = request(2000, rid="a"), request(2000, rid="b")
    await run_all(engine, [a], [b])
    assert b.cached_tokens == 0
    assert ttft(b) == pytest.approx(ttft(a))


async def test_decode_steps_follow_the_capacity_model():
    """Time between first and last token is the sum of decode_step_s at the batch's KV size."""
    perf = perf_of("H100")
    engine, _ = make_engine(perf)
    r = request(100, 11)
    await run_all(engine, [r])
    expected = sum(perf.decode_step_s(1, 100 + generated) for generated in range(1, 11))
    assert r.finished_s - r.first_token_s == pytest.approx(expected)
    assert r.generated == 11


async def test_kv_budget_holds_back_admission():
    """A request whose KV need does not fit next to the running one waits for it to finish."""
    perf = dataclasses.replace(perf_of(), kv_budget_tokens=1000)
    engine, _ = make_engine(perf)
    a, b = request(500, 100, prefix="a", rid="a"), request(500, 100, prefix="b", rid="b")
    await run_all(engine, [a, b])
    assert b.admitted_s is not None and a.finished_s is not None
    assert b.admitted_s >= a.finished_s


async def test_queue_limit_refuses_requests():
    """Past --max-queued-requests, submit raises QueueFull (HTTP 503)."""
    engine, _ = make_engine(max_queued_requests=1)
    engine.submit(request(10, rid="a"))
    with pytest.raises(engine_mod.QueueFull):
        engine.submit(request(10, rid="b"))


async def test_request_larger_than_kv_budget_is_refused():
    """A request that can never fit the KV budget is refused at submit (HTTP 400)."""
    perf = dataclasses.replace(perf_of(), kv_budget_tokens=100)
    engine, _ = make_engine(perf)
    with pytest.raises(engine_mod.TooLarge, match="100"):
        engine.submit(request(90, 20))


async def test_abort_releases_the_slot():
    """An aborted running request frees its slot and KV so the next one is admitted."""
    engine, _ = make_engine(max_running_requests=1)
    a, b = request(10, 10_000, rid="a"), request(10, 3, prefix="b", rid="b")
    task = asyncio.create_task(engine.run())
    engine.submit(a)
    engine.submit(b)
    for _ in range(50):
        await asyncio.sleep(0)
    assert a.generated > 0 and b.admitted_s is None
    engine.abort(a)
    while not b.finished:
        await b.progress.wait()
        b.progress.clear()
    engine.close()
    await task
    assert a.abort_reason and b.generated == 3 and engine.outstanding == 0


async def test_slowdown_fault_scales_model_time():
    """The slowdown fault multiplies prefill and decode times."""
    base, _ = make_engine()
    slow, _ = make_engine(slowdown=lambda: 3.0)
    a, b = request(1000, 5, rid="a"), request(1000, 5, rid="b")
    await run_all(base, [a])
    await run_all(slow, [b])
    assert ttft(b) == pytest.approx(3 * ttft(a))
    assert b.finished_s - b.arrival_s == pytest.approx(3 * (a.finished_s - a.arrival_s))


async def test_hang_fault_stops_progress_until_cleared():
    """While the hang fault is set nothing progresses; clearing it resumes the request."""
    hung = {"on": True}
    engine, clock = make_engine(hang=lambda: hung["on"])
    r = request(10, 3)
    task = asyncio.create_task(engine.run())
    engine.submit(r)
    for _ in range(100):
        await asyncio.sleep(0)
    assert r.generated == 0 and clock.monotonic() > 1.0
    hung["on"] = False
    while not r.finished:
        await r.progress.wait()
        r.progress.clear()
    engine.close()
    await task
    assert r.generated == 3


async def test_stats_report_load():
    """stats() counts running and waiting requests and KV use while work is in flight."""
    engine, _ = make_engine(max_running_requests=2)
    reqs = [request(100, 50, prefix=f"s{i}", rid=str(i)) for i in range(5)]
    for r in reqs:
        engine.submit(r)
    engine._admit()
    s = engine.stats()
    assert (s.running, s.waiting) == (2, 3)
    assert s.kv_used_tokens == 200 and s.kv_budget_tokens == engine.perf.kv_budget_tokens


def test_default_max_running_requests_is_bounded():
    """The default batch limit grows with the KV budget and stays within 16..1024."""
    base = perf_of("L4")
    tiny, mid, huge = (dataclasses.replace(base, kv_budget_tokens=n) for n in (1_000, 200_000, 10_000_000))
    assert engine_mod.default_max_running_requests(tiny, 32768) == 16
    assert engine_mod.default_max_running_requests(mid, 32768) == 97
    assert engine_mod.default_max_running_requests(huge, 32768) == 1024


def test_tokenizer_is_consistent_with_filler_output():
    """Re-tokenizing generated text gives back the generated token count."""
    text = tokens.output_text(12345, 0, 37)
    assert tokens.count(text) == 37
    assert tokens.count("Hello world, how are you?") == len(tokens.tokenize("Hello world, how are you?")) > 4
