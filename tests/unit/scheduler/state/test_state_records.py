"""Specs, directive log, traffic, routing versions and leader election on every backend."""

from __future__ import annotations

import asyncio

import pytest

from meridian import spec
from meridian.fleet import models as fm
from scheduler.state import base, election, records

DOC = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: %d}
"""


def loaded(n: int) -> tuple[spec.Loaded, ...]:
    return spec.load_text(DOC % n, "chat.yaml").documents


async def test_spec_store_round_trip_and_generation(store):
    """Applied specs come back identical and validate again; the generation moves only on change."""
    specs = records.SpecStore(store)
    assert await specs.apply(loaded(1), 1.0) == [("ModelDeployment", "chat", "created")]
    gen = await specs.generation()
    assert await specs.apply(loaded(1), 2.0) == [("ModelDeployment", "chat", "unchanged")]
    assert await specs.generation() == gen
    assert await specs.apply(loaded(2), 3.0) == [("ModelDeployment", "chat", "configured")]
    assert await specs.generation() > gen
    again = records.spec_set(await specs.all())
    assert again.of_kind("ModelDeployment")[0].spec.scaling.min_replicas == 2
    assert (await specs.get("ModelDeployment", "chat")).source == "chat.yaml:2"
    assert await specs.delete("ModelDeployment", "chat") is True
    assert await specs.delete("ModelDeployment", "chat") is False
    assert await specs.all() == []


def record(directive_id: str, status=records.DirectiveStatus.CLAIMED) -> records.DirectiveRecord:
    d = fm.Directive(directive_id, fm.DrainReplica("r1", 30), fencing_token=1)
    return records.DirectiveRecord(d, "c1", status, 10.0, 10.0)


async def test_directive_log_claims_an_id_once_and_only_under_the_lease(store):
    """A directive id is claimed once; a second claim is refused; claims need the current fencing token."""
    log = records.DirectiveLog(store)
    with pytest.raises(base.FencedOut):
        await log.claim(record("d1"), fence=1)
    lease = await store.acquire_lease("a", 5.0, {})
    assert await log.claim(record("d1"), fence=lease.token) is True
    assert await log.claim(record("d1"), fence=lease.token) is False
    await log.update(record("d1").with_status(records.DirectiveStatus.ACCEPTED, 11.0), fence=lease.token)
    got = await log.get("d1")
    assert got.status is records.DirectiveStatus.ACCEPTED and got.directive == record("d1").directive
    await log.update(record("d2", records.DirectiveStatus.SUCCEEDED), fence=lease.token)
    assert await log.prune(before_s=100.0, fence=lease.token) == 1
    assert [r.directive_id for r in await log.all()] == ["d1"]


async def test_start_directive_survives_the_round_trip(store):
    """A StartReplica with its runtime spec is stored and read back exactly (wire form)."""
    lease = await store.acquire_lease("a", 5.0, {})
    runtime = fm.RuntimeSpec("meta-llama/x", "chat", tp_size=2, context_length=8192, extra_args=("--a",),
                             env={"K": "V"})
    d = fm.Directive("s1", fm.StartReplica("r1", "chat", "abc", runtime, "l4", 2, "{}"), fencing_token=lease.token)
    log = records.DirectiveLog(store)
    await log.claim(records.DirectiveRecord(d, "c1", records.DirectiveStatus.SENT, 1.0, 1.0), lease.token)
    assert (await log.get("s1")).directive == d


async def test_traffic_sums_routers_and_drops_stale_reports(store):
    """Demand sums routers per (model, client region) as rates, and forgets reports older than max age."""
    traffic = records.TrafficLog(store)
    sample = fm.TrafficSample("chat", "na-east", requests=60, errors=6, in_flight=2, ttft_p99_ms=300,
                              prompt_tokens=6000, completion_tokens=1200)
    await traffic.record(fm.TrafficReport("a", "na-east", 0.0, 60.0, (sample,)), 100.0)
    await traffic.record(fm.TrafficReport("b", "na-east", 30.0, 60.0, (sample,)), 100.0)
    [d] = await traffic.demand(110.0, max_age_s=60.0)
    assert (d.requests_per_s, d.errors_per_s, d.in_flight, d.ttft_p99_ms) == (3.0, 0.30000000000000004, 4, 300)
    assert d.prompt_tokens_per_request == 100.0
    assert await traffic.demand(200.0, max_age_s=60.0) == []
    assert await store.items(records.TRAFFIC) == {}


async def test_routing_versions_increase_and_tables_round_trip(store):
    """The routing version only increases; a saved table loads back equal."""
    routing = records.RoutingStore(store)
    v1, v2 = await routing.next_version(), await routing.next_version()
    assert v2 > v1
    table = fm.RoutingTable(v2, (fm.ModelRoutes("chat", "chat", (fm.RouteReplica(
        "r1", "http://x", fm.Cloud.AWS, "us-east-1", gpu_type="L4", cluster_id="c1"),)),), 5.0, "s1")
    await routing.save(table)
    assert await routing.load() == table


async def test_standby_takes_over_when_the_leader_stops_renewing(store):
    """Two electors: one leads; when it stops renewing, the other leads with a higher fencing token."""
    a = election.LeaderElector(store, "a", ttl_s=1.0, renew_interval_s=0.2, poll_interval_s=0.1)
    b = election.LeaderElector(store, "b", ttl_s=1.0, renew_interval_s=0.2, poll_interval_s=0.1)
    await a.step()
    await b.step()
    assert a.is_leader and not b.is_leader
    first = a.token
    for _ in range(100):  # a no longer renews (it "died"); b keeps trying, bounded at ~10 s
        await asyncio.sleep(0.1)
        await b.step()
        if b.is_leader:
            break
    assert b.is_leader and b.token > first
    await a.step()  # a comes back: its renewal fails and it steps down
    assert not a.is_leader


async def test_resign_hands_over_at_once(store):
    """A leader that resigns releases the lease so a standby leads on its next try."""
    a = election.LeaderElector(store, "a", ttl_s=30.0, renew_interval_s=1.0, poll_interval_s=0.1)
    b = election.LeaderElector(store, "b", ttl_s=30.0, renew_interval_s=1.0, poll_interval_s=0.1)
    await a.step()
    await a.resign()
    await b.step()
    assert b.is_leader and not a.is_leader


async def test_namespaces_are_separate(store, open_store):
    """Two namespaces in one backend do not see each other's data or lease."""
    other = open_store("other")
    await store.write([base.Put("c", "k", "v")])
    assert await store.acquire_lease("a", 5.0, {}) is not None
    assert await other.get("c", "k") is None
    assert await other.acquire_lease("b", 5.0, {}) is not None
