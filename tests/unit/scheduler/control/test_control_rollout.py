"""Rollouts through the real control loop (autoscaler -> solver -> rollout -> reconciler -> executor)
on a simulated clock: a canary starts the new revision in step sizes and retires the old one only as
steps complete, a scheduler restart resumes the rollout where it was, and a rollback (router traffic
with errors) drains the new revision and restores the old one."""

from __future__ import annotations

import pytest
from control_harness import Harness, SimCluster, apply_specs

from meridian.fleet import models as fm
from scheduler import clock as clock_mod
from scheduler import state
from scheduler.state import records

SPECS = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat, revision: %s}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 4, max_replicas: 4, scale_up_delay_s: 0}
  rollout: {strategy: canary, steps_percent: [25, 50, 100], step_duration_s: 60, rollback: {error_rate: 0.05}}
---
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c1}
spec:
  cloud: aws
  region: us-east-1
  auth: {token_env: TOKEN_C1}
  pools: [{name: l4, instance_type: g6.xlarge, max_nodes: 8}]
"""


@pytest.fixture
def clock() -> clock_mod.ManualClock:
    return clock_mod.ManualClock(1_800_000_000.0)


@pytest.fixture
async def store(clock):
    s = state.open_store("sqlite://:memory:", clock=clock)
    try:
        yield s
    finally:
        await s.close()


async def lead(store, clock) -> Harness:
    lease = None
    while lease is None:
        lease = await store.acquire_lease(f"node-{clock.now()}", 3600.0, {})
        if lease is None:
            clock.advance(5.0)
    h = Harness(store, clock, lease.token)
    await h.loop.start_term()
    return h


async def round_(h: Harness, c1: SimCluster, seconds: float = 2.0) -> list[fm.Directive]:
    """One tick, the cluster carries out what it was sent and its new replicas become READY."""
    before = len(h.transport.sent)
    h.clock.advance(seconds)
    await h.loop.tick()
    await c1.carry_out(h, before)
    await c1.promote(h)
    return [d for _, d in h.transport.sent[before:]]


def revisions_running(c1: SimCluster) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in c1.replicas.values():
        out[r.revision] = out.get(r.revision, 0) + 1
    return out


async def settle(h: Harness, c1: SimCluster, rounds: int) -> list[fm.Directive]:
    sent = []
    for _ in range(rounds):
        sent += await round_(h, c1)
    return sent


def step_of(h: Harness) -> float:
    return h.metrics.registry.get_sample_value("meridian_scheduler_rollout_step", {"deployment": "chat"})


async def test_canary_through_the_control_loop_restart_and_rollback(store, clock):
    """A new revision starts in step sizes (1, then 2, then 4 of 4) while the old one keeps the rest
    and is gone only at the last step; a restarted scheduler resumes at the same step without
    restarting anything; a later revision whose routed traffic errs is rolled back: its replicas
    drain and the previous revision is back at full size."""
    await apply_specs(store, SPECS % "v1")
    h = await lead(store, clock)
    c1 = SimCluster("c1", nodes=8, nodes_max=8)
    await c1.hello(h)
    await settle(h, c1, 4)
    v1 = next(iter(revisions_running(c1)))
    assert revisions_running(c1) == {v1: 4}

    await apply_specs(store, SPECS % "v2")
    sent = await settle(h, c1, 3)
    v2 = next(r for r in revisions_running(c1) if r != v1)
    assert [d.action.revision for d in sent if isinstance(d.action, fm.StartReplica)] == [v2]
    assert revisions_running(c1) == {v1: 3, v2: 1}  # the old replica drained only once the new one was ready
    assert step_of(h) == 1
    status = h.loop.rollouts.status()[0]
    assert status["new_replicas"] == {"wanted": 1, "ready": 1} and status["old_replicas"]["wanted"] == 3

    sent = await settle(h, c1, 30)  # 60 s of healthy observation: step 2
    assert revisions_running(c1) == {v1: 2, v2: 2} and step_of(h) == 2
    assert len([d for d in sent if isinstance(d.action, fm.StartReplica)]) == 1

    # The scheduler restarts mid-step: the new term resumes at step 2 and restarts nothing.
    lease = await store.lease()
    await store.release_lease(lease.holder, lease.token)
    h2 = await lead(store, clock)
    await c1.hello(h2)
    sent = await settle(h2, c1, 3)
    assert sent == [] and step_of(h2) == 2 and revisions_running(c1) == {v1: 2, v2: 2}

    sent = await settle(h2, c1, 32)  # step 3 (100%): the old revision drains
    assert revisions_running(c1) == {v2: 4}
    assert h2.loop.rollouts.states["chat"].phase.value == "complete" and step_of(h2) == 0
    drains = [d for d in sent if isinstance(d.action, fm.DrainReplica)]
    assert len(drains) == 2

    # v3 errs on the traffic routed to it: rolled back, v2 restored.
    await apply_specs(store, SPECS % "v3")
    await settle(h2, c1, 2)
    v3 = next(r for r in revisions_running(c1) if r not in (v1, v2))
    assert revisions_running(c1) == {v2: 3, v3: 1}
    v3_ids = {rid for rid, r in c1.replicas.items() if r.revision == v3}
    report = fm.TrafficReport("router-1", "na-east", clock.now() - 10, clock.now(), (
        fm.TrafficSample("chat", "na-east", 80, 8000, 1600, 20, 0, 300.0, v3),
        fm.TrafficSample("chat", "na-east", 240, 24000, 4800, 0, 2, 250.0, v2)))
    await records.TrafficLog(store).record(report, clock.now())
    sent = await settle(h2, c1, 3)
    assert {d.action.replica_id for d in sent if isinstance(d.action, fm.DrainReplica)} == v3_ids
    assert [d.action.revision for d in sent if isinstance(d.action, fm.StartReplica)] == [v2]
    assert revisions_running(c1) == {v2: 4}
    rolled = h2.loop.rollouts.status()[0]
    assert rolled["phase"] == "rolled_back" and rolled["rollback_reason"] == "error_rate"
    assert "20 errors in 80 requests" in rolled["reason"]
    assert h2.metrics.registry.get_sample_value("meridian_scheduler_rollbacks_total",
                                                {"deployment": "chat", "reason": "error_rate"}) == 1
    stored = await records.RolloutLog(store).get("chat")
    assert '"phase":"rolled_back"' in stored


def routed_revisions(h: Harness) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in h.routes.table.model("chat").replicas:
        out[r.revision] = out.get(r.revision, 0) + 1
    return out


async def test_blue_green_through_the_control_loop_switches_traffic_once_the_new_set_is_ready(store, clock):
    """blue_green starts a full new set beside the old one while routers keep sending traffic to the
    old set only; after step_duration_s of the full set READY, the routes switch to the new set and
    the old set drains."""
    text = SPECS.replace("strategy: canary, steps_percent: [25, 50, 100]", "strategy: blue_green")
    text = text.replace("min_replicas: 4, max_replicas: 4", "min_replicas: 2, max_replicas: 2")
    await apply_specs(store, text % "v1")
    h = await lead(store, clock)
    c1 = SimCluster("c1", nodes=8, nodes_max=8)
    await c1.hello(h)
    await settle(h, c1, 4)
    v1 = next(iter(revisions_running(c1)))

    await apply_specs(store, text % "v2")
    await settle(h, c1, 4)
    v2 = next(r for r in revisions_running(c1) if r != v1)
    assert revisions_running(c1) == {v1: 2, v2: 2}
    assert routed_revisions(h) == {v1: 2}
    await settle(h, c1, 27)
    assert revisions_running(c1) == {v1: 2, v2: 2} and routed_revisions(h) == {v1: 2}
    await settle(h, c1, 6)  # past 60 s of the full new set READY: switched, old drained
    assert revisions_running(c1) == {v2: 2} and routed_revisions(h) == {v2: 2}
    assert h.loop.rollouts.states["chat"].phase.value == "complete"


async def test_a_deleted_deployment_forgets_its_rollout(store, clock):
    """Deleting a deployment removes its rollout record from the store and its rollout gauges."""
    await apply_specs(store, SPECS % "v1")
    h = await lead(store, clock)
    c1 = SimCluster("c1", nodes=8, nodes_max=8)
    await c1.hello(h)
    await settle(h, c1, 2)
    assert await records.RolloutLog(store).get("chat") is not None and step_of(h) == 0
    await records.SpecStore(store).delete("ModelDeployment", "chat")
    await settle(h, c1, 2)
    assert await records.RolloutLog(store).get("chat") is None
    assert step_of(h) is None and h.loop.rollouts.status() == []
