"""CapacityService: agent authentication, one cluster per stream, standby redirects, liveness."""

from __future__ import annotations

import grpc
import prometheus_client
import pytest
from tests.unit.scheduler.service_harness import TOKENS, leading

from meridian import spec
from meridian.fleet import models as fm
from scheduler import testing


def addr(svc) -> str:
    return f"127.0.0.1:{svc.grpc_port}"


def failures(svc, reason: str) -> float:
    return svc.metrics.registry.get_sample_value("meridian_scheduler_auth_failures_total",
                                                 {"surface": "agent", "reason": reason}) or 0.0


@pytest.mark.parametrize("cluster,token,reason", [
    ("nobody", "whatever", "unknown_cluster"),
    ("c1", "not-the-token", "wrong_token"),
    ("c1", TOKENS["c2"], "other_cluster_token"),
])
async def test_bad_credentials_are_refused_and_counted(make_service, cluster, token, reason):
    """An unknown cluster, a wrong token, or another cluster's token gets UNAUTHENTICATED, and the
    refusal is counted by reason."""
    svc = await leading(await make_service())
    agent = testing.FakeAgent([addr(svc)], cluster, token)
    with pytest.raises(testing.Refused) as err:
        await agent.connect()
    assert err.value.code is grpc.StatusCode.UNAUTHENTICATED
    assert failures(svc, reason) == 1
    assert cluster not in svc.hub.connected()


async def test_valid_token_is_welcomed_with_the_fencing_token(make_service):
    """The right token gets a Welcome carrying the leader's id, fencing token and heartbeat interval."""
    svc = await leading(await make_service())
    agent = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"])
    welcome = await agent.connect()
    try:
        assert welcome.scheduler_id == "node0" and welcome.fencing_token == svc.token
        assert welcome.heartbeat_interval_s == 1
    finally:
        await agent.close()


async def test_token_from_a_cluster_spec_environment_variable(make_service):
    """A Cluster spec's auth.token_env names the token: its agent is accepted once the spec is applied;
    a wrong token for it is refused."""
    svc = await leading(await make_service(env={"MERIDIAN_TOKEN_LAB": "lab-secret"}))
    text = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: lab}
spec:
  cloud: aws
  region: us-east-1
  auth: {token_env: MERIDIAN_TOKEN_LAB}
  pools: [{name: l4, instance_type: g6.xlarge}]
