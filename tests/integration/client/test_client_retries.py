"""The client's retry rules against a real local server failing in each way: what is retried, how
often, after how long, and what the caller gets when it gives up."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from meridian import client as mc
from tests.integration.client import faults
from tests.integration.client.faults import Step

MSG = [{"role": "user", "content": "hi"}]


async def test_refused_connections_are_retried_then_reported(clients):
    """A port that refuses every connection gets max_attempts tries, then ConnectError(refused)."""
    sock = faults.refusing_socket()
    try:
        c = clients(f"http://127.0.0.1:{sock.getsockname()[1]}")
        t0 = time.monotonic()
        with pytest.raises(mc.ConnectError) as info:
            await c.chat("m", MSG)
        assert time.monotonic() - t0 < 2.0
    finally:
        sock.close()
    err = info.value
    assert (err.reason, err.attempts, err.gave_up) == ("refused", 3, "max_attempts")
    assert "connection refused" in str(err) and "3 attempts" in str(err)


async def test_refused_then_listening_succeeds(clients, fault_server):
    """A server that starts listening after the first refused attempt answers the retry."""
    sock = faults.refusing_socket()
    refused = asyncio.Event()

    def on_event(event: mc.ClientEvent) -> None:
        if event.kind == "retry":
            refused.set()

    c = clients(f"http://127.0.0.1:{sock.getsockname()[1]}", on_event=on_event,
                retry=mc.RetryPolicy(backoff_initial_s=0.5, backoff_max_s=0.5))
    call = asyncio.create_task(c.chat("m", MSG))
    await asyncio.wait_for(refused.wait(), 5)
    server = await fault_server([Step()], sock=sock)
    reply = await asyncio.wait_for(call, 5)
    assert reply["choices"][0]["message"]["content"] and len(server.seen) == 1


async def test_connection_closed_before_any_byte_is_retried(clients, fault_server):
    """A connection the server closes before answering is retried; the next attempt's answer is returned."""
    server = await fault_server([Step("close"), Step()])
    reply = await clients(server.url).chat("m", MSG)
    assert reply["served_by_request"] == 1 and len(server.seen) == 2


async def test_429_waits_for_retry_after(clients, fault_server, caplog):
    """429 with Retry-After: 1 is retried no sooner than a second later, logged as event=client_retry
    without the API key."""
    server = await fault_server([Step("status", 429, (("Retry-After", "1"),)), Step()])
    secret = "sk-do-not-log-me"
    with caplog.at_level(logging.INFO, logger="meridian.client"):
        reply = await clients(server.url, api_key=secret).chat("m", MSG)
    assert reply["served_by_request"] == 1
    gap = server.seen[1].at - server.seen[0].at
    assert 0.95 <= gap < 2.5
    assert server.seen[0].headers["authorization"] == f"Bearer {secret}"
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("event=client_retry ") and "reason=status_429" in line and "attempt=1" in line
               for line in lines)
    assert not any(secret in line for line in lines)


async def test_retry_after_beyond_the_limit_is_returned_to_the_caller(clients, fault_server):
    """A Retry-After longer than max_retry_after_s ends the call at once with RateLimitError carrying it."""
    server = await fault_server([Step("status", 429, (("Retry-After", "120"),)), Step()])
    c = clients(server.url, retry=mc.RetryPolicy(max_retry_after_s=30))
    t0 = time.monotonic()
    with pytest.raises(mc.RateLimitError) as info:
        await c.chat("m", MSG)
    assert time.monotonic() - t0 < 1.0 and len(server.seen) == 1
    err = info.value
    assert (err.status, err.retry_after_s, err.gave_up, err.attempts) == (429, 120.0, "retry_after", 1)
    assert err.server_message == "scripted 429" and err.code == "code_429"


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_gateway_errors_then_success(clients, fault_server, status):
    """502, 503 and 504 are retried; each attempt carries the call's request id (attempt n: <id>.n)."""
    server = await fault_server([Step("status", status), Step()])
    reply = await clients(server.url).chat("m", MSG, request_id="call-7")
    assert reply["served_by_request"] == 1
    assert [s.headers["x-request-id"] for s in server.seen] == ["call-7", "call-7.2"]


async def test_503_every_time_raises_server_error(clients, fault_server):
    """A 503 on every attempt raises ServerError with the server's message after max_attempts."""
    server = await fault_server([Step("status", 503)])
    with pytest.raises(mc.ServerError) as info:
        await clients(server.url).chat("m", MSG)
    err = info.value
    assert (err.status, err.attempts, err.gave_up, err.server_message) == (503, 3, "max_attempts", "scripted 503")
    assert len(server.seen) == 3


