"""The client against Meridian's real global endpoint: the router in front of SGLang emulator
replicas, in this process on loopback; async and blocking, streaming and not, every
OpenAI-compatible path, the client-region header, and the router's own 503/404/400 answers."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from meridian import client as mc
from router import testing
from tests.integration.runtime_adapter.conftest import running_emulator

MODEL, EMBED = "tiny", "embed"
MSG = [{"role": "user", "content": "Count to ten"}]


@pytest.fixture
async def endpoint(make_router):
    """A router (client region from the trusted header) with two chat emulators and one embedding emulator."""
    async with contextlib.AsyncExitStack() as stack:
        chat = [await stack.enter_async_context(running_emulator(served_model_name=MODEL, speedup=200))
                for _ in range(2)]
        embed = await stack.enter_async_context(running_emulator(served_model_name=EMBED, is_embedding=True,
                                                                 speedup=200))
        table = testing.table(1, {
            MODEL: [testing.replica(f"e{i}", srv.port) for i, srv in enumerate(chat)],
            EMBED: [testing.replica("m0", embed.port)],
            "cold": []})
        router = await make_router(table, region="us-east-1", trusted_region_header="X-Meridian-Client-Region",
                                   cold_start_wait_s=0)
        yield router


def _text(chunks: list[dict]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))


async def test_async_client_every_path(endpoint, clients):
    """chat, chat_stream (with its usage chunk), completions, completions_stream, embeddings and
    models all work through the router, on one pooled connection."""
    c = clients(f"http://127.0.0.1:{endpoint.port}", region="eu-west-1")
    reply = await c.chat(MODEL, MSG, max_tokens=8)
    assert reply["choices"][0]["message"]["content"] and reply["usage"]["completion_tokens"] >= 1

    stream = await c.chat_stream(MODEL, MSG, max_tokens=8)
    chunks = [chunk async for chunk in stream]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert _text(chunks) and stream.usage is not None
    assert stream.usage["completion_tokens"] == sum(1 for c in chunks if c.get("choices") and
                                                    c["choices"][0]["delta"].get("content"))
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == stream.usage

    completion = await c.completions(MODEL, "Once upon a time", max_tokens=4)
    assert completion["choices"][0]["text"]
    cstream = await c.completions_stream(MODEL, "Once upon a time", max_tokens=4)
    pieces = [chunk async for chunk in cstream]
    assert "".join(p["choices"][0]["text"] for p in pieces if p.get("choices")) and cstream.usage

    vectors = await c.embeddings(EMBED, ["a", "b"])
    assert [d["index"] for d in vectors["data"]] == [0, 1] and len(vectors["data"][0]["embedding"]) == 1024

    models = await c.models()
    assert sorted(m["id"] for m in models["data"]) == sorted([MODEL, EMBED, "cold"])
    # The router resolved the client region from the header the client sent.
    regions = {region for (model, region, _replica, code) in endpoint.metrics.requests if model == MODEL}
    assert regions == {"eu-west-1"}


async def test_sync_client_through_the_router(endpoint):
    """The blocking client: a chat, a stream and embeddings through the router."""
    def work():
        with mc.Client(f"http://127.0.0.1:{endpoint.port}/v1") as c:
            reply = c.chat(MODEL, MSG, max_tokens=4)
            with c.chat_stream(MODEL, MSG, max_tokens=4) as stream:
                chunks = list(stream)
            vectors = c.embeddings(EMBED, "a")
            return reply, chunks, stream.usage, vectors

    reply, chunks, usage, vectors = await asyncio.to_thread(work)
    assert reply["choices"][0]["message"]["content"]
    assert _text(chunks) and usage["completion_tokens"] >= 1
    assert len(vectors["data"]) == 1


async def test_router_errors_are_typed(endpoint, clients):
    """The router's 404 (listing served models) and 400 (naming the field) arrive typed, not retried."""
    c = clients(f"http://127.0.0.1:{endpoint.port}")
    with pytest.raises(mc.NotFoundError) as nf:
        await c.chat("nope", MSG)
    assert nf.value.code == "model_not_found" and MODEL in nf.value.server_message and nf.value.attempts == 1
    with pytest.raises(mc.BadRequestError) as bad:
        await c.chat(MODEL, MSG, max_tokens=-1)
    assert bad.value.param == "max_tokens" and bad.value.attempts == 1


async def test_router_503_retried_after_its_retry_after(endpoint, clients):
    """A model with no replica gets the router's 503 with Retry-After: 1; the client waits it out
    before each retry and reports the router's code."""
    c = clients(f"http://127.0.0.1:{endpoint.port}", retry=mc.RetryPolicy(max_attempts=2, backoff_initial_s=0.05))
    t0 = time.monotonic()
    with pytest.raises(mc.ServerError) as info:
        await c.chat("cold", MSG)
    err = info.value
    assert (err.status, err.code, err.attempts, err.retry_after_s) == (503, "no_healthy_replica", 2, 1.0)
    assert 1.0 <= time.monotonic() - t0 < 3.0