"""
    await svc.spec_store.apply(spec.load_text(text, "lab.yaml").documents, 0.0)
    svc.loop.wake()
    await testing.wait_for(lambda: "lab" in svc.tokens.known_clusters(), what="cluster tokens reloaded")
    with pytest.raises(testing.Refused):
        await testing.FakeAgent([addr(svc)], "lab", "guess").connect()
    agent = testing.FakeAgent([addr(svc)], "lab", "lab-secret")
    await agent.connect()
    await agent.close()


async def test_a_stream_cannot_switch_to_another_cluster(make_service):
    """A second Hello naming another cluster ends the stream with PERMISSION_DENIED."""
    svc = await leading(await make_service())
    agent = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"])
    await agent.connect()
    await agent.hello_again("c2")
    ended = await agent.wait_closed()
    assert ended.code is grpc.StatusCode.PERMISSION_DENIED
    assert failures(svc, "cluster_switch") == 1
    await agent.close()


async def test_an_agent_cannot_report_another_clusters_replica(make_service):
    """A replica already held by cluster c1 is not taken over by a report from c2 (dropped, counted)."""
    svc = await leading(await make_service())
    a1 = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"])
    a2 = testing.FakeAgent([addr(svc)], "c2", TOKENS["c2"])
    rep = fm.ReplicaReport("r1", "chat", "rev", "http://10.0.0.1:1", fm.ReplicaState.READY, pool_id="l4", gpu_count=1,
                           served_model_name="chat")
    try:
        await a1.connect()
        await a1.replicas([rep])
        await testing.wait_for(lambda: svc.fleet.cluster_of_replica("r1") == "c1", what="c1 report")
        await a2.connect()
        await a2.replicas([rep])
        await testing.wait_for(lambda: failures(svc, "foreign_replica") == 1, what="foreign report refused")
        assert svc.fleet.cluster_of_replica("r1") == "c1"
    finally:
        await a1.close()
        await a2.close()


async def test_standby_redirects_agents_to_the_leader(make_service):
    """A standby refuses the stream with UNAVAILABLE and names the leader; the agent follows it."""
    leader = await leading(await make_service())
    standby = await make_service()
    await testing.wait_for(lambda: standby.leader_hint() == addr(leader), what="standby knows the leader")
    assert standby.token == 0
    agent = testing.FakeAgent([addr(standby)], "c1", TOKENS["c1"])
    await agent.connect()
    try:
        assert agent.address == addr(leader)
    finally:
        await agent.close()


async def test_silent_agent_is_lost_and_its_replicas_leave_the_routing_table(make_service):
    """An agent silent for lost_after_intervals heartbeats is marked lost and its replicas are no longer
    routable; reconnecting brings the cluster back."""
    svc = await leading(await make_service(heartbeat_interval_s=1, lost_after_intervals=2))
    agent = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"])
    await agent.connect()
    await agent.inventory([testing.gpu_pool("l4")])
    await agent.replicas([fm.ReplicaReport("r1", "chat", "rev", "http://10.0.0.1:1", fm.ReplicaState.READY,
                                           pool_id="l4", gpu_count=1, served_model_name="chat")])

    def routed() -> set[str]:
        table = svc.route_hub.table
        return {r.replica_id for m in table.models for r in m.replicas} if table else set()

    await testing.wait_for(lambda: routed() == {"r1"}, what="replica routed")
    await testing.wait_for(lambda: svc.fleet.snapshot(0).clusters["c1"].lost, what="agent marked lost")
    await testing.wait_for(lambda: routed() == set(), what="replica unroutable")
    assert svc.metrics.registry.get_sample_value("meridian_scheduler_agents", {"status": "lost"}) == 1
    await agent.connect()
    await agent.replicas([fm.ReplicaReport("r1", "chat", "rev", "http://10.0.0.1:1", fm.ReplicaState.READY,
                                           pool_id="l4", gpu_count=1, served_model_name="chat")])
    await testing.wait_for(lambda: routed() == {"r1"}, what="replica routed again")
    await agent.close()


async def test_heartbeats_keep_an_agent_live(make_service):
    """An agent that sends only heartbeats, at its interval, is never marked lost."""
    svc = await leading(await make_service(heartbeat_interval_s=1, lost_after_intervals=2))
    agent = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"])
    await agent.connect()
    try:
        for _ in range(12):  # ~6 s, three times the lost threshold
            await agent.heartbeat()
            await svc.clock.sleep(0.5)
        assert not svc.fleet.snapshot(0).clusters["c1"].lost
    finally:
        await agent.close()


async def test_status_lists_each_clusters_pools_and_replicas(make_service):
    """The status document shows every reported pool (GPUs, tier, price) and replica (state, pool, load)."""
    svc = await leading(await make_service())
    agent = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"])
    await agent.connect()
    try:
        await agent.inventory([testing.gpu_pool("l4", nodes=2)])
        queued = fm.ReplicaLoad(queue_time=fm.LatencyPercentiles(12.0, 48.25, 300.0))
        await agent.replicas([fm.ReplicaReport("r1", "chat", "rev", "http://10.0.0.1:1", fm.ReplicaState.READY,
                                               queued, pool_id="l4", gpu_count=1, served_model_name="chat"),
                              fm.ReplicaReport("r2", "chat", "rev", "http://10.0.0.1:2", fm.ReplicaState.READY,
                                               pool_id="l4", gpu_count=1, served_model_name="chat")])

        async def reported():
            c = next((c for c in (await svc.status())["clusters"] if c["cluster_id"] == "c1"), None)
            return c if c and c["replica_details"] and c["pool_details"] else None

        c1 = await testing.wait_for(reported, what="status with details")
        (pool,) = c1["pool_details"]
        assert (pool["pool_id"], pool["gpu_type"], pool["nodes_current"]) == ("l4", "L4", 2)
        assert pool["price_per_node_hour_usd"] > 0 and pool["tier"] in ("on_demand", "spot", "reserved")
        replica, older = c1["replica_details"]
        assert (replica["replica_id"], replica["state"], replica["pool_id"], replica["served_model_name"]) == (
            "r1", "ready", "l4", "chat")
        # The queue time the autoscaler's SLO rule reads; None where the agent does not report it.
        assert (replica["queue_time_p90_ms"], older["queue_time_p90_ms"]) == (48.2, None)
    finally:
        await agent.close()


async def test_status_and_metrics_show_the_autoscalers_decision(make_service):
    """Each deployment's last autoscaling decision is in /v1/status (replicas, split by client
    region, SLO breach, reason) and in the desired-replicas and SLO-breach gauges; a node that
    stops leading shows none."""
    svc = await leading(await make_service())
    text = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpu_types: [L4]}
  sla: {ttft_p99_ms: 800, tpot_p99_ms: 100, client_regions: [na-east]}
  scaling: {min_replicas: 2, max_replicas: 4}
"""
    await svc.spec_store.apply(spec.load_text(text, "chat.yaml").documents, 0.0)
    svc.loop.wake()

    async def decided():
        status = await svc.status()
        return status["autoscaling"].get("chat")

    chat = await testing.wait_for(decided, what="the autoscaler's decision in the status")
    assert chat["replicas"] == 2 and chat["by_region"] == {"na-east": 2} and chat["slo_breach"] is False
    assert "concurrency" in chat["reason"]
    assert svc.metrics.desired_replicas.labels("chat")._value.get() == 2
    assert svc.metrics.slo_breach.labels("chat")._value.get() == 0
    await svc.elector.resign()  # no longer leading: no decision in the status, no series exported
    await testing.wait_for(lambda: svc.token == 0, what="standing down")
    assert (await svc.status())["autoscaling"] == {}
    exported = prometheus_client.generate_latest(svc.metrics.registry).decode()
    assert 'desired_replicas{deployment="chat"}' not in exported and 'slo_breach{deployment="chat"}' not in exported
