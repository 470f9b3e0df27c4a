"""An in-process agent (sim provider, emulator replicas) against the test scheduler on gRPC
loopback: hello, reports, a replica started, reported ready, drained and gone; a repeated
directive is a no-op; impossible directives are refused; a wrong token is refused and retried;
TLS; a spot notice drains the replicas on the doomed node."""

from __future__ import annotations

import asyncio
import datetime
import gc
import ipaddress

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from meridian.fleet import models

from agents.testing import scheduler as test_scheduler

import agent_it_helpers as h

POOLS = """  cloud: aws
  region: us-east-1
  zone: us-east-1a
  provider: sim
  pools:
    - {name: l4, instance_type: g6.12xlarge, max_nodes: 3, initial_nodes: 1}
    - {name: l4-spot, instance_type: g6.xlarge, tier: spot, max_nodes: 3, initial_nodes: 1}
  sim: {provisioning_delay_s: 1, spot_preemptions_per_node_hour: 0}"""
R = models.ReplicaState


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("MERIDIAN_TEST_TOKEN", h.TOKEN)


async def test_directives_round_trip(env, scheduler, tmp_path):
    """Hello carries identity and token; start -> ACCEPTED -> READY in reports -> SUCCEEDED; the same
    directive again is DUPLICATE and starts nothing; refusals leave nothing; drain -> STOPPED -> gone."""
    cluster = h.cluster_doc("it-a", POOLS, address=scheduler.address, state_dir=str(tmp_path), ports="32300-32399")
    scheduler.tokens["it-a"] = h.TOKEN
    agent = h.build_agent(cluster, tmp_path / "state", replica_overrides={"ended_linger_s": 1.0})
    await agent.start()
    rec = scheduler.record("it-a")
    pids = set()
    try:
        await h.wait_for(lambda: rec.inventory, what="inventory")
        ident, completed = rec.hellos[0]
        assert (ident.cluster_id, ident.cloud, ident.region, completed) == ("it-a", models.Cloud.AWS, "us-east-1", ())
        assert ident.agent_version.startswith("meridian-agent/")
        pool = {p.pool_id: p for p in rec.inventory}["l4"]
        assert (pool.gpu_type, pool.gpus_per_node, pool.nodes_current, pool.gpus_free) == ("L4", 4, 1, 4)

        d1 = h.start("d1", "r1", "l4", gpus=2)
        await scheduler.send("it-a", d1)
        ready = await h.wait_for(lambda: (r := rec.replica("r1")) and r.state == R.READY and r, timeout_s=60,
                                 what="r1 ready")
        pids.update(h.engine_pids(tmp_path / "state").values())
        assert ready.deployment == "chat" and ready.gpu_count == 2 and ready.time_to_ready_s > 0
        assert [a.outcome for a in rec.acks_for("d1")] == [models.DirectiveOutcome.ACCEPTED,
                                                           models.DirectiveOutcome.SUCCEEDED]
        async with aiohttp.ClientSession() as http, http.get(ready.endpoint + "/v1/models") as resp:
            assert resp.status == 200 and (await resp.json())["data"][0]["id"] == "qwen"
        await h.wait_for(lambda: {p.pool_id: p for p in rec.inventory}["l4"].gpus_free == 2, what="GPUs held")

        await scheduler.send("it-a", d1)
        await h.wait_for(lambda: len(rec.acks_for("d1")) == 3, what="duplicate ack")
        assert rec.acks_for("d1")[-1].outcome == models.DirectiveOutcome.DUPLICATE
        assert len(agent.replicas.all()) == 1 and len(h.engine_pids(tmp_path / "state")) == 1

        refusals = {"x1": h.start("x1", "r2", "nope"), "x2": h.start("x2", "r3", "l4", gpus=3),
                    "x3": h.start("x3", "r4", "l4-spot", gpus=2)}
        for d in refusals.values():
            await scheduler.send("it-a", d)
        await h.wait_for(lambda: all(rec.acks_for(i) for i in refusals), what="refusals")
        reasons = {i: rec.acks_for(i)[0] for i in refusals}
        assert all(a.outcome == models.DirectiveOutcome.REFUSED for a in reasons.values())
        assert "unknown pool 'nope'" in reasons["x1"].reason
        assert "not enough free GPUs" in reasons["x2"].reason and "per node" in reasons["x3"].reason
        assert len(agent.replicas.all()) == 1

        await scheduler.send("it-a", h.drain("d2", "r1"))
        await h.wait_for(lambda: (r := rec.replica("r1")) and r.state == R.STOPPED, timeout_s=30, what="stopped")
        await h.wait_for(lambda: rec.reports and rec.replica("r1") is None, timeout_s=30, what="r1 gone")
        assert [a.outcome for a in rec.acks_for("d2")] == [models.DirectiveOutcome.ACCEPTED,
                                                           models.DirectiveOutcome.SUCCEEDED]
        assert not any(h.alive(p) for p in pids)
        async with aiohttp.ClientSession() as http:
            base = f"http://127.0.0.1:{agent.status_server.port}"
            async with http.get(base + "/metrics") as resp:
                metrics = await resp.text()
            async with http.get(base + "/status") as resp:
                status = await resp.json()
        assert status["scheduler"]["connected"] and status["cloud"]["auth_failure"] == ""
        assert [p["pool_id"] for p in status["pools"]] == ["l4", "l4-spot"]
        assert 'meridian_agent_directives_total{action="start_replica",cluster="it-a",outcome="refused"} 3.0' in metrics
        assert 'meridian_agent_gpus{cluster="it-a",pool="l4",state="free"} 4.0' in metrics
        assert 'meridian_agent_stream_connected{cluster="it-a"} 1.0' in metrics
    finally:
        await agent.shutdown(stop_replicas=True)
        h.kill_engines(pids)


