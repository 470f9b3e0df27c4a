"""The emulator's latency model as a client sees it over HTTP (real-time sleeps, speedup 1)."""

from __future__ import annotations

import time

import aiohttp

from meridian import latency

from tests.integration.runtime_adapter.conftest import running_emulator


async def ttft_s(session: aiohttp.ClientSession, url: str, content: str) -> float:
    """Seconds from sending a streaming chat request to its first content delta."""
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 2, "stream": True}
    t0 = time.monotonic()
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        async for line in resp.content:
            if b'"content":"' in line and b'"content":""' not in line:
                return time.monotonic() - t0
    raise AssertionError("no content delta")


async def test_prompt_length_and_prefix_hits_shape_ttft(http):
    """On an L4, a ~6k-token prompt takes far longer to first token than a short one; repeating it hits the prefix cache."""
    async with running_emulator(gpu_type="L4", speedup=1.0) as srv:
        long_prompt = " ".join(f"w{i}" for i in range(6000))  # ~6k tokens: ~1.6 s of 8B prefill on an L4
        short = await ttft_s(http, srv.url, "hi")
        long_ = await ttft_s(http, srv.url, long_prompt)
        repeat = await ttft_s(http, srv.url, long_prompt)
    assert long_ > 0.8, long_
    assert long_ > 5 * short, (short, long_)
    assert repeat < long_ / 3, (long_, repeat)


async def test_simulated_network_distance_follows_the_latency_map(http):
    """With a region set, a client from far away waits the map's RTT before its first token; a near one does not."""
    async with running_emulator(gpu_type="H100", speedup=1.0, region="us-east-1") as srv:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        times = {}
        for client in ("na-east", "ap-northeast", None):
            headers = {"X-Meridian-Client-Region": client} if client else {}
            t0 = time.monotonic()
            async with http.post(srv.url + "/v1/chat/completions", json=body, headers=headers) as resp:
                assert resp.status == 200
                await resp.read()
            times[client] = time.monotonic() - t0
    far_rtt_s = latency.default().rtt_ms("ap-northeast", "us-east-1") / 1000
    assert times["ap-northeast"] >= far_rtt_s, times
    assert times["na-east"] < times["ap-northeast"] - far_rtt_s / 2, times
    assert times[None] < times["ap-northeast"] - far_rtt_s / 2, times
