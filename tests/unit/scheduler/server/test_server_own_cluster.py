"""An agent speaks only for its own cluster, on every message path after its Hello: events naming
another cluster's replica, pools whose id could name another cluster's pool, and over-limit
messages are refused, logged and counted, and change nothing."""

from __future__ import annotations

import dataclasses

import grpc
import pytest
from tests.unit.scheduler.service_harness import ROUTER_TOKEN, TOKENS, leading

from meridian import limits
from meridian.fleet import models as fm
from meridian.v1 import routing_pb2, routing_pb2_grpc
from scheduler import testing
from scheduler.server import agents as agents_mod


def addr(svc) -> str:
    return f"127.0.0.1:{svc.grpc_port}"


def sample(svc, name: str, labels: dict) -> float:
    return svc.metrics.registry.get_sample_value(f"meridian_scheduler_{name}", labels) or 0.0


def report(rid: str) -> fm.ReplicaReport:
    return fm.ReplicaReport(rid, "chat", "rev", f"http://10.0.0.1/{rid}", fm.ReplicaState.READY, pool_id="l4",
                            gpu_count=1, served_model_name="chat")


async def two_agents(svc):
    a1 = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"])
    a2 = testing.FakeAgent([addr(svc)], "c2", TOKENS["c2"])
    await a1.connect()
    await a1.inventory([testing.gpu_pool("l4")])
    await a1.replicas([report("r1")])
    await testing.wait_for(lambda: svc.fleet.cluster_of_replica("r1") == "c1", what="c1 holds r1")
    await a2.connect()
    return a1, a2


async def test_a_spot_notice_for_another_clusters_replica_is_refused(make_service):
    """c2 cannot doom c1's replica with a spot interruption notice (which would start a replacement
    and drain it): the event is dropped and counted as foreign_replica; c1's own notice counts."""
    svc = await leading(await make_service())
    a1, a2 = await two_agents(svc)
    try:
        await a2.event(fm.Event(fm.EventKind.SPOT_INTERRUPTION, pool_id="l4", replica_id="r1"))
        await testing.wait_for(lambda: sample(svc, "auth_failures_total",
                                              {"surface": "agent", "reason": "foreign_replica"}) == 1,
                               what="foreign event refused")
        assert svc.events.doomed_at("r1") is None
        await a1.event(fm.Event(fm.EventKind.SPOT_INTERRUPTION, pool_id="l4", replica_id="r1"))
        await testing.wait_for(lambda: svc.events.doomed_at("r1") is not None, what="own notice recorded")
    finally:
        await a1.close()
        await a2.close()


async def test_pool_ids_that_could_name_another_clusters_pool_are_dropped(make_service):
    """A pool id with '/' (pools are keyed cluster/pool) or empty is dropped from the inventory and
    from events and counted as bad_pool_id; the cluster's other pools are kept."""
    svc = await leading(await make_service())
    a1, a2 = await two_agents(svc)
    try:
        await a2.inventory([testing.gpu_pool("c1/l4"), testing.gpu_pool(""), testing.gpu_pool("own")])
        await testing.wait_for(lambda: "own" in svc.fleet.pools_of("c2"), what="c2's own pool")
        assert set(svc.fleet.pools_of("c2")) == {"own"}
        await a2.event(fm.Event(fm.EventKind.STOCK_OUT, pool_id="x/../l4"))
        await testing.wait_for(lambda: sample(svc, "auth_failures_total",
                                              {"surface": "agent", "reason": "bad_pool_id"}) == 3, what="3 refusals")
        assert not any(k.startswith("c1/") for k in svc.events.backoff)
        assert set(svc.fleet.pools_of("c1")) == {"l4"}
    finally:
        await a1.close()
        await a2.close()


