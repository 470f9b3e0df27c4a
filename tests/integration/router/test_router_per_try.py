"""Per-try time to first byte over loopback: one of three SGLang emulator replicas hangs under load
(the case issue 17 measured) and no request fails; a stream that sent its first byte is never
retried; the last try is never cut short by its limit."""

from __future__ import annotations

import asyncio
import contextlib
import time

import openai
import pytest

from router import proxy, testing
from runtime_adapter.emulator import config as emu_config
from runtime_adapter.emulator import server as emu_server

MODEL = "tiny"
# The deployment's targets as the table carries them: 3 x 300 ms = 0.9 s, floored at 1 s for a
# stream's first byte; a non-streaming answer of 8 tokens adds 8 x 3 x 20 ms.
TTFT_MS, TPOT_MS = 300.0, 20.0
CLIENT_TIMEOUT_S = 5.0


@pytest.fixture
async def emulators():
    """Three emulator replicas in this process (their faults are set directly)."""
    async with contextlib.AsyncExitStack() as stack:
        servers = []
        for _ in range(3):
            cfg = emu_config.EmulatorConfig(model_path="Qwen/Qwen2.5-0.5B-Instruct", served_model_name=MODEL, port=0,
                                            skip_server_warmup=True, startup_delay_s=0, warmup_s=0, speedup=20)
            servers.append(await stack.enter_async_context(emu_server.serve(cfg)))
        yield servers


async def _load(port: int, stop: asyncio.Event, unary: list, streams: list, workers: int = 6) -> None:
    """Non-streaming and streaming chat requests from the openai SDK until ``stop`` is set.
    ``unary``: (start, ok, seconds or error); ``streams``: (start, first chunk at or None, ok, detail)."""
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0,
                                timeout=CLIENT_TIMEOUT_S)

    async def one_unary(i: int) -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                reply = await client.chat.completions.create(
                    model=MODEL, max_tokens=8, messages=[{"role": "user", "content": f"question {i} {t0}"}])
                unary.append((t0, bool(reply.choices[0].message.content), time.monotonic() - t0))
            except openai.OpenAIError as exc:
                unary.append((t0, False, repr(exc)))

    async def one_stream(i: int) -> None:
        while not stop.is_set():
            t0, first, pieces = time.monotonic(), None, 0
            try:
                stream = await client.chat.completions.create(
                    model=MODEL, max_tokens=8, stream=True, messages=[{"role": "user", "content": f"stream {i} {t0}"}])
                finished = False
                async for chunk in stream:
                    first = first or time.monotonic()
                    pieces += 1
                    finished = finished or bool(chunk.choices and chunk.choices[0].finish_reason)
                streams.append((t0, first, finished, pieces))
            except openai.OpenAIError as exc:
                streams.append((t0, first, False, repr(exc)))

    try:
        await asyncio.gather(*(one_unary(i) for i in range(workers)), *(one_stream(i) for i in range(2)))
    finally:
        await client.close()


HANG_TAKES_HOLD_S = 0.25


async def _hang_one_under_load(emulators, router) -> tuple[float, list, list]:
    stop, unary, streams = asyncio.Event(), [], []
    runner = asyncio.create_task(_load(router.port, stop, unary, streams))
    await asyncio.sleep(1.0)
    hung_at = time.monotonic()
    emulators[0].faults = emu_config.FaultConfig(hang=True)
    await asyncio.sleep(4.0)
    stop.set()
    await runner
    return hung_at, unary, streams


def _router_table(emulators):
    return testing.table(1, {MODEL: [testing.replica(f"e{i}", int(s.url.rsplit(":", 1)[1]))
                                     for i, s in enumerate(emulators)]}, ttft_p99_ms=TTFT_MS, tpot_p99_ms=TPOT_MS)