async def test_wrong_token_is_refused_then_retried(env, scheduler, tmp_path):
    """A scheduler that refuses the token leaves the agent disconnected, retrying with backoff
    (counted); once the scheduler accepts it, the agent connects."""
    cluster = h.cluster_doc("it-b", POOLS, address=scheduler.address, state_dir=str(tmp_path))
    scheduler.tokens["it-b"] = "another-token"
    agent = h.build_agent(cluster, tmp_path / "state")
    await agent.start()
    try:
        await h.wait_for(lambda: scheduler.rejected >= 2, what="two rejected attempts")
        assert not agent.stream.connected and "UNAUTHENTICATED" in agent.status()["scheduler"]["last_error"]
        assert agent.metrics.reconnects.labels("it-b")._value.get() >= 1
        scheduler.tokens["it-b"] = h.TOKEN
        await h.wait_for(lambda: agent.stream.connected, timeout_s=30, what="connected")
        await h.wait_for(lambda: scheduler.record("it-b").inventory, what="inventory")
    finally:
        await agent.shutdown()


def _self_signed() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "meridian-test-scheduler")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


async def test_tls_to_the_scheduler(env, tmp_path):
    """With scheduler.tls.ca_file the agent connects over TLS to a scheduler with that certificate."""
    key, cert = _self_signed()
    (tmp_path / "ca.pem").write_bytes(cert)
    sched = test_scheduler.TestScheduler({"it-tls": h.TOKEN}, tls=(key, cert))
    await sched.start()
    cluster = h.cluster_doc("it-tls", POOLS, address=sched.address, state_dir=str(tmp_path),
                            tls_ca=str(tmp_path / "ca.pem"))
    agent = h.build_agent(cluster, tmp_path / "state")
    await agent.start()
    try:
        await h.wait_for(lambda: sched.record("it-tls").inventory, what="inventory over TLS")
        assert agent.stream.connected
    finally:
        await agent.shutdown()
        await sched.stop()


async def test_spot_notice_drains_replicas_on_the_node(env, scheduler, tmp_path):
    """A spot notice reaches the scheduler (for the pool and for each replica on the node) and the
    agent drains those replicas before the deadline."""
    cluster = h.cluster_doc("it-c", POOLS, address=scheduler.address, state_dir=str(tmp_path), ports="32400-32499")
    scheduler.tokens["it-c"] = h.TOKEN
    agent = h.build_agent(cluster, tmp_path / "state")
    await agent.start()
    rec = scheduler.record("it-c")
    pids = set()
    try:
        await h.wait_for(lambda: rec.inventory, what="inventory")
        await scheduler.send("it-c", h.start("s1", "spot-r1", "l4-spot"))
        await h.wait_for(lambda: (r := rec.replica("spot-r1")) and r.state == R.READY, timeout_s=60, what="ready")
        pids.update(h.engine_pids(tmp_path / "state").values())
        node = agent.replicas.get("spot-r1").placement.node_id
        agent.provider.cloud.preempt("l4-spot", node, notice_s=40)
        await h.wait_for(lambda: [e for e in rec.events if e.replica_id == "spot-r1"], what="replica notice")
        kinds = {(e.kind, e.pool_id, e.replica_id) for e in rec.events}
        assert (models.EventKind.SPOT_INTERRUPTION, "l4-spot", "") in kinds
        assert (models.EventKind.SPOT_INTERRUPTION, "l4-spot", "spot-r1") in kinds
        await h.wait_for(lambda: (r := rec.replica("spot-r1")) and r.state == R.STOPPED, timeout_s=30, what="drained")
        assert {p.pool_id: p for p in rec.inventory}["l4-spot"].gpus_free == 0  # the doomed node takes no replica
    finally:
        await agent.shutdown(stop_replicas=True)
        h.kill_engines(pids)


async def test_standby_scheduler_redirects_to_the_leader(env, scheduler, tmp_path):
    """A standby that answers UNAVAILABLE with the leader's address in trailing metadata sends the
    agent straight to the leader."""
    standby = test_scheduler.TestScheduler({})
    standby.standby_for = scheduler.address
    await standby.start()
    scheduler.tokens["it-d"] = h.TOKEN
    cluster = h.cluster_doc("it-d", POOLS, address=standby.address, state_dir=str(tmp_path))
    agent = h.build_agent(cluster, tmp_path / "state")
    await agent.start()
    try:
        await h.wait_for(lambda: scheduler.record("it-d").inventory, what="inventory at the leader")
        assert standby.rejected >= 1 and agent.stream.scheduler_id == "test-scheduler"
    finally:
        await agent.shutdown()
        await standby.stop()


async def test_shutdown_leaves_no_stream_task_with_an_unread_error(env, scheduler, tmp_path):
    """An agent shut down while its stream is up ends both halves of the stream: no task is left to
    fail on the finished call ("Task exception was never retrieved ... RPC already finished")."""
    loop = asyncio.get_running_loop()
    unread: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unread.append(context))
    try:
        for i in range(3):
            cluster = h.cluster_doc(f"it-s{i}", POOLS, address=scheduler.address, state_dir=str(tmp_path / str(i)))
            scheduler.tokens[f"it-s{i}"] = h.TOKEN
            agent = h.build_agent(cluster, tmp_path / str(i) / "state")
            await agent.start()
            try:
                await h.wait_for(lambda i=i: scheduler.record(f"it-s{i}").inventory, what="inventory")
            finally:
                await agent.shutdown()
            for _ in range(5):
                await asyncio.sleep(0.05)
                gc.collect()
        assert [c.get("message") for c in unread] == []
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("agent-stream")]
    finally:
        loop.set_exception_handler(previous)
