"""Applying routing tables: endpoint state survives updates, draining replicas get no traffic."""

from __future__ import annotations

from meridian.fleet import models as fm
from router import table, testing


def test_endpoints_survive_updates_and_leave_cleanly():
    """A replica kept across tables keeps its state; one removed is dropped; policy state is reused."""
    state = table.RoutingState()
    state.apply(testing.table(1, {"m": [testing.replica("a", 1), testing.replica("b", 2)]}), "watch")
    a = state.endpoints["a"]
    a.pending = 3
    policy = state.models["m"].policy
    state.apply(testing.table(2, {"m": [testing.replica("a", 1, queued=4)]}), "watch")
    assert state.endpoints["a"] is a and a.pending == 3 and a.load.queued_requests == 4
    assert "b" not in state.endpoints and state.models["m"].policy is policy
    assert state.version == 2 and state.source == "watch"


def test_only_ready_weighted_replicas_are_routable():
    """Draining, starting and failed replicas and zero-weight ones are not routable."""
    state = table.RoutingState()
    state.apply(testing.table(1, {"m": [
        testing.replica("ready", 1), testing.replica("drain", 2, state=fm.ReplicaState.DRAINING),
        testing.replica("start", 3, state=fm.ReplicaState.STARTING), testing.replica("zero", 4, weight=0.0),
    ]}), "watch")
    assert [e.replica_id for e in state.models["m"].routable] == ["ready"]


def test_all_zero_weights_mean_equal_shares():
    """A table whose weights were all left at the proto3 default 0 still routes, equally."""
    state = table.RoutingState()
    state.apply(testing.table(1, {"m": [testing.replica("a", 1, weight=0.0), testing.replica("b", 2, weight=0.0)]}),
                "watch")
    assert [(e.replica_id, e.share) for e in state.models["m"].routable] == [("a", 1.0), ("b", 1.0)]


def test_per_model_policy_and_unknown_policy_fallback():
    """A deployment's policy is used; an unknown one falls back to the router default."""
    state = table.RoutingState(default_policy="least_request")
    state.apply(testing.table(1, {"m": [testing.replica("a", 1)]}, policy="round_robin"), "watch")
    assert state.models["m"].policy_name == "round_robin"
    state.apply(testing.table(2, {"m": [testing.replica("a", 1)]}, policy="nonsense"), "watch")
    assert state.models["m"].policy_name == "least_request"


def test_rtt_lookup():
    """RTT comes from the latency map; no client region means no preference; unknown regions get a default."""
    state = table.RoutingState(unknown_rtt_ms=123.0)
    assert state.rtt_ms("na-east", "us-east-1") < state.rtt_ms("na-east", "eu-west-1")
    assert state.rtt_ms("", "us-east-1") == 0.0
    assert state.rtt_ms("na-east", "moon-1") == 123.0