@pytest.mark.parametrize(("status", "cls"), [(400, mc.BadRequestError), (401, mc.AuthenticationError),
                                              (403, mc.PermissionDeniedError), (404, mc.NotFoundError),
                                              (500, mc.ServerError)])
async def test_client_errors_and_500_are_not_retried(clients, fault_server, status, cls):
    """4xx (and 500) are the answer: raised after one attempt, typed by status."""
    server = await fault_server([Step("status", status), Step()])
    with pytest.raises(cls) as info:
        await clients(server.url).chat("m", MSG)
    assert (info.value.status, info.value.attempts, info.value.gave_up) == (status, 1, "not_retryable")
    assert len(server.seen) == 1


async def test_stream_503_before_it_starts_is_retried(clients, fault_server):
    """A stream refused with 503 is retried; the second attempt's stream is read to [DONE] with its usage."""
    server = await fault_server([Step("status", 503), Step(tokens=3)])
    stream = await clients(server.url).chat_stream("m", MSG)
    chunks = [chunk async for chunk in stream]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "t0 t1 t2 " and stream.usage == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}
    assert stream.attempts == 2 and len(server.seen) == 2
    assert server.seen[1].body["stream_options"] == {"include_usage": True}


async def test_stream_broken_after_a_byte_is_not_retried(clients, fault_server):
    """A stream whose connection breaks after it delivered its first event raises StreamError, one attempt."""
    server = await fault_server([Step("break_mid"), Step()])
    stream = await clients(server.url).chat_stream("m", MSG)
    first = await stream.__anext__()
    assert first["choices"][0]["delta"]["role"] == "assistant"
    with pytest.raises(mc.StreamError) as info:
        await stream.__anext__()
    err = info.value
    assert (err.reason, err.events, err.attempts, err.gave_up) == ("disconnected", 1, 1, "not_retryable")
    assert len(server.seen) == 1
    with pytest.raises(StopAsyncIteration):  # the stream is over
        await stream.__anext__()


async def test_stream_broken_inside_its_first_event_is_not_retried(clients, fault_server):
    """A stream that breaks after some bytes but before its first complete event is not retried either."""
    server = await fault_server([Step("break_first"), Step()])
    with pytest.raises(mc.StreamError) as info:
        await clients(server.url).chat_stream("m", MSG)
    err = info.value
    assert (err.reason, err.events, err.attempts, err.gave_up) == ("disconnected", 0, 1, "not_retryable")
    assert len(server.seen) == 1


async def test_stream_error_event_is_raised(clients, fault_server):
    """The router's mid-stream error event raises StreamError with its code and message."""
    server = await fault_server([Step("error_event")])
    stream = await clients(server.url).chat_stream("m", MSG)
    with pytest.raises(mc.StreamError) as info:
        async for _ in stream:
            pass
    err = info.value
    assert (err.reason, err.code, err.events) == ("error_event", "upstream_error", 2)
    assert err.server_message == "replica stream broke: reset" and len(server.seen) == 1


async def test_no_budget_no_retry(clients, fault_server):
    """An empty retry budget (ratio 0, no reserve) stops retries: the first 503 is the answer."""
    server = await fault_server([Step("status", 503), Step()])
    c = clients(server.url, retry=mc.RetryPolicy(budget_ratio=0, budget_min_per_s=0, backoff_initial_s=0.05))
    with pytest.raises(mc.ServerError) as info:
        await c.chat("m", MSG)
    assert (info.value.gave_up, info.value.attempts) == ("budget", 1) and len(server.seen) == 1


async def test_one_connection_is_reused(clients, fault_server):
    """Sequential calls, streaming and not, travel on one pooled keep-alive connection."""
    server = await fault_server([Step()])
    c = clients(server.url)
    for _ in range(3):
        await c.chat("m", MSG)
        stream = await c.chat_stream("m", MSG)
        assert [chunk async for chunk in stream]
    await c.models()
    assert len(server.seen) == 7 and len(server.connections()) == 1


async def test_headers_the_router_reads(clients, fault_server):
    """Each attempt sends the key, the request id, the remaining deadline and the client region."""
    server = await fault_server([Step()])
    c = clients(server.url + "/v1", api_key="k1", region="eu-west-1",
                timeouts=mc.Timeouts(total_s=30))
    await c.chat("m", MSG)
    h = server.seen[0].headers
    assert h["authorization"] == "Bearer k1" and h["x-meridian-client-region"] == "eu-west-1"
    assert 25 < float(h["x-meridian-timeout-s"]) <= 30.5 and h["content-type"] == "application/json"
    assert server.seen[0].path == "/v1/chat/completions"
