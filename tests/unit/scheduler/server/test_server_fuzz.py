"""Fuzzing the agent and router message handlers with arbitrary protobuf messages: converters either
convert or raise WireError, the intake absorbs whatever converts, and a live stream fed random
messages never ends in an internal error (UNKNOWN). Crashes found here became regression tests in
test_server_fuzz_regressions.py."""

from __future__ import annotations

import asyncio
import tempfile

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.scheduler.server import pb_strategies as pbs
from tests.unit.scheduler import service_harness
from tests.unit.scheduler.service_harness import TOKENS, leading

from meridian.fleet import wire
from meridian.v1 import capacity_pb2 as cap
from meridian.v1 import routing_pb2 as rt
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler import reconciler, state, testing
from scheduler.control import events as events_mod
from scheduler.control import fleet as fleet_mod
from scheduler.control import intake as intake_mod
from scheduler.state import records

CONVERTERS = [(cap.Hello, wire.hello_from_pb), (cap.GpuPool, wire.pool_from_pb),
              (cap.ReplicaReport, wire.report_from_pb), (cap.DirectiveAck, wire.ack_from_pb),
              (cap.Event, wire.event_from_pb), (rt.TrafficReport, wire.traffic_from_pb),
              (cap.Directive, wire.directive_from_pb), (rt.RoutingTable, wire.table_from_pb)]


@pytest.mark.parametrize("cls,convert", CONVERTERS, ids=[c.__name__ for c, _ in CONVERTERS])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_converters_convert_or_raise_wire_error(cls, convert, data):
    """Any message of the type converts to a domain object or raises WireError, nothing else."""
    msg = data.draw(pbs.message(cls))
    try:
        convert(msg)
    except wire.WireError:
        pass


def make_intake() -> tuple[intake_mod.Intake, fleet_mod.FleetView]:
    clock = clock_mod.ManualClock(1000.0)
    store = state.open_store("sqlite://:memory:", clock=clock)
    metrics = metrics_mod.SchedulerMetrics()
    executor = reconciler.Executor(log_store=records.DirectiveLog(store), transport=Nowhere(),
                                   clock=clock, metrics=metrics, timeouts=reconciler.Timeouts(ack_s=30, start_s=60))
    fleet = fleet_mod.FleetView(15.0)
    intake = intake_mod.Intake(fleet=fleet, executor=executor, events=events_mod.EventTracker(base_s=60, max_s=600),
                               metrics=metrics, fence=lambda: 0, wake=lambda why: None, on_fenced=lambda: None)
    return intake, fleet


class Nowhere:
    """A transport that delivers nothing (the intake, not sending, is under test)."""

    async def send(self, cluster_id, directive) -> bool:
        return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(pbs.message(cap.AgentMessage), min_size=1, max_size=8))
def test_the_intake_absorbs_any_converted_message(messages):
    """Whatever an agent's messages convert to (pools, reports, acks, events), the intake takes it in
    without raising, and the fleet view stays readable."""
    async def run() -> None:
        intake, fleet = make_intake()
        hello = wire.hello_from_pb(cap.Hello(cluster_id="c1", cloud=1, region="us-east-1"))
        await intake.on_hello(hello[0], (), 1000.0)
        for msg in messages:
            kind = msg.WhichOneof("payload")
            try:
                if kind == "inventory":
                    await intake.on_inventory("c1", [wire.pool_from_pb(p) for p in msg.inventory.pools],
                                              msg.inventory.complete, 1001.0)
                elif kind == "replicas":
                    await intake.on_replicas("c1", [wire.report_from_pb(r) for r in msg.replicas.replicas],
                                             msg.replicas.complete, 1001.0)
                elif kind == "ack":
                    await intake.on_ack("c1", wire.ack_from_pb(msg.ack), 1001.0)
                elif kind == "event":
                    await intake.on_event("c1", wire.event_from_pb(msg.event), 1001.0)
                else:
                    await intake.on_heartbeat("c1", 1001.0)
            except wire.WireError:
                pass
        fleet.snapshot(1002.0)

    asyncio.run(run())


BATCHES = st.lists(st.lists(pbs.message(cap.AgentMessage), min_size=1, max_size=6), min_size=8, max_size=8)
ALLOWED_ENDINGS = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED)


async def feed(address: str, batch: list) -> grpc.StatusCode | None:
    """Send ``batch`` then a heartbeat on a fresh stream; the status it ended with, None if still open."""
    agent = testing.FakeAgent([address], "c1", TOKENS["c1"])
    await agent.connect()
    try:
        for msg in batch:
            msg.sequence = 0  # sequence checks are tested elsewhere; let every message through
            await agent._call.write(msg)
        await agent.heartbeat()
        await asyncio.sleep(0.05)
    except (grpc.aio.AioRpcError, grpc.aio.UsageError, testing.StreamEnded, asyncio.InvalidStateError):
        # The scheduler ended the stream while we wrote (gRPC's "RPC already finished" when the
        # write lands after the end): its status says why.
        pass
    try:
        if agent.connected:
            return None
        return (await agent.wait_closed()).code
    finally:
        await agent.close()


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=BATCHES)
def test_a_live_stream_fed_random_messages_never_fails_internally(batches):
    """Over a real Connect stream, random message sequences end, at worst, with a refusal the
    protocol names (INVALID_ARGUMENT, PERMISSION_DENIED); never UNKNOWN or INTERNAL (a handler crash),
    and the scheduler keeps serving the next stream."""
    async def run() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with service_harness.service_factory(tmp, directives_enabled=False, adopt_grace_s=0.0) as make:
                svc = await leading(await make())
                address = f"127.0.0.1:{svc.grpc_port}"
                for batch in batches:
                    code = await feed(address, batch)
                    assert code in (None, *ALLOWED_ENDINGS), f"stream ended {code}: after {batch}"
                assert await feed(address, [cap.AgentMessage(heartbeat=cap.Heartbeat())]) is None

    asyncio.run(run())