@pytest.mark.parametrize("what", ["pools", "replicas"])
async def test_an_over_limit_message_ends_the_stream_naming_the_limit(make_service, what):
    """An Inventory or ReplicaReports with more items than the scheduler accepts per message ends the
    stream with INVALID_ARGUMENT naming the count and the limit; nothing of it is kept."""
    svc = await leading(await make_service())
    agent = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"])
    await agent.connect()
    try:
        if what == "pools":
            n = limits.MAX_POOLS_PER_INVENTORY + 1
            await agent.inventory([testing.gpu_pool(f"p{i}") for i in range(n)])
        else:
            n = limits.MAX_REPLICAS_PER_REPORT + 1
            await agent.replicas([report(f"r{i}") for i in range(n)])
        ended = await agent.wait_closed()
        assert ended.code is grpc.StatusCode.INVALID_ARGUMENT
        assert f"{n} {what} in one message" in ended.details and "at most" in ended.details
        assert sample(svc, "limit_refusals_total", {"surface": "agent", "limit": "inventory" if what == "pools"
                                                    else "replicas"}) == 1
        assert svc.fleet.pools_of("c1") == {} and svc.fleet.cluster_of_replica("r0") is None
    finally:
        await agent.close()


async def test_a_hello_with_too_many_completed_ids_is_refused(make_service):
    """A Hello listing more completed directive ids than accepted is refused before the agent joins."""
    svc = await leading(await make_service())
    agent = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"],
                              completed=[f"d{i}" for i in range(limits.MAX_COMPLETED_IDS_PER_HELLO + 1)])
    with pytest.raises(testing.Refused) as err:
        await agent.connect()
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT and "completed directive ids" in err.value.details
    assert "c1" not in svc.hub.connected()


async def test_a_message_over_the_byte_limit_is_refused_by_grpc(make_service):
    """A message larger than the scheduler's per-message byte bound never reaches the handlers:
    gRPC refuses it (RESOURCE_EXHAUSTED) and nothing is kept."""
    svc = await leading(await make_service())
    agent = testing.FakeAgent([addr(svc)], "c1", TOKENS["c1"])
    await agent.connect()
    try:
        big = dataclasses.replace(report("big"), message="x" * (limits.GRPC_MAX_MESSAGE_BYTES + 1))
        await agent.replicas([big])
        ended = await agent.wait_closed()
        assert ended.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert svc.fleet.cluster_of_replica("big") is None
    finally:
        await agent.close()


async def test_a_traffic_report_with_too_many_samples_is_refused(make_service):
    """ReportTraffic with more samples than accepted answers INVALID_ARGUMENT naming the limit and
    records nothing."""
    svc = await leading(await make_service())
    async with grpc.aio.insecure_channel(addr(svc)) as channel:
        stub = routing_pb2_grpc.RoutingServiceStub(channel)
        n = limits.MAX_TRAFFIC_SAMPLES_PER_REPORT + 1
        request = routing_pb2.TrafficReport(router_id="r", router_region="na-east", token=ROUTER_TOKEN,
                                            samples=[routing_pb2.TrafficSample(model="chat", client_region="na-east",
                                                                               requests=1)] * n)
        request.window_start.FromSeconds(1)
        request.window_end.FromSeconds(2)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.ReportTraffic(request)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and f"at most {n - 1}" in err.value.details()
    assert await svc.traffic.demand(1e12, 1e13) == []
    assert sample(svc, "limit_refusals_total", {"surface": "router", "limit": "traffic_samples"}) == 1


async def test_an_agent_that_stops_reading_is_disconnected_not_buffered():
    """Directives for a session whose agent reads none pile up only to the outbox bound; the next one
    closes the session (the agent reconnects) and is reported undelivered."""
    hub = agents_mod.AgentHub()
    session = hub.attach("c1", "peer")
    directive = fm.Directive("d", fm.DrainReplica("r1", 1))
    for _ in range(agents_mod.OUTBOX_LIMIT):
        assert await hub.send("c1", directive)
    assert not await hub.send("c1", directive)
    assert session.closed and "unread" in session.close_reason
