"""An in-process agent (sim provider, emulator replicas, the local backend) whose Cluster spec sets
``replicas.local.tls``: its replicas' endpoints are https, served by a TLS relay process in front of
an engine on loopback; a real router trusting the CA (``upstream_tls_ca_file``) serves through it,
one trusting another CA does not, plain HTTP gets nothing; a restarted agent adopts engine and
relay (same pids), a relay killed is detected and replaced, a drain ends both, and a plaintext
replica left by an agent without TLS is stopped rather than adopted."""

from __future__ import annotations

import asyncio
import random

import aiohttp
import openai
import pytest

from meridian.fleet import models
from router import app as router_app
from router import config as router_config
from router import testing as router_testing
from tests.integration import tls_certs

import agent_it_helpers as h

pytestmark = pytest.mark.timeout(240)
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


@pytest.fixture
def pki(tmp_path) -> tls_certs.Pki:
    return tls_certs.make(tmp_path / "pki")


@pytest.fixture
def other(tmp_path) -> tls_certs.Pki:
    return tls_certs.make(tmp_path / "pki-b")


def tls_cluster(name: str, scheduler, tmp_path, pki: tls_certs.Pki | None, ports: str):
    body = POOLS
    if pki is not None:
        body += (f"\n  replicas: {{local: {{tls: {{cert_file: \"{pki.server_cert}\", key_file: \"{pki.server_key}\", "
                 f"reload_interval_s: 0.5}}}}}}")
    scheduler.tokens[name] = h.TOKEN
    return h.cluster_doc(name, body, address=scheduler.address, state_dir=str(tmp_path), ports=ports)


async def ready(scheduler, cluster: str, directive: str, replica: str) -> models.ReplicaReport:
    rec = scheduler.record(cluster)
    await h.wait_for(lambda: rec.inventory, what="inventory")
    await scheduler.send(cluster, h.start(directive, replica, "l4"))
    return await h.wait_for(lambda: (r := rec.replica(replica)) and r.state == R.READY and r, timeout_s=90,
                            what=f"{replica} ready")


async def router_for(endpoint: str, ca: str) -> router_app.Router:
    host, port = endpoint.removeprefix("https://").rsplit(":", 1)
    cfg = router_config.RouterConfig.model_validate({"listen_port": 0, "lkg_store": "none", "health": {"enabled": False},
                                                     "upstream_tls_ca_file": ca})
    router = router_app.Router(cfg, rng=random.Random(0))
    await router.start()
    replica = router_testing.replica("r1", int(port), host=host, scheme="https")
    router.state.apply(router_testing.table(1, {"qwen": [replica]}), "static")
    return router