async def test_one_hung_replica_of_three_fails_no_request(emulators, make_router):
    """With one of three replicas hung under load (health checks off, so only the per-try limit can
    help), every non-streaming request succeeds, none waits for the client's timeout, and every
    stream that had not started on the hung replica completes."""
    router = await make_router(_router_table(emulators))
    hung_at, unary, streams = await _hang_one_under_load(emulators, router)
    failed = [u for u in unary if not u[1]]
    assert len(unary) > 50 and not failed, (len(unary), failed[:3])
    assert max(u[2] for u in unary) < CLIENT_TIMEOUT_S - 1.0
    # Streams that got no byte, and streams sent after the hang took hold (the emulator's engine
    # sees the flag at its next step, 50 ms; a chunk it made before may still arrive after
    # hung_at, and a stream past its first byte is never retried, by design).
    started_after = [s for s in streams if s[1] is None or s[0] > hung_at + HANG_TAKES_HOLD_S]
    assert started_after and all(s[2] for s in started_after), [s for s in started_after if not s[2]][:3]
    assert router.metrics.retries[(MODEL, proxy.FIRST_BYTE_TIMEOUT)] >= 1


async def test_without_the_per_try_limit_a_hung_replica_holds_requests(emulators, make_router):
    """The same fault with the per-try limit off: requests sent to the hung replica wait until the
    client gives up (what issue 17 measured), so the limit above is what made the difference."""
    router = await make_router(_router_table(emulators), retry={"per_try_ttft_multiplier": 0})
    _, unary, _ = await _hang_one_under_load(emulators, router)
    assert any(not ok for _, ok, _ in unary), "no request waited on the hung replica"


async def test_a_stream_that_sent_its_first_byte_is_never_retried(replicas, make_router, http):
    """A stream past its first byte that then stalls beyond the per-try limit is relayed to its end
    from the same replica: nothing is retried once the client has bytes."""
    reps = await replicas(2, tokens=4)
    for rep in reps:
        rep.gate = True  # the last delta waits for hold_last
    router = await make_router(testing.table(1, {"m": [testing.replica(f"r{i}", r.port) for i, r in enumerate(reps)]},
                                             ttft_p99_ms=50.0), retry={"per_try_floor_s": 0.2})
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        await resp.content.readuntil(b"\n\n")  # the first event
        await asyncio.sleep(0.6)  # 3x the per-try limit with nothing more
        for rep in reps:
            rep.hold_last.set()
        text = (await resp.read()).decode()
    assert text.count("t3") == 1 and text.rstrip().endswith("data: [DONE]")
    assert sum(r.requests for r in reps) == 1
    assert router.metrics.retries[("m", proxy.FIRST_BYTE_TIMEOUT)] == 0


async def test_a_try_past_its_limit_moves_on_but_the_last_try_waits(replicas, make_router, http):
    """Two slow replicas: the first try is abandoned at its limit (its replica sees the connection
    close) and the second, the last allowed, is answered late rather than failed."""
    reps = await replicas(2)
    for rep in reps:
        rep.delay_s = 0.6
    router = await make_router(testing.table(1, {"m": [testing.replica(f"r{i}", r.port) for i, r in enumerate(reps)]},
                                             ttft_p99_ms=50.0, tpot_p99_ms=10.0),
                               retry={"per_try_floor_s": 0.2, "max_attempts": 2})
    body = {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    t0 = time.monotonic()
    async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
    elapsed = time.monotonic() - t0
    assert 0.8 < elapsed < 2.0, elapsed  # ~0.32 s abandoned + 0.6 s answered
    assert [r.requests for r in reps] == [1, 1]
    assert sorted(r.disconnects for r in reps) == [0, 1]
    assert router.metrics.retries[("m", proxy.FIRST_BYTE_TIMEOUT)] == 1


async def test_a_lone_slow_replica_is_answered_late_not_failed(replicas, make_router, http):
    """With no other replica to retry on, a try past its limit goes on waiting for its answer."""
    (rep,) = await replicas(1)
    rep.delay_s = 0.5
    router = await make_router(testing.table(1, {"m": [testing.replica("r0", rep.port)]}, ttft_p99_ms=50.0),
                               retry={"per_try_floor_s": 0.2})
    body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
    assert rep.requests == 1 and rep.disconnects == 0
