"""RoutingService: versioned tables on every change, across leader changes; traffic reports."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from tests.unit.scheduler.service_harness import ROUTER_TOKEN, TOKENS, leading

from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import routing_pb2, routing_pb2_grpc
from scheduler import testing


class Watcher:
    """A WatchRoutes stream read by a background task (a timed-out read must not cancel the call)."""

    def __init__(self, address: str, token: str = ROUTER_TOKEN, known_version: int = 0):
        self.channel = grpc.aio.insecure_channel(address)
        stub = routing_pb2_grpc.RoutingServiceStub(self.channel)
        self.call = stub.WatchRoutes(routing_pb2.WatchRoutesRequest(router_id="r", router_region="na-east",
                                                                    known_version=known_version, token=token))
        self.tables: asyncio.Queue = asyncio.Queue()
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for msg in self.call:
                self.tables.put_nowait(wire.table_from_pb(msg))
        except grpc.aio.AioRpcError as exc:
            self.tables.put_nowait(exc)

    async def next(self, timeout_s: float = 10.0) -> fm.RoutingTable:
        item = await asyncio.wait_for(self.tables.get(), timeout_s)
        if isinstance(item, Exception):
            raise item
        return item

    async def close(self) -> None:
        self.call.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.channel.close()


def report(rid: str, state: fm.ReplicaState = fm.ReplicaState.READY) -> fm.ReplicaReport:
    return fm.ReplicaReport(rid, "chat", "rev", f"http://10.0.0.1/{rid}", state, pool_id="l4", gpu_count=1,
                            served_model_name="chat")


async def test_tables_are_published_on_every_change_with_increasing_versions(make_service):
    """A watcher gets the current table, then a higher version whenever the routable replicas change."""
    svc = await leading(await make_service())
    agent = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", TOKENS["c1"])
    watcher = Watcher(f"127.0.0.1:{svc.grpc_port}")
    try:
        await agent.connect()
        await agent.inventory([testing.gpu_pool("l4")])
        await agent.replicas([report("r1")])
        seen: list[fm.RoutingTable] = []

        def has(rids: set[str]) -> bool:
            return bool(seen) and {r.replica_id for m in seen[-1].models for r in m.replicas} == rids

        while not has({"r1"}):
            seen.append(await watcher.next())
        await agent.replicas([report("r1"), report("r2", fm.ReplicaState.STARTING)])
        await agent.replicas([report("r1"), report("r2")])
        while not has({"r1", "r2"}):
            seen.append(await watcher.next())
        await agent.replicas([report("r2")])
        while not has({"r2"}):
            seen.append(await watcher.next())
        versions = [t.version for t in seen]
        assert versions == sorted(set(versions)), versions
        assert seen[-1].scheduler_id == "node0"
        route = seen[-1].models[0].replicas[0]
        assert (route.cluster_id, route.cloud, route.gpu_type, route.endpoint) == \
            ("c1", fm.Cloud.LOCAL, "L4", "http://10.0.0.1/r2")
    finally:
        await watcher.close()
        await agent.close()


async def test_watcher_with_the_current_version_gets_it_on_connect_then_each_change(make_service):
    """A router that already has the current version (restarted from its saved table) is still sent
    it on connect, so it knows the stream is live and its table current; then each change."""
    svc = await leading(await make_service())
    await testing.wait_for(lambda: svc.route_hub.version > 0, what="first table")
    current = svc.route_hub.version
    watcher = Watcher(f"127.0.0.1:{svc.grpc_port}", known_version=current)
    agent = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", TOKENS["c1"])
    try:
        assert (await watcher.next(timeout_s=2.0)).version == current
        with pytest.raises(asyncio.TimeoutError):
            await watcher.next(timeout_s=0.5)
        await agent.connect()
        await agent.replicas([report("r1")])
        table = await watcher.next()
        assert table.version > current
    finally:
        await watcher.close()
        await agent.close()


async def test_versions_keep_increasing_across_a_leader_change(make_service, tmp_path):
    """A new leader on the same store publishes versions above every version the old one published,
    and a standby serves routers the stored table."""
    first = await leading(await make_service())
    await testing.wait_for(lambda: first.route_hub.version > 0, what="first table")
    standby = await make_service()
    await testing.wait_for(lambda: standby.route_hub.version == first.route_hub.version, what="standby follows")
    old = first.route_hub.version
    await first.stop(grace_s=0.1)
    await leading(standby)
    agent = testing.FakeAgent([f"127.0.0.1:{standby.grpc_port}"], "c1", TOKENS["c1"])
    try:
        await agent.connect()
        await agent.replicas([report("r9")])
        await testing.wait_for(lambda: standby.route_hub.table and any(
            r.replica_id == "r9" for m in standby.route_hub.table.models for r in m.replicas), what="new table")
        assert standby.route_hub.version > old
    finally:
        await agent.close()


async def test_router_token_is_required(make_service):
    """WatchRoutes and ReportTraffic with a wrong router token are refused with UNAUTHENTICATED."""
    svc = await leading(await make_service())
    watcher = Watcher(f"127.0.0.1:{svc.grpc_port}", token="nope")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await watcher.next()
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        await watcher.close()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await routing_pb2_grpc.RoutingServiceStub(ch).ReportTraffic(routing_pb2.TrafficReport(token="nope"))
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_traffic_reports_become_demand_per_model_and_client_region(make_service):
    """ReportTraffic samples are stored as demand per (model, client region), summed over routers."""
    svc = await leading(await make_service())
    now = svc.clock.now()

    def traffic(router: str, requests: int) -> routing_pb2.TrafficReport:
        rep = fm.TrafficReport(router, "na-east", now - 10, now, (
            fm.TrafficSample("chat", "na-east", requests=requests, in_flight=3, ttft_p99_ms=250.0),
            fm.TrafficSample("chat", "eu-west", requests=10)))
        return wire.traffic_to_pb(rep, ROUTER_TOKEN)

    async with grpc.aio.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as ch:
        stub = routing_pb2_grpc.RoutingServiceStub(ch)
        ack = await stub.ReportTraffic(traffic("router-a", 100))
        await stub.ReportTraffic(traffic("router-b", 50))
    assert ack.accepted_samples == 2
    demand = {(d.model, d.client_region): d for d in await svc.traffic.demand(svc.clock.now(), 60)}
    assert demand[("chat", "na-east")].requests_per_s == pytest.approx(15.0)
    assert demand[("chat", "na-east")].in_flight == 6
    assert demand[("chat", "eu-west")].requests_per_s == pytest.approx(2.0)


@pytest.mark.parametrize("version, accepted", [("0.2.0", True), ("0.1.4", True), ("", True), ("1.0.0", False),
                                               ("0.0.3", False)])
async def test_router_versions_outside_the_skew_rule_are_refused(make_service, version, accepted):
    """WatchRoutes and ReportTraffic refuse a router two minors away or of another major version with
    FAILED_PRECONDITION and the reason; an empty version (a router from before the field) is 0.1."""
    svc = await leading(await make_service())
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{svc.grpc_port}")
    stub = routing_pb2_grpc.RoutingServiceStub(channel)
    try:
        report = wire.traffic_to_pb(fm.TrafficReport("r", "na-east", 0.0, 1.0, ()), ROUTER_TOKEN,
                                    router_version=version)
        if accepted:
            assert (await stub.ReportTraffic(report, timeout=10)).accepted_samples == 0
        else:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.ReportTraffic(report, timeout=10)
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "this scheduler (0.2.0)" in err.value.details()
            call = stub.WatchRoutes(wire.watch_request_to_pb("r", "na-east", 0, ROUTER_TOKEN, router_version=version))
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call.read()
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        await channel.close()
