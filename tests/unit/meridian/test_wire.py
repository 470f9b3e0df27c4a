"""Domain types survive the trip through protobuf unchanged."""

from __future__ import annotations

import pytest

from meridian import fleet
from meridian.fleet import wire
from meridian.v1 import capacity_pb2

LOAD = fleet.ReplicaLoad(3, 2, 0.41, 0.3, fleet.LatencyPercentiles(120, 300, 800),
                         fleet.LatencyPercentiles(20, 30, 45), 812.5, 4.2, 1_764_000_000.5)


@pytest.mark.parametrize("queue_time", [None, fleet.LatencyPercentiles(0.0, 0.0, 0.0),
                                        fleet.LatencyPercentiles(5, 40, 210)])
def test_a_load_keeps_its_queue_time_or_its_absence(queue_time):
    """A queue time of zero (measured: no wait) stays distinct from none reported (an engine or an
    older agent without it), since the autoscaler treats the two differently."""
    load = fleet.ReplicaLoad(3, 0, 0.4, 0.0, fleet.LatencyPercentiles(100, 200, 900), queue_time=queue_time)
    assert wire.load_from_pb(wire.load_to_pb(load)) == load


def test_directives_round_trip():
    """Every directive action keeps its fields, ids and fencing token through the wire."""
    runtime = fleet.RuntimeSpec("meta-llama/Llama-3.1-8B-Instruct", "llama", tp_size=2, extra_args=("--x", "1"),
                                env={"A": "b"}, max_running_requests=64)
    for action in (fleet.StartReplica("r1", "chat", "abc", runtime, "l4", 2, "{}", ("node-2",)),
                   fleet.DrainReplica("r1", 30), fleet.ResizePool("l4", 5)):
        d = fleet.Directive("d-1", action, fencing_token=7)
        assert wire.directive_from_pb(wire.directive_to_pb(d)) == d


def test_reports_pools_events_round_trip():
    """Replica reports, GPU pools, acks and events keep every field."""
    report = fleet.ReplicaReport("r1", "chat", "abc", "http://127.0.0.1:1", fleet.ReplicaState.READY, LOAD,
                                 "l4", 1, 12.5, 1, "", "llama", 1_764_000_000.0, "node-3")
    assert wire.report_from_pb(wire.report_to_pb(report)) == report
    pool = fleet.GpuPool("l4", "L4", 24, 1, "g6.xlarge", 2, 0, 8, 1, fleet.Tier.SPOT, 0.34, 6,
                         fleet.ProvisioningState.SCALING_UP, "us-east-1a", 1)
    assert wire.pool_from_pb(wire.pool_to_pb(pool)) == pool
    ack = fleet.DirectiveAck("d-1", fleet.DirectiveOutcome.REFUSED, "unknown pool 'x'")
    assert wire.ack_from_pb(wire.ack_to_pb(ack)) == ack
    event = fleet.Event(fleet.EventKind.SPOT_INTERRUPTION, "l4", "", "notice", 1_764_000_120.0)
    assert wire.event_from_pb(wire.event_to_pb(event)) == event


def test_routing_table_and_traffic_round_trip():
    """Routing tables (with each model's max_rtt_ms and TTFT/TPOT targets) and traffic reports keep every
    replica and sample."""
    table = fleet.RoutingTable(9, (fleet.ModelRoutes("llama", "chat", (fleet.RouteReplica(
        "r1", "http://127.0.0.1:1", fleet.Cloud.GCP, "us-central1", "us-central1-a", fleet.ReplicaState.DRAINING,
        0.5, LOAD, "L4", "gcp-usc1", "abc", fleet.Tier.SPOT),), "latency", False, 8192, 90.0, 800.0, 100.0),), 1_764_000_000.0, "s1")
    assert wire.table_from_pb(wire.table_to_pb(table)) == table
    report = fleet.TrafficReport("rt1", "eu-west", 1.0, 11.0, (fleet.TrafficSample("llama", "eu-west", 10, 100, 50, 1, 2, 300.0),
                                                                fleet.TrafficSample("llama", "eu-west", 3, 30, 9, 2, 0,
                                                                                    410.0, "rev-b")))
    assert wire.traffic_from_pb(wire.traffic_to_pb(report)) == report


def test_unset_enum_is_rejected():
    """A message with an unset enum is a clear WireError, not a silent default."""
    with pytest.raises(wire.WireError, match="replica state"):
        wire.report_from_pb(capacity_pb2.ReplicaReport(replica_id="r1"))
    with pytest.raises(wire.WireError, match="no action"):
        wire.directive_from_pb(capacity_pb2.Directive(directive_id="d"))
