"""The agent's status server takes spot preemptions on demand when its cloud is simulated."""

from __future__ import annotations

import random

import aiohttp

from agents import status as status_mod
from agents import metrics as metrics_mod
from agents.providers import sim
from meridian import spec

CLUSTER = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c1}
spec:
  cloud: aws
  region: us-east-1
  provider: sim
  auth: {token_env: T}
  pools:
    - {name: l4-spot, instance_type: g6.xlarge, tier: spot, max_nodes: 4, initial_nodes: 2}
    - {name: l4, instance_type: g6.xlarge, max_nodes: 4, initial_nodes: 1}
"""


async def test_preempt_endpoint_notifies_every_spot_node():
    """POST /sim/preempt serves a notice to each running spot node and none to on-demand nodes."""
    cluster = spec.load_text(CLUSTER).of_kind("Cluster")[0]
    now = [1000.0]
    cloud = sim.SimCloud(cluster, clock=lambda: now[0], rng=random.Random(1))

    def preempt(pool_id, notice_s):
        return [{"pool_id": n.pool_id, "node_id": n.node_id} for n in cloud.preempt_wave(pool_id, notice_s)]

    server = status_mod.StatusServer(metrics_mod.AgentMetrics("c1"), dict, port=0, preempt=preempt)
    port = await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://127.0.0.1:{port}/sim/preempt", json={"notice_s": 5}) as resp:
                assert resp.status == 200
                body = await resp.json()
            assert sorted(n["pool_id"] for n in body["notices"]) == ["l4-spot", "l4-spot"]
            assert {n.pool_id for n in cloud.notices()} == {"l4-spot"}
            async with session.post(f"http://127.0.0.1:{port}/sim/preempt", json={"pool_id": "nope"}) as resp:
                assert resp.status == 404 and "no pool 'nope'" in (await resp.json())["error"]
            async with session.post(f"http://127.0.0.1:{port}/sim/preempt", json={"notice_s": -1}) as resp:
                assert resp.status == 400
    finally:
        await server.stop()
