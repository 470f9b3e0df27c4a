"""Each of the client's three timeouts fires at its own limit, names itself, and is retried only
when nothing of an answer had arrived. Bounds are generous (the machine is shared) but each
excludes the other limits."""

from __future__ import annotations

import asyncio
import time

import pytest

from meridian import client as mc
from tests.integration.client import faults
from tests.integration.client.faults import Step

MSG = [{"role": "user", "content": "hi"}]
TWO_FAST = mc.RetryPolicy(max_attempts=2, backoff_initial_s=0.05, backoff_max_s=0.05)


async def test_connect_timeout(clients):
    """A connect that never completes fails after connect_s per attempt, retried, as RequestTimeout(connect)."""
    hole = faults.Blackhole()
    try:
        c = clients(f"http://127.0.0.1:{hole.port}", retry=TWO_FAST,
                    timeouts=mc.Timeouts(connect_s=0.3, first_token_s=5, total_s=10))
        t0 = time.monotonic()
        with pytest.raises(mc.RequestTimeout) as info:
            await c.chat("m", MSG)
        elapsed = time.monotonic() - t0
    finally:
        hole.close()
    err = info.value
    assert (err.kind, err.limit_s, err.attempts, err.gave_up) == ("connect", 0.3, 2, "max_attempts")
    assert isinstance(err, TimeoutError)
    assert 0.6 <= elapsed < 2.0


async def test_first_token_timeout_before_headers_is_retried(clients, fault_server):
    """A stream whose server never answers hits first_token_s on each attempt; both attempts are
    cancelled at the server; the error names the first-token limit."""
    server = await fault_server([Step("hang_head")])
    c = clients(server.url, retry=TWO_FAST, timeouts=mc.Timeouts(connect_s=5, first_token_s=0.4, total_s=10))
    t0 = time.monotonic()
    with pytest.raises(mc.RequestTimeout) as info:
        await c.chat_stream("m", MSG)
    elapsed = time.monotonic() - t0
    err = info.value
    assert (err.kind, err.limit_s, err.attempts, err.gave_up) == ("first_token", 0.4, 2, "max_attempts")
    assert 0.8 <= elapsed < 2.5
    await asyncio.sleep(0.2)
    assert len(server.seen) == 2 and all(s.cancelled for s in server.seen)


async def test_first_token_timeout_after_headers_is_retried(clients, fault_server):
    """Response headers without any event count as no first token: retried, and the retry's stream is used."""
    server = await fault_server([Step("head_then_hang"), Step()])
    c = clients(server.url, timeouts=mc.Timeouts(first_token_s=0.4))
    stream = await c.chat_stream("m", MSG)
    assert [chunk async for chunk in stream] and stream.attempts == 2


async def test_first_token_limit_does_not_cut_a_non_streaming_answer(clients, fault_server):
    """A non-streaming answer slower than first_token_s is waited for: only total_s bounds it."""
    server = await fault_server([Step(delay_s=0.6)])
    c = clients(server.url, timeouts=mc.Timeouts(first_token_s=0.2, total_s=10))
    reply = await c.chat("m", MSG)
    assert reply["served_by_request"] == 0 and len(server.seen) == 1


async def test_total_timeout_before_headers(clients, fault_server):
    """A non-streaming call that never gets an answer ends at total_s with RequestTimeout(total),
    and its connection is closed (the server's handler is cancelled)."""
    server = await fault_server([Step("hang_head")])
    c = clients(server.url, timeouts=mc.Timeouts(total_s=0.5))
    t0 = time.monotonic()
    with pytest.raises(mc.RequestTimeout) as info:
        await c.chat("m", MSG)
    elapsed = time.monotonic() - t0
    err = info.value
    assert (err.kind, err.limit_s, err.attempts, err.gave_up) == ("total", 0.5, 1, "deadline")
    assert 0.5 <= elapsed < 1.5
    await asyncio.sleep(0.2)
    assert server.seen[0].cancelled


async def test_total_timeout_mid_stream_is_not_retried(clients, fault_server):
    """A stream that stops mid-way raises RequestTimeout(total) at total_s, counted from the call's
    start; nothing is retried."""
    server = await fault_server([Step("hang_mid")])
    c = clients(server.url, timeouts=mc.Timeouts(first_token_s=5, total_s=0.8))
    t0 = time.monotonic()
    stream = await c.chat_stream("m", MSG)
    got = []
    with pytest.raises(mc.RequestTimeout) as info:
        async for chunk in stream:
            got.append(chunk)
    elapsed = time.monotonic() - t0
    err = info.value
    assert (err.kind, err.attempts, err.gave_up) == ("total", 1, "not_retryable")
    assert len(got) == 2 and "2 events" in str(err)
    assert 0.8 <= elapsed < 1.8 and len(server.seen) == 1


async def test_total_timeout_leaves_no_time_for_a_long_retry_after(clients, fault_server):
    """A Retry-After longer than the time left gives up at once (gave_up=deadline) instead of sleeping."""
    server = await fault_server([Step("status", 503, (("Retry-After", "2"),)), Step()])
    c = clients(server.url, timeouts=mc.Timeouts(total_s=1.0))
    t0 = time.monotonic()
    with pytest.raises(mc.ServerError) as info:
        await c.chat("m", MSG)
    assert time.monotonic() - t0 < 0.8
    assert (info.value.gave_up, info.value.retry_after_s, len(server.seen)) == ("deadline", 2.0, 1)


async def test_per_call_timeouts_override_the_clients(clients, fault_server):
    """timeouts= on one call replaces the client's for that call only."""
    server = await fault_server([Step(delay_s=0.5)])
    c = clients(server.url, timeouts=mc.Timeouts(total_s=10))
    with pytest.raises(mc.RequestTimeout) as info:
        await c.chat("m", MSG, timeouts=mc.Timeouts(total_s=0.2))
    assert info.value.limit_s == 0.2
    assert (await c.chat("m", MSG))["choices"]
