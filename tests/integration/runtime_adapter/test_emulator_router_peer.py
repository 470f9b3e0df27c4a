"""Peer check: SGLang's own router (PyPI sglang-router 0.3.2) accepts emulator replicas as SGLang
workers: its health checks pass and chat requests, streaming included, go through it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import aiohttp

from meridian import fleet
from runtime_adapter import Replica, emulator, scraper
from tests.conftest import free_port
from tests.integration.runtime_adapter.conftest import FAST

SPEC = fleet.RuntimeSpec(model_path="meta-llama/Llama-3.1-8B-Instruct", served_model_name="llama")


async def _router_workers(session: aiohttp.ClientSession, url: str) -> list[dict]:
    try:
        async with session.get(url + "/workers", timeout=aiohttp.ClientTimeout(total=5)) as resp:
            if resp.status != 200:
                return []
            return (await resp.json()).get("workers", [])
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return []


async def test_sglang_router_routes_to_emulator_replicas(tmp_path):
    """sglang-router round-robins chat (plain and streaming) over two supervised emulator replicas."""
    env = emulator.environment(startup_delay_s=0.0, warmup_s=0.0, speedup=20.0)
    replicas = [Replica(SPEC, f"peer-{i}", port=free_port(), engine_command=emulator.command(), env=env, config=FAST)
                for i in range(2)]
    router_port = free_port()
    log_path = tmp_path / "router.log"
    router = None
    try:
        for r in replicas:
            await r.start()
        for r in replicas:
            await r.wait_ready(60)
        with open(log_path, "wb") as log:
            # At start the router tries to fetch a tokenizer from a model hub; offline that fails harmlessly.
            router = subprocess.Popen(
                [sys.executable, "-m", "sglang_router.launch_router", "--worker-urls", *[r.endpoint for r in replicas],
                 "--policy", "round_robin", "--host", "127.0.0.1", "--port", str(router_port),
                 "--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1",
                 "--health-check-interval-secs", "1", "--log-level", "warn"],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        url = f"http://127.0.0.1:{router_port}"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
            workers: list[dict] = []
            for _ in range(300):  # up to ~60 s on a loaded machine
                workers = await _router_workers(s, url)
                if len(workers) == 2 and all(w.get("is_healthy") for w in workers):
                    break
                assert router.poll() is None, log_path.read_text()[-3000:]
                await asyncio.sleep(0.2)
            assert sorted(w["url"] for w in workers) == sorted(r.endpoint for r in replicas), log_path.read_text()[-3000:]
            assert all(w["is_healthy"] and w["model_id"] == "llama" for w in workers)
            async with s.get(url + "/health") as resp:
                assert resp.status == 200

            body = {"model": "llama", "messages": [{"role": "user", "content": "Hello through the router"}],
                    "max_tokens": 6, "ignore_eos": True}
            for _ in range(4):
                async with s.post(url + "/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200
                    answer = await resp.json()
                    assert answer["object"] == "chat.completion" and answer["usage"]["completion_tokens"] == 6

            stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
            async with s.post(url + "/v1/chat/completions", json=stream_body) as resp:
                assert resp.status == 200
                text = (await resp.read()).decode()
            events = [e[len("data: "):] for e in text.split("\n\n") if e.startswith("data: ")]
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
            assert chunks[-1]["usage"]["completion_tokens"] == 6
            assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]).split()

            served = []
            for r in replicas:
                async with s.get(r.endpoint + "/metrics") as resp:
                    served.append(scraper.parse(await resp.text()).total(scraper.REQUESTS_TOTAL))
        assert sum(served) == 5 and all(n >= 2 for n in served), served
    finally:
        if router is not None:
            router.terminate()
            try:
                router.wait(timeout=10)
            except subprocess.TimeoutExpired:
                router.kill()
                router.wait(timeout=10)
        for r in replicas:
            await r.stop()
