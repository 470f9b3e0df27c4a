"""Hedged requests: a second try of a slow non-streaming call, first answer wins, loser cancelled;
off unless asked for, never for streams."""

from __future__ import annotations

import asyncio
import time

from meridian import client as mc
from tests.integration.client.faults import Step

MSG = [{"role": "user", "content": "hi"}]


async def test_hedge_beats_a_slow_first_try(clients, fault_server):
    """With hedge_after_s=0.2, a first try that would take 5 s loses to the hedge sent on another
    connection; the first try's request is cancelled at the server."""
    server = await fault_server([Step(delay_s=5.0), Step()])
    seen_events: list[mc.ClientEvent] = []
    c = clients(server.url, hedge_after_s=0.2, on_event=seen_events.append)
    t0 = time.monotonic()
    reply = await c.chat("m", MSG, request_id="h1")
    elapsed = time.monotonic() - t0
    assert reply["served_by_request"] == 1
    assert 0.2 <= elapsed < 1.5
    assert len(server.connections()) == 2
    assert [s.headers["x-request-id"] for s in server.seen] == ["h1", "h1.2"]
    for _ in range(50):
        if server.seen[0].cancelled:
            break
        await asyncio.sleep(0.02)
    assert server.seen[0].cancelled
    assert [e.kind for e in seen_events if e.kind != "attempt"] == ["hedge"]
    assert [(e.attempt, e.reason) for e in seen_events if e.kind == "attempt"] == [(2, "ok"), (1, "cancelled")]


async def test_no_hedge_by_default(clients, fault_server):
    """Without hedge_after_s a slow answer is simply waited for: one request."""
    server = await fault_server([Step(delay_s=0.5), Step()])
    reply = await clients(server.url).chat("m", MSG)
    assert reply["served_by_request"] == 0 and len(server.seen) == 1


async def test_no_hedge_when_the_first_try_is_quick(clients, fault_server):
    """A first try answering before hedge_after_s is the only request."""
    server = await fault_server([Step()])
    c = clients(server.url, hedge_after_s=0.5)
    for _ in range(3):
        await c.chat("m", MSG)
    assert len(server.seen) == 3 and len(server.connections()) == 1


async def test_hedge_off_for_one_call(clients, fault_server):
    """hedge=False on a call of a hedging client sends one request."""
    server = await fault_server([Step(delay_s=0.5), Step()])
    c = clients(server.url, hedge_after_s=0.1)
    assert (await c.chat("m", MSG, hedge=False))["served_by_request"] == 0 and len(server.seen) == 1


async def test_hedge_survives_a_failed_first_try(clients, fault_server):
    """A first try that fails (503) after the hedge went out does not end the call: the hedge's answer wins."""
    server = await fault_server([Step("status", 503, delay_s=0.4), Step(delay_s=0.5)])
    c = clients(server.url, hedge_after_s=0.1)
    reply = await c.chat("m", MSG)
    assert reply["served_by_request"] == 1 and len(server.seen) == 2


async def test_streams_are_not_hedged(clients, fault_server):
    """A stream slower than hedge_after_s to start is not sent twice."""
    server = await fault_server([Step(delay_s=0.4), Step()])
    c = clients(server.url, hedge_after_s=0.1)
    stream = await c.chat_stream("m", MSG)
    assert [chunk async for chunk in stream] and len(server.seen) == 1
