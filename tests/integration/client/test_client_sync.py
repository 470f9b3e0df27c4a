"""The blocking Client has the async client's behaviour: retries, timeouts, streams, hedging,
connection reuse. Its calls run in a worker thread here (asyncio.to_thread) while the fault server
serves on the test's loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from meridian import client as mc
from tests.integration.client.conftest import FAST_RETRY
from tests.integration.client.faults import Step

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture
def sync_clients():
    made: list[mc.Client] = []

    def make(base_url: str, **options) -> mc.Client:
        options.setdefault("retry", FAST_RETRY)
        c = mc.Client(base_url, **options)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


async def test_sync_retries_503_and_reads_a_stream_on_one_connection(sync_clients, fault_server):
    """A 503 is retried; a stream is iterated with for; both reuse one connection."""
    server = await fault_server([Step("status", 503), Step(tokens=3)])
    c = sync_clients(server.url)

    def work():
        reply = c.chat("m", MSG, max_tokens=3)
        with c.chat_stream("m", MSG) as stream:
            chunks = list(stream)
        return reply, chunks, stream.usage

    reply, chunks, usage = await asyncio.to_thread(work)
    assert reply["served_by_request"] == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant" and usage["completion_tokens"] == 3
    assert len(server.seen) == 3 and server.seen[1].body["max_tokens"] == 3
    assert len(server.connections()) == 1


async def test_sync_first_token_timeout(sync_clients, fault_server):
    """The blocking client raises RequestTimeout(first_token) at its limit, after its retries."""
    server = await fault_server([Step("hang_head")])
    c = sync_clients(server.url, retry=mc.RetryPolicy(max_attempts=2, backoff_initial_s=0.05, backoff_max_s=0.05),
                     timeouts=mc.Timeouts(first_token_s=0.3))
    t0 = time.monotonic()
    with pytest.raises(mc.RequestTimeout) as info:
        await asyncio.to_thread(c.chat_stream, "m", MSG)
    assert (info.value.kind, info.value.attempts) == ("first_token", 2)
    assert 0.6 <= time.monotonic() - t0 < 2.0


async def test_sync_stream_break_raises(sync_clients, fault_server):
    """A stream broken after its first event raises StreamError from next(), one attempt."""
    server = await fault_server([Step("break_mid")])
    c = sync_clients(server.url)

    def work():
        stream = c.chat_stream("m", MSG)
        first = next(stream)
        with pytest.raises(mc.StreamError) as info:
            next(stream)
        return first, info.value

    first, err = await asyncio.to_thread(work)
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert (err.reason, err.attempts) == ("disconnected", 1) and len(server.seen) == 1


async def test_sync_hedge_and_threads_share_one_client(sync_clients, fault_server):
    """Hedging works in the blocking client, and calls from several threads share its pool."""
    server = await fault_server([Step(delay_s=3.0), Step()])
    c = sync_clients(server.url, hedge_after_s=0.2)
    t0 = time.monotonic()
    reply = await asyncio.to_thread(c.chat, "m", MSG)
    assert reply["served_by_request"] == 1 and time.monotonic() - t0 < 1.5
    results: list[dict] = []

    def worker():
        results.append(c.chat("m", MSG, hedge=False))

    threads = [threading.Thread(target=worker) for _ in range(4)]

    def run_all():
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)

    await asyncio.to_thread(run_all)
    assert len(results) == 4 and all(r["choices"] for r in results)


def test_closed_client_refuses_calls():
    """A closed Client says so instead of hanging."""
    c = mc.Client("http://127.0.0.1:9")
    c.close()
    c.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        c.models()
