"""The fake agent the scheduler's integration tests drive: a test that steps the cluster in a task
while it connects must not break the stream. Two tasks writing on one gRPC stream at once end it
("RPC already finished"), which made ``test_redis_lost_under_a_running_scheduler`` fail about once
in thirty runs; ``FakeCluster`` now lets connect() and step() take turns."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from meridian.fleet import models as fm
from scheduler import service, testing
from scheduler.admin import client as admin_client
from scheduler.server import auth

SPECS = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 1, max_replicas: 1}
---
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c1}
spec:
  cloud: aws
  region: us-east-1
  auth: {token_env: MERIDIAN_TOKEN_C1}
  pools: [{name: l4, instance_type: g6.xlarge, max_nodes: 2}]
"""


@contextlib.asynccontextmanager
async def leading_node(tmp_path) -> AsyncIterator[service.SchedulerService]:
    """A scheduler on SQLite with SPECS applied, once it leads; stopped on exit."""
    tokens = auth.TokenBook(auth.TokensFile({"c1": auth.digest("c1-token")}, ()), env={})
    node = service.SchedulerService(testing.local_config(f"sqlite://{tmp_path}/s.db", scheduler_id="n"), env={},
                                    tokens=tokens, admin_auth=auth.AdminAuth(auth.digest("admin")))
    await node.start()
    try:
        client = admin_client.AdminClient(f"http://127.0.0.1:{node.admin_port}", "admin", env={})
        await asyncio.to_thread(client.apply, [{"name": "specs.yaml", "text": SPECS}])
        await testing.wait_for(lambda: node.token > 0, what="leading")
        yield node
    finally:
        await node.stop(grace_s=0.5)


def fake_cluster(node: service.SchedulerService) -> testing.FakeCluster:
    return testing.FakeCluster(testing.FakeAgent([f"127.0.0.1:{node.grpc_port}"], "c1", "c1-token", cloud=fm.Cloud.AWS),
                               [testing.gpu_pool("l4", nodes=2, nodes_max=2)])


async def test_connect_while_a_task_steps_keeps_the_stream(tmp_path):
    """Ten times over: a task steps the cluster as fast as it can while connect() says Hello and
    reports; the stream stays open and unbroken."""
    async with leading_node(tmp_path) as node:
        for _ in range(10):
            cluster = fake_cluster(node)
            stop = asyncio.Event()

            async def steps(cluster=cluster, stop=stop) -> None:
                while not stop.is_set():
                    if cluster.agent.connected:
                        await cluster.step()
                    await asyncio.sleep(0)

            stepper = asyncio.create_task(steps())
            try:
                await cluster.connect()
                await asyncio.sleep(0.2)
                assert cluster.agent.connected and cluster.agent.ended is None
            finally:
                stop.set()
                await stepper
                await cluster.agent.close()


async def test_a_write_after_the_scheduler_ended_the_stream_says_so(tmp_path):
    """The scheduler standing down ends the agents' streams; a step that writes after that raises
    StreamEnded (a RuntimeError the tests' drive loops reconnect on), not asyncio's
    InvalidStateError, which had ended a drive loop for good."""
    async with leading_node(tmp_path) as node:
        cluster = fake_cluster(node)
        try:
            await cluster.connect()
            await node.stop(grace_s=0.5)
            await testing.wait_for(lambda: not cluster.agent.connected, what="the stream ended")
            with pytest.raises(testing.StreamEnded, match="stream ended"):
                await cluster.step()
        finally:
            await cluster.agent.close()