async def bounded(coro, what: str, timeout_s: float = 60.0):
    """``coro`` within ``timeout_s``: a hang fails here, naming the step, not at the test's timeout."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if task in done:
        return task.result()
    stacks = [f"{t.get_name()} cancelling={t.cancelling()}: " + " <- ".join(f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno}"
                                                for f in reversed(t.get_stack())) for t in asyncio.all_tasks()]
    task.cancel()
    raise AssertionError(f"{what} took over {timeout_s:g}s; tasks:\n" + "\n".join(stacks))


def pids_of(state_dir) -> set[int]:
    return set(h.engine_pids(state_dir).values()) | set(h.relay_pids(state_dir).values())


async def test_a_tls_replica_is_served_through_a_router_trusting_its_ca_and_drains_whole(env, scheduler, tmp_path,
                                                                                         pki, other):
    """The endpoint is https; a router with the replica's CA answers a chat request through it, a
    router with another CA answers 502 (certificate verify failed), plain HTTP to the port gets no
    HTTP answer; a drain stops both the engine and its relay."""
    cluster = tls_cluster("it-tls", scheduler, tmp_path, pki, "32600-32699")
    agent = h.build_agent(cluster, tmp_path / "state")
    await bounded(agent.start(), "agent start")
    pids: set[int] = set()
    try:
        report = await ready(scheduler, "it-tls", "d1", "r1")
        pids = pids_of(tmp_path / "state")
        assert report.endpoint.startswith("https://127.0.0.1:") and len(pids) == 2
        good = await router_for(report.endpoint, pki.ca)
        wrong = await router_for(report.endpoint, other.ca)
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{good.port}/v1", api_key="unused", max_retries=0,
                                    timeout=60)
        try:
            answer = await client.chat.completions.create(model="qwen", max_tokens=4,
                                                          messages=[{"role": "user", "content": "hi"}])
            assert answer.usage.completion_tokens == 4
            async with aiohttp.ClientSession() as http:
                body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
                async with http.post(f"http://127.0.0.1:{wrong.port}/v1/chat/completions", json=body) as resp:
                    assert resp.status == 502
                    assert "certificate verify failed" in (await resp.json())["error"]["message"]
                with pytest.raises(aiohttp.ClientError):
                    async with http.get(report.endpoint.replace("https://", "http://") + "/health") as resp:
                        await resp.read()
        finally:
            await client.close()
            await good.stop()
            await wrong.stop()
        rec = scheduler.record("it-tls")
        await scheduler.send("it-tls", h.drain("d2", "r1", deadline_s=5))
        await h.wait_for(lambda: (r := rec.replica("r1")) and r.state == R.STOPPED, timeout_s=30, what="drained")
        await h.wait_for(lambda: not any(h.alive(p) for p in pids), timeout_s=15, what="engine and relay gone")
    finally:
        await bounded(agent.shutdown(stop_replicas=True), "agent shutdown")
        h.kill_engines(pids)


async def test_a_restarted_agent_adopts_engine_and_relay_and_replaces_a_killed_relay(env, scheduler, tmp_path, pki):
    """Agent shut down with replicas kept: the next agent adopts the replica with the same engine
    and relay pids, still https; the relay SIGKILLed under it is reported (a REPLICA_CRASH event, a
    restart) and replaced while the engine keeps its pid; killed while no agent runs, the next
    agent keeps the engine and starts a new relay, never plaintext."""
    cluster = tls_cluster("it-tls-a", scheduler, tmp_path, pki, "32700-32799")
    state = tmp_path / "state"
    agent = h.build_agent(cluster, state)
    await bounded(agent.start(), "agent start")
    seen: set[int] = set()
    try:
        report = await ready(scheduler, "it-tls-a", "d1", "r1")
        engine, relay = h.engine_pids(state)["r1"], h.relay_pids(state)["r1"]
        seen |= {engine, relay}
        await bounded(agent.shutdown(stop_replicas=False), "agent shutdown")
        assert h.alive(engine) and h.alive(relay)

        agent = h.build_agent(cluster, state)
        await bounded(agent.start(), "agent start")
        assert agent.adopted == ["r1"]
        rec = scheduler.record("it-tls-a")
        again = await h.wait_for(lambda: (r := rec.replica("r1")) and r.state == R.READY and r, what="adopted READY")
        assert again.endpoint == report.endpoint
        assert (h.engine_pids(state)["r1"], h.relay_pids(state)["r1"]) == (engine, relay)
        async with aiohttp.ClientSession() as http:
            async with http.get(report.endpoint + "/v1/models", ssl=False) as resp:
                assert resp.status == 200

        h.kill_engines([relay])
        await h.wait_for(lambda: any(e.kind == models.EventKind.REPLICA_CRASH and e.replica_id == "r1"
                                     for e in rec.events), timeout_s=30, what="the relay's crash reported")
        back = await h.wait_for(lambda: (r := rec.replica("r1")) and r.state == R.READY and r.restarts == 1 and r,
                                timeout_s=30, what="READY again with a new relay")
        new_relay = h.relay_pids(state)["r1"]
        seen.add(new_relay)
        assert new_relay != relay and h.alive(new_relay) and h.engine_pids(state)["r1"] == engine
        assert back.endpoint == report.endpoint

        await bounded(agent.shutdown(stop_replicas=False), "agent shutdown")
        h.kill_engines([new_relay])
        await h.wait_for(lambda: not h.alive(new_relay), what="relay gone")
        agent = h.build_agent(cluster, state)
        await bounded(agent.start(), "agent start")
        assert agent.adopted == ["r1"]
        third = await h.wait_for(lambda: (p := h.relay_pids(state).get("r1")) not in (None, relay, new_relay) and p,
                                 timeout_s=30, what="a fresh relay recorded")
        seen.add(third)
        assert h.engine_pids(state)["r1"] == engine
        status = agent.replicas.get("r1")
        await h.wait_for(lambda: status.state == R.READY, timeout_s=30, what="adopted READY with the fresh relay")
        async with aiohttp.ClientSession() as http:
            async with http.get(report.endpoint + "/v1/models", ssl=False) as resp:
                assert resp.status == 200
        await h.wait_for(lambda: scheduler.connected("it-tls-a"), timeout_s=30, what="agent connected")
        await scheduler.send("it-tls-a", h.drain("d2", "r1", deadline_s=5))
        await h.wait_for(lambda: (r := rec.replica("r1")) and r.state == R.STOPPED, timeout_s=30, what="drained")
        await h.wait_for(lambda: not h.alive(engine) and not h.alive(third), timeout_s=15, what="both gone")
    finally:
        await bounded(agent.shutdown(stop_replicas=True), "agent shutdown")
        h.kill_engines(seen)


async def test_a_plaintext_replica_is_not_adopted_by_an_agent_with_tls(env, scheduler, tmp_path, pki):
    """A replica started without TLS and left running is stopped by an agent whose spec now sets
    replicas.local.tls: cleaned, not adopted, its engine gone."""
    state = tmp_path / "state"
    agent = h.build_agent(tls_cluster("it-tls-p", scheduler, tmp_path, None, "32800-32899"), state)
    await bounded(agent.start(), "agent start")
    pids: set[int] = set()
    try:
        report = await ready(scheduler, "it-tls-p", "d1", "r1")
        assert report.endpoint.startswith("http://")
        pids = set(h.engine_pids(state).values())
        await bounded(agent.shutdown(stop_replicas=False), "agent shutdown")
        agent = h.build_agent(tls_cluster("it-tls-p", scheduler, tmp_path, pki, "32800-32899"), state)
        await bounded(agent.start(), "agent start")
        assert agent.adopted == []
        await h.wait_for(lambda: not any(h.alive(p) for p in pids), timeout_s=15, what="the plaintext engine stopped")
        assert h.engine_pids(state) == {}
    finally:
        await bounded(agent.shutdown(stop_replicas=True), "agent shutdown")
        h.kill_engines(pids)
