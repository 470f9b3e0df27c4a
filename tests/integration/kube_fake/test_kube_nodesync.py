"""NodeSync mirrors a real SimCloud's state file into the fake cluster's Nodes: nodes join when the
sim's provisioning finishes, leave when the sim drops them (their pods end NodeLost), and carry the
AWS Node Termination Handler's cordon + taint while the sim has an interruption notice for them."""

from __future__ import annotations

import random

import kube_helpers as h

from agents.providers import sim
from agents.testing.kube import nodesync
from meridian import spec

CLUSTER = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: k8s-sim}
spec:
  cloud: aws
  region: us-east-1
  provider: sim
  auth: {token_env: T}
  pools:
    - {name: l4, instance_type: g6.xlarge, max_nodes: 4, initial_nodes: 2}
    - {name: l4-spot, instance_type: g6.xlarge, tier: spot, max_nodes: 4, initial_nodes: 1}
  sim: {provisioning_delay_s: 30, spot_preemptions_per_node_hour: 0}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def pools() -> dict[str, nodesync.PoolNodes]:
    return {name: nodesync.PoolNodes(gpus=1, labels={"eks.amazonaws.com/nodegroup": name})
            for name in ("l4", "l4-spot")}


async def test_nodes_follow_the_sim_cloud(cluster, core, tmp_path):
    """Running sim nodes become Ready Nodes with the pool label and GPUs; provisioning ones wait; dropped ones go."""
    clock = Clock()
    state = tmp_path / "sim-cloud.json"
    cloud = sim.SimCloud(spec.load_text(CLUSTER).of_kind("Cluster")[0], clock=clock, rng=random.Random(0),
                         state_path=state)
    cloud.snapshot()  # the agent's discovery persists the file
    sync = nodesync.NodeSync(cluster, state, pools=pools(), clock=clock)
    result = sync.sync_once()
    assert sorted(result.added) == ["k8s-sim-l4-0001", "k8s-sim-l4-0002", "k8s-sim-l4-spot-0001"]
    node = await core.read_node("k8s-sim-l4-0001")
    assert node.metadata.labels["meridian.dev/pool"] == "l4"
    assert node.metadata.labels["eks.amazonaws.com/nodegroup"] == "l4"
    assert node.status.allocatable["nvidia.com/gpu"] == "1" and node.spec.provider_id.startswith("sim://l4/")
    cloud.resize("l4", 3)
    assert sync.sync_once().added == []  # still provisioning
    clock.now += 31
    cloud.snapshot()
    assert sync.sync_once().added == ["k8s-sim-l4-0003"]
    cloud.resize("l4", 2)  # drops the newest running node
    assert sync.sync_once().removed == ["k8s-sim-l4-0003"]
    assert len((await core.list_node()).items) == 3


async def test_interruption_notice_cordons_and_taints_then_the_node_and_its_pods_go(cluster, core, tmp_path):
    """A sim spot notice cordons the node and adds the NTH taint; when the sim drops the node its pod ends NodeLost."""
    clock = Clock()
    state = tmp_path / "sim-cloud.json"
    cloud = sim.SimCloud(spec.load_text(CLUSTER).of_kind("Cluster")[0], clock=clock, rng=random.Random(0),
                         state_path=state)
    cloud.snapshot()
    sync = nodesync.NodeSync(cluster, state, pools=pools(), clock=clock)
    sync.sync_once()
    await core.create_namespaced_pod("default", h.pod_manifest(
        "on-spot", nodeSelector={"meridian.dev/pool": "l4-spot"}))
    await h.wait_until(lambda: cluster.container_pid("default", "on-spot"), what="pod on spot runs")
    notice = cloud.preempt("l4-spot", notice_s=60)
    result = sync.sync_once()
    assert result.noticed == ["k8s-sim-l4-spot-0001"]
    node = await core.read_node("k8s-sim-l4-spot-0001")
    assert node.spec.unschedulable is True
    taint = next(t for t in node.spec.taints if t.key == "aws-node-termination-handler/spot-itn")
    assert taint.effect == "NoSchedule" and taint.value == nodesync.label_safe(notice.notice_id)
    assert sync.sync_once().noticed == []  # marked once
    clock.now += 61
    cloud.notices()  # the sim removes the node once its notice ran out
    assert sync.sync_once().removed == ["k8s-sim-l4-spot-0001"]
    assert [p.metadata.name for p in (await core.list_namespaced_pod("default")).items] == []
    assert cluster.container_pid("default", "on-spot") is None


async def test_unreadable_state_changes_nothing_and_foreign_nodes_stay(cluster, tmp_path):
    """A corrupt state file leaves the Nodes as they were, and Nodes NodeSync did not register are never removed."""
    state = tmp_path / "sim-cloud.json"
    state.write_text('{"pools": {"l4": {"nodes": [{"node_id": "a-1", "ready_at": 0}]}}}')
    cluster.add_node("operator-node")
    sync = nodesync.NodeSync(cluster, state, pools=pools(), interval_s=0.05)
    await sync.start()
    try:
        await h.wait_until(lambda: {n["metadata"]["name"] for n in cluster.nodes()} == {"a-1", "operator-node"},
                           what="a-1 registered")
        state.write_text("{not json")
        syncs = sync.syncs
        await h.wait_until(lambda: sync.syncs >= syncs + 3 or None, what="more syncs")
        assert {n["metadata"]["name"] for n in cluster.nodes()} == {"a-1", "operator-node"}
        state.write_text('{"pools": {}}')
        await h.wait_until(lambda: {n["metadata"]["name"] for n in cluster.nodes()} == {"operator-node"},
                           what="a-1 removed, operator-node kept")
    finally:
        await sync.stop()
