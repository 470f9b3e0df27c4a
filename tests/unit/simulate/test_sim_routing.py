"""The simulator's router: a tick's requests go to representatives the live router's policy places
one by one, so equal replicas must end the tick with equal shares, as per-request least-loaded
routing gives them."""

from __future__ import annotations

import random

import pytest

from meridian import fleet, latency
from meridian.simulate import routing


def _router(n: int) -> routing.SimRouter:
    now = [1_764_000_000.0]
    r = routing.SimRouter("latency", latency.default(), random.Random(7), lambda: now[0])
    replicas = tuple(fleet.RouteReplica(f"r{i}", f"http://127.0.0.1:{9000 + i}", fleet.Cloud.AWS, "ap-south-1",
                                        gpu_type="L4", cluster_id="aws-aps1") for i in range(n))
    r.apply((fleet.ModelRoutes("llama", "chat", replicas, "latency", max_rtt_ms=90.0),))
    for i in range(n):  # what each replica's requests saw last tick (the engine sets it every tick)
        r.observe(f"r{i}", 500.0)
    return r


@pytest.mark.parametrize("replicas", [3, 5, 7, 9, 12])
def test_equal_replicas_get_equal_shares_of_a_tick(replicas):
    """Seven L4s in Mumbai and 8 representatives a tick used to give one L4 a quarter of the
    region's requests (twice the others), past its TPOT knee, every tick."""
    r = _router(replicas)
    shares = r.route("llama", {"ap-south": 60}, 1000, 8, {f"r{i}": 10.0 for i in range(replicas)}, 60.0, ())
    per = [sum(v for (rid, _), v in shares.items() if rid == f"r{i}") for i in range(replicas)]
    assert sum(per) == pytest.approx(60.0)
    assert max(per) == pytest.approx(min(per), rel=1e-9)


def test_a_stream_with_fewer_requests_than_replicas_routes_each_request():
    r = _router(7)
    shares = r.route("llama", {"ap-south": 3}, 1000, 8, {f"r{i}": 10.0 for i in range(7)}, 60.0, ())
    assert sum(shares.values()) == pytest.approx(3.0)
    assert all(v == pytest.approx(1.0) for v in shares.values())
