"""The official openai SDK, unchanged, against the router in front of two SGLang emulator replicas."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import aiohttp
import openai
import pytest

from router import testing
from tests.conftest import free_port, wait_for_port

MODEL = "tiny"


async def _healthy(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(f"http://127.0.0.1:{port}/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError(f"emulator on {port} not healthy after {timeout_s}s")


@pytest.fixture
async def emulators(processes):
    ports = [free_port(), free_port()]
    for p in ports:
        processes.start(["-m", "runtime_adapter.emulator", "--model-path", "Qwen/Qwen2.5-0.5B-Instruct",
                         "--served-model-name", MODEL, "--port", str(p), "--skip-server-warmup",
                         "--startup-delay-s", "0", "--warmup-s", "0", "--speedup", "200"], p, timeout_s=60)
    for p in ports:
        await _healthy(p)
    return ports


async def test_openai_sdk_chat_streaming_and_not(emulators, make_router):
    """chat.completions.create works with and without stream=True, and models.list lists the model."""
    router = await make_router(testing.table(1, {MODEL: [testing.replica(f"e{i}", p) for i, p in enumerate(emulators)]}),
                               health={"enabled": True, "interval_s": 1.0})
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{router.port}/v1", api_key="unused", max_retries=0)
    try:
        reply = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Say hello"}], max_tokens=8)
        assert reply.choices[0].message.content and reply.usage.completion_tokens >= 1
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Count"}], max_tokens=8, stream=True,
            stream_options={"include_usage": True})
        pieces, usage = [], None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                usage = chunk.usage
        assert pieces and usage is not None and usage.completion_tokens == len(pieces)
        completion = await client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4)
        assert completion.choices[0].text
        models = await client.models.list()
        assert [m.id for m in models.data] == [MODEL]
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model=MODEL, messages=[])
    finally:
        await client.close()


def test_openai_sdk_sync_client(emulators, processes, tmp_path):
    """The synchronous SDK client works against `meridian router` run as a process with a routes file."""
    routes = tmp_path / "routes.yaml"
    routes.write_text("models:\n  - served_model_name: tiny\n    replicas:\n" + "".join(
        f"      - {{replica_id: e{i}, endpoint: 'http://127.0.0.1:{p}', region: us-east-1}}\n"
        for i, p in enumerate(emulators)))
    port = free_port()
    processes.start(["-m", "meridian.cli.main", "router", "--listen", f"127.0.0.1:{port}", "--routes-file",
                     str(routes), "--lkg-store", "none", "--region", "na-east"], port)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert reply.choices[0].message.content
    chunks = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=4, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    client.close()


def test_each_worker_serves_its_own_metrics_port(emulators, processes, tmp_path):
    """`meridian router --workers 2 --metrics-port P`: worker i answers /metrics on P + i, so a
    scrape of both counts every request exactly once, whichever worker took it."""
    routes = tmp_path / "routes.yaml"
    routes.write_text("models:\n  - served_model_name: tiny\n    replicas:\n" + "".join(
        f"      - {{replica_id: e{i}, endpoint: 'http://127.0.0.1:{p}', region: us-east-1}}\n"
        for i, p in enumerate(emulators)))
    port, metrics_port = free_port(), free_port(2)  # one metrics port per worker, both below 65536
    processes.start(["-m", "meridian.cli.main", "router", "--listen", f"127.0.0.1:{port}", "--routes-file",
                     str(routes), "--lkg-store", "none", "--workers", "2", "--metrics-port", str(metrics_port)], port)
    for p in (metrics_port, metrics_port + 1):
        wait_for_port(p, 30)
    sent = 24
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    for _ in range(sent):  # a new connection each time, so the kernel spreads them over the workers
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json", "Connection": "close"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert reply.status == 200
    counted = []
    for p in (metrics_port, metrics_port + 1):
        with urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        counted.append(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                           if line.startswith("meridian_router_requests_total{")))
    assert sum(counted) == sent
