"""An in-process agent (sim provider, emulator replicas) whose Cluster spec names the replicas'
API key: its engines refuse a request without the key and serve it with the key, and the key is in
no command line, log line or status page of the agent."""

from __future__ import annotations

import logging
import secrets

import aiohttp
import pytest

from meridian.fleet import models
from runtime_adapter import process

import agent_it_helpers as h

POOLS = """  cloud: aws
  region: us-east-1
  zone: us-east-1a
  provider: sim
  pools:
    - {name: l4, instance_type: g6.12xlarge, max_nodes: 2, initial_nodes: 1}
  sim: {provisioning_delay_s: 1, spot_preemptions_per_node_hour: 0}"""
R = models.ReplicaState


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("MERIDIAN_TEST_TOKEN", h.TOKEN)


async def _status(session: aiohttp.ClientSession, url: str, key: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with session.post(url + "/v1/chat/completions", json=body, headers=headers) as resp:
        await resp.read()
        return resp.status


async def test_the_spec_api_key_guards_the_agents_replicas(env, scheduler, tmp_path, caplog):
    """``replicas.api_key_file`` reaches every engine the agent starts: a chat request without the
    key is refused 401, with it served 200; the key is absent from the engine's argv, the agent's
    log lines, its /status and /metrics."""
    caplog.set_level(logging.DEBUG)
    key = "sk-replica-" + secrets.token_urlsafe(16)
    key_file = tmp_path / "replica-api-key"
    key_file.write_text(key + "\n")
    body = POOLS + f"\n  replicas: {{api_key_file: \"{key_file}\"}}"
    cluster = h.cluster_doc("it-key", body, address=scheduler.address, state_dir=str(tmp_path), ports="32400-32499")
    scheduler.tokens["it-key"] = h.TOKEN
    agent = h.build_agent(cluster, tmp_path / "state")
    assert key not in repr(agent.replicas.settings)
    await agent.start()
    rec = scheduler.record("it-key")
    pids: set[int] = set()
    try:
        await h.wait_for(lambda: rec.inventory, what="inventory")
        await scheduler.send("it-key", h.start("d1", "r1", "l4"))
        ready = await h.wait_for(lambda: (r := rec.replica("r1")) and r.state == R.READY and r, timeout_s=60,
                                 what="r1 ready")
        pids.update(h.engine_pids(tmp_path / "state").values())
        async with aiohttp.ClientSession() as http:
            assert await _status(http, ready.endpoint) == 401
            assert await _status(http, ready.endpoint, "sk-wrong") == 401
            assert await _status(http, ready.endpoint, key) == 200
            base = f"http://127.0.0.1:{agent.status_server.port}"
            async with http.get(base + "/status") as resp:
                assert key not in await resp.text()
            async with http.get(base + "/metrics") as resp:
                assert key not in await resp.text()
        for pid in pids:
            assert key not in " ".join(process.proc_cmdline(pid) or ())
    finally:
        await agent.shutdown(stop_replicas=True)
        h.kill_engines(pids)
    assert key not in caplog.text
