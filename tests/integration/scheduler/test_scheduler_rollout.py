"""A rollout through a real scheduler node on loopback (gRPC agent stream and router traffic reports,
the admin API, SQLite): a canary replaces the replicas one step at a time, ``meridian get
deployment`` and the status show it, and a revision whose routed requests fail is rolled back.

Real time, kept short (step_duration_s of 1 s, ticks of 0.25 s): about 10 s of wall time."""

from __future__ import annotations

import asyncio
import contextlib
import io

import grpc
import pytest

from meridian.cli import main as cli
from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import routing_pb2_grpc
from scheduler import service, testing
from scheduler.admin import client as admin_client
from scheduler.server import auth

ADMIN, CLUSTER, ROUTER = "admin-token", "c1-token", "router-token"
SPECS = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat, revision: %s}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 2, max_replicas: 2, scale_up_delay_s: 0}
  rollout: {strategy: canary, steps_percent: [50, 100], step_duration_s: 1, rollback: {error_rate: 0.05}}
---
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c1}
spec:
  cloud: aws
  region: us-east-1
  auth: {token_env: MERIDIAN_TOKEN_C1}
  pools: [{name: l4, instance_type: g6.xlarge, max_nodes: 4}]
"""


@pytest.fixture
async def node(tmp_path):
    cfg = testing.local_config(f"sqlite://{tmp_path}/state.db", scheduler_id="node0")
    tokens = auth.TokenBook(auth.TokensFile({"c1": auth.digest(CLUSTER)}, (auth.digest(ROUTER),)), env={})
    svc = service.SchedulerService(cfg, env={}, tokens=tokens, admin_auth=auth.AdminAuth(auth.digest(ADMIN)))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop(grace_s=0.5)


async def drive(cluster: testing.FakeCluster, stop: asyncio.Event) -> None:
    """The agent: carry out directives and report, every 0.1 s, until told to stop."""
    while not stop.is_set():
        await cluster.step()
        await asyncio.sleep(0.1)


async def _equals(value, expected) -> bool:
    return await value == expected


def running(cluster: testing.FakeCluster) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in cluster.replicas.values():
        if r.state is fm.ReplicaState.READY:
            out[r.revision] = out.get(r.revision, 0) + 1
    return out


async def test_canary_and_rollback_through_a_real_scheduler(node, tmp_path):
    """Over real gRPC: v2 replaces v1 one replica per step (start, then drain of an old one, then the
    next start), the CLI shows the completed rollout, and v3, whose routed requests fail, is rolled
    back: its replica drains and v2 is back at full size."""
    admin = admin_client.AdminClient(f"http://127.0.0.1:{node.admin_port}", ADMIN, env={})
    await asyncio.to_thread(admin.apply, [{"name": "v1.yaml", "text": SPECS % "v1"}])
    await testing.wait_for(lambda: node.token > 0, what="leading")
    agent = testing.FakeAgent([f"127.0.0.1:{node.grpc_port}"], "c1", CLUSTER, cloud=fm.Cloud.AWS)
    cluster = testing.FakeCluster(agent, [testing.gpu_pool("l4", nodes=4, nodes_max=4)])
    await cluster.connect()
    stop = asyncio.Event()
    driver = asyncio.create_task(drive(cluster, stop))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{node.grpc_port}")
    try:
        await testing.wait_for(lambda: sum(running(cluster).values()) == 2, what="two v1 replicas")
        v1 = next(iter(running(cluster)))

        seen = len(agent.received)
        await asyncio.to_thread(admin.apply, [{"name": "v2.yaml", "text": SPECS % "v2"}])
        await testing.wait_for(lambda: len(running(cluster)) == 1 and v1 not in running(cluster), timeout_s=30,
                               what="v2 rolled out")
        v2 = next(iter(running(cluster)))
        order = [("start", d.action.revision) if isinstance(d.action, fm.StartReplica) else ("drain", "")
                 for d in agent.received[seen:] if isinstance(d.action, (fm.StartReplica, fm.DrainReplica))]
        assert order == [("start", v2), ("drain", ""), ("start", v2), ("drain", "")]

        async def rollout_phase() -> str:
            return (await asyncio.to_thread(admin.status))["rollouts"][0]["phase"]

        await testing.wait_for(lambda: _equals(rollout_phase(), "complete"), what="rollout complete in the status")
        assert (await asyncio.to_thread(admin.status))["rollouts"][0]["revision"] == v2
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            token_file = tmp_path / "admin-token"
            token_file.write_text(ADMIN)
            code = await asyncio.to_thread(cli.main, ["get", "deployment", "chat", "--token-file", str(token_file),
                                                      "--server", f"http://127.0.0.1:{node.admin_port}"])
        assert code == 0 and f"# rollout: complete, revision {v2} serves (canary" in out.getvalue()

        await asyncio.to_thread(admin.apply, [{"name": "v3.yaml", "text": SPECS % "v3"}])
        await testing.wait_for(lambda: len(running(cluster)) == 2, timeout_s=30, what="a v3 replica ready")
        v3 = next(r for r in running(cluster) if r != v2)
        v3_ids = {rid for rid, r in cluster.replicas.items() if r.revision == v3}
        now = node.clock.now()
        report = fm.TrafficReport("router-1", "na-east", now - 5, now, (
            fm.TrafficSample("chat", "na-east", 60, 6000, 1200, 9, 0, 300.0, v3),
            fm.TrafficSample("chat", "na-east", 60, 6000, 1200, 0, 0, 250.0, v2)))
        stub = routing_pb2_grpc.RoutingServiceStub(channel)
        ack = await stub.ReportTraffic(wire.traffic_to_pb(report, ROUTER), timeout=10)
        assert ack.accepted_samples == 2
        await testing.wait_for(lambda: running(cluster) == {v2: 2}, timeout_s=30, what="v2 restored")
        drained = {d.action.replica_id for d in agent.received if isinstance(d.action, fm.DrainReplica)}
        assert v3_ids <= drained
        item = await asyncio.to_thread(admin.get, "deployment", "chat")
        assert item["rollout"]["phase"] == "rolled_back" and item["rollout"]["rollback_reason"] == "error_rate"
        assert item["rollout"]["old_replicas"]["wanted"] == 2
        metrics = node.metrics.exposition().decode()
        assert 'meridian_scheduler_rollbacks_total{deployment="chat",reason="error_rate"} 1.0' in metrics
    finally:
        stop.set()
        await asyncio.gather(driver, return_exceptions=True)
        await agent.close()
        await channel.close()
