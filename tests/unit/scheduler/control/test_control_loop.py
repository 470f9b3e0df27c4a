"""The control loop on a simulated clock: plan -> directives, re-adoption after a restart (waiting for
agents that connect late), failover without resending, spot replacement, stock-out backoff, lost
clusters, and a plan that cannot place a deployment keeping its replicas."""

from __future__ import annotations

import pytest
from control_harness import ISOLATED_SPECS, SPECS, Harness, SimCluster, apply_specs

from meridian.fleet import models as fm
from scheduler import clock as clock_mod
from scheduler import state
from scheduler.state import records


@pytest.fixture
async def store():
    s = state.open_store("sqlite://:memory:", clock=CLOCK)
    try:
        yield s
    finally:
        await s.close()


CLOCK = clock_mod.ManualClock(1_800_000_000.0)


async def lead(store, clock, ttl_s: float = 3600.0, **overrides) -> Harness:
    lease = None
    while lease is None:
        lease = await store.acquire_lease(f"node-{clock.now()}", ttl_s, {})
        if lease is None:
            clock.advance(5.0)
    h = Harness(store, clock, lease.token, **overrides)
    await h.loop.start_term()
    return h


async def converge(h: Harness, clusters: list[SimCluster], rounds: int = 6) -> None:
    """Tick, carry out, promote, until nothing more is sent."""
    index = 0
    for _ in range(rounds):
        h.clock.advance(2.0)
        await h.loop.tick()
        for c in clusters:
            await c.carry_out(h, index)
        index = len(h.transport.sent)
        for c in clusters:
            await c.promote(h)


async def test_first_round_plans_and_starts_min_replicas_near_the_clients(store):
    """After the adoption grace, the loop plans min_replicas of the deployment on the cluster nearest
    its clients and sends the starts with the leader's fencing token."""
    await apply_specs(store)
    h = await lead(store, CLOCK)
    c1, c2 = SimCluster("c1"), SimCluster("c2")
    await c1.hello(h)
    await c2.hello(h)
    report = await h.loop.tick()
    assert report.stage == "reconciled" and report.planned
    starts = h.directives(fm.StartReplica)
    assert [c for c, _ in starts] == ["c1", "c1"]
    assert all(d.fencing_token == h.token for _, d in starts)
    await converge(h, [c1, c2])
    assert len(c1.ready()) == 2 and not c2.replicas
    assert h.metrics.registry.get_sample_value("meridian_scheduler_plan_cost_per_hour_usd") == pytest.approx(1.6096)


async def test_nothing_is_sent_while_adopting(store):
    """During the adoption grace, with a Cluster spec's agent not yet reported, no directive is sent."""
    await apply_specs(store)
    h = await lead(store, CLOCK)
    await SimCluster("c1").hello(h)
    report = await h.loop.tick()
    assert report.stage == "adopting" and h.transport.sent == []


async def test_restarted_scheduler_adopts_running_replicas(store):
    """A new term on the same store, told by agents what runs, restarts nothing and drains nothing."""
    await apply_specs(store)
    h1 = await lead(store, CLOCK)
    c1, c2 = SimCluster("c1"), SimCluster("c2")
    for c in (c1, c2):
        await c.hello(h1)
    await converge(h1, [c1, c2])
    running = set(c1.replicas)
    await store.release_lease(*(lambda lease: (lease.holder, lease.token))(await store.lease()))

    h2 = await lead(store, CLOCK)
    assert h2.token > h1.token
    published = (await records.RoutingStore(store).load()).version
    CLOCK.advance(1.0)
    assert (await h2.loop.tick()).stage == "adopting"
    assert (await records.RoutingStore(store).load()).version == published  # routers keep the last table
    for c in (c1, c2):
        await c.hello(h2)
    for _ in range(3):
        CLOCK.advance(2.0)
        await h2.loop.tick()
    assert h2.transport.sent == []
    assert set(c1.replicas) == running


async def test_failover_does_not_resend_what_the_old_leader_sent(store):
    """The old leader sent starts and died before they showed in reports; the new leader takes over the
    open directives (and the agent's completed ids) and sends no second start for them."""
    await apply_specs(store)
    h1 = await lead(store, CLOCK, ttl_s=30.0)
    c1, c2 = SimCluster("c1"), SimCluster("c2")
    for c in (c1, c2):
        await c.hello(h1)
    CLOCK.advance(2.0)
    await h1.loop.tick()
    first = h1.directives(fm.StartReplica)
    assert len(first) == 2
    await c1.carry_out(h1)  # the agent started them; the old leader dies before seeing the report
    CLOCK.advance(31.0)  # its lease (30 s) lapses

    h2 = await lead(store, CLOCK)
    for c in (c1, c2):
        await c.hello(h2)
    await converge(h2, [c1, c2])
    assert not h2.directives(fm.StartReplica)
    assert len(c1.replicas) == 2
    ids = [d.directive_id for _, d in h1.transport.sent + h2.transport.sent]
    assert len(ids) == len(set(ids))


async def test_new_leader_counts_the_old_leaders_open_starts_before_reports_show_them(store):
    """Starts the old leader sent, which the agent lists as done in its Hello but does not report yet,
    count as on their way for the new leader: it sends no second start."""
    await apply_specs(store)
    h1 = await lead(store, CLOCK, ttl_s=10.0)
    c1, c2 = SimCluster("c1"), SimCluster("c2")
    for c in (c1, c2):
        await c.hello(h1)
    CLOCK.advance(2.0)
    await h1.loop.tick()
    sent = [d.directive_id for _, d in h1.directives(fm.StartReplica)]
    assert len(sent) == 2
    c1.done.extend(sent)  # carried out, but the replicas are not in a report yet
    CLOCK.advance(11.0)
    h2 = await lead(store, CLOCK)
    for c in (c1, c2):
        await c.hello(h2)
    for _ in range(3):
        CLOCK.advance(2.0)
        await h2.loop.tick()
    assert h2.directives(fm.StartReplica) == []
    assert {r.directive_id for r in h2.executor.open_records()} == set(sent)


async def test_deposed_leader_cannot_send(store):
    """Once another node holds the lease, the old leader's directive claims are refused by the store."""
    await apply_specs(store)
    h1 = await lead(store, CLOCK, ttl_s=30.0)
    c1, c2 = SimCluster("c1"), SimCluster("c2")
    for c in (c1, c2):
        await c.hello(h1)
    CLOCK.advance(31.0)
    await lead(store, CLOCK)
    with pytest.raises(state.FencedOut):
        await h1.loop.tick()
    assert h1.transport.sent == []


async def test_spot_notice_starts_a_replacement_in_the_same_round(store):
    """A spot interruption notice for a running replica starts its replacement in the next tick, and the
    doomed replica is drained once the replacement is ready."""
    await apply_specs(store)
    h = await lead(store, CLOCK)
    c1, c2 = SimCluster("c1", nodes=3), SimCluster("c2")
    for c in (c1, c2):
        await c.hello(h)
    await converge(h, [c1, c2])
    victim = sorted(c1.ready())[0]
    before = len(h.transport.sent)
    await h.intake.on_event("c1", fm.Event(fm.EventKind.SPOT_INTERRUPTION, "l4", victim, "2 minutes",
                                           CLOCK.now() + 120), CLOCK.now())
    await h.loop.tick()
    new = [d for _, d in h.transport.sent[before:] if isinstance(d.action, fm.StartReplica)]
    assert len(new) == 1
    assert not any(isinstance(d.action, fm.DrainReplica) for _, d in h.transport.sent[before:])
    await converge(h, [c1, c2], rounds=3)
    assert victim not in c1.replicas and len(c1.ready() | c2.ready()) == 2


async def test_stock_out_replans_without_growing_that_pool_and_backs_off(store):
    """When the preferred pool reports a stock-out, the plan grows elsewhere at once; the pool is offered
    for growth again only after the backoff."""
    await apply_specs(store)
    h = await lead(store, CLOCK)
    c1, c2 = SimCluster("c1", nodes=0), SimCluster("c2", nodes=0)
    c1.stocked_out = True
    for c in (c1, c2):
        await c.hello(h)
    CLOCK.advance(2.0)
    await h.loop.tick()
    assert [(c, d.action.pool_id) for c, d in h.directives(fm.ResizePool)] == [("c1", "l4")]
    await h.intake.on_event("c1", fm.Event(fm.EventKind.STOCK_OUT, "l4", message="InsufficientInstanceCapacity"),
                            CLOCK.now())
    await converge(h, [c1, c2], rounds=4)
    assert len(c2.ready()) == 2 and not c1.replicas
    assert "c1/l4" in h.events.no_growth(CLOCK.now())
    CLOCK.advance(61.0)
    assert h.events.no_growth(CLOCK.now()) == {}


async def test_lost_cluster_is_replanned_elsewhere(store):
    """When a cluster's agent goes silent past the liveness limit, its replicas stop counting and the
    plan places them on another cluster."""
    await apply_specs(store)
    h = await lead(store, CLOCK)
    c1, c2 = SimCluster("c1"), SimCluster("c2")
    for c in (c1, c2):
        await c.hello(h)
    await converge(h, [c1, c2])
    assert len(c1.ready()) == 2
    CLOCK.advance(16.0)
    await c2.report(h)  # c2 keeps talking; c1 is silent
    index = len(h.transport.sent)
    await h.loop.tick()
    assert h.fleet.snapshot(CLOCK.now()).clusters["c1"].lost
    for _ in range(3):
        await c2.carry_out(h, index)
        index = len(h.transport.sent)
        await c2.promote(h)
        CLOCK.advance(2.0)
        await h.loop.tick()
    assert len(c2.ready()) == 2


async def test_shadow_mode_plans_and_routes_but_sends_nothing(store):
    """With directives disabled the loop plans and publishes routes, and sends no directive."""
    await apply_specs(store)
    h = await lead(store, CLOCK, directives_enabled=False)
    for c in (SimCluster("c1"), SimCluster("c2")):
        await c.hello(h)
    report = await h.loop.tick()
    assert report.stage == "shadow" and h.loop.plan is not None
    assert h.transport.sent == [] and len(report.held) == 2
    assert h.routes.version > 0


async def _isolated_fleet(store) -> tuple[Harness, list[SimCluster]]:
    """A first term on three of the four clusters (z1 never connects), converged: ``chat`` runs on two
    clouds; then that leader's lease is released (a restart)."""
    await apply_specs(store, ISOLATED_SPECS)
    h1 = await lead(store, CLOCK)
    clusters = [SimCluster("c1", nodes=4), SimCluster("c2", nodes=4),
                SimCluster("g1", nodes=4, cloud=fm.Cloud.GCP, instance_type="g2-standard-8")]
    for c in clusters:
        await c.hello(h1)
    CLOCK.advance(6.0)  # past the grace: z1 is planned without
    await converge(h1, clusters)
    assert sum(len(c.ready()) for c in clusters) >= 3 and clusters[2].ready()
    await store.release_lease(*(lambda lease: (lease.holder, lease.token))(await store.lease()))
    return h1, clusters


async def test_restart_waits_for_an_agent_that_connects_after_the_grace(store):
    """After a restart, an agent that connects once the adoption grace is over, and has not sent its
    inventory and replicas yet, is waited for: the first plan comes after its report and adopts
    every running replica (the plan made without it could not meet isolation and drained them all)."""
    _, (c1, c2, g1) = await _isolated_fleet(store)
    running = {c.cluster_id: set(c.replicas) for c in (c1, c2, g1)}
    h2 = await lead(store, CLOCK)
    CLOCK.advance(0.5)
    await c1.hello(h2)
    CLOCK.advance(1.5)
    await c2.hello(h2)
    CLOCK.advance(3.2)  # the 5 s grace is over; z1 never came
    await g1.hello(h2, report=False)
    CLOCK.advance(0.013)
    report = await h2.loop.tick()
    assert report.stage == "adopting" and h2.loop.plan is None
    assert any(h.cluster_id == "g1" and "first complete report" in h.reason for h in report.held)
    assert h2.transport.sent == []
    await g1.report(h2)
    for _ in range(3):
        CLOCK.advance(2.0)
        assert (await h2.loop.tick()).stage == "reconciled"
    assert h2.loop.plan.trigger == "first plan of the term" and not h2.loop.plan.result.unplaced
    assert h2.directives(fm.DrainReplica) == []
    for c in (c1, c2, g1):
        assert running[c.cluster_id] <= set(c.replicas)


async def test_agent_that_never_reports_is_waited_for_only_a_few_heartbeats(store):
    """A connected agent that never sends its report holds the first plan for three heartbeat intervals
    (15 s here), not forever; the plan then made without its pools cannot place ``chat`` (isolation)
    and keeps every ready replica instead of draining them, saying why."""
    _, (c1, c2, g1) = await _isolated_fleet(store)
    running = set(c1.replicas) | set(c2.replicas)
    h2 = await lead(store, CLOCK)
    for c in (c1, c2):
        await c.hello(h2)
    CLOCK.advance(5.5)
    await g1.hello(h2, report=False)
    connected_at = CLOCK.now()
    stages = []
    while CLOCK.now() < connected_at + 20.0:
        CLOCK.advance(2.0)
        for c in (c1, c2):
            await c.report(h2)
        await h2.intake.on_heartbeat("g1", CLOCK.now())
        stages.append(((await h2.loop.tick()).stage, CLOCK.now() - connected_at))
    assert all(stage == "adopting" for stage, at in stages if at < 14.9)
    assert stages[-1][0] == "reconciled"
    assert h2.loop.plan.result.unplaced and h2.loop.plan.result.placement.total("chat") == 0
    assert h2.directives(fm.DrainReplica) == []
    assert set(c1.replicas) | set(c2.replicas) == running
    held = h2.loop.last_tick.held
    assert any(h.reason.startswith("keeping ") and "of chat: the plan could not place it" in h.reason
               and "isolation" in h.reason for h in held)


async def lead_with_c1_lost(store) -> tuple[Harness, SimCluster, SimCluster]:
    """(leader, c1, c2): both clusters converged, c1's two replicas READY; then c1 silent past the
    liveness limit (lost) and three rounds that start its replacements on c2."""
    await apply_specs(store)
    h = await lead(store, CLOCK)
    c1, c2 = SimCluster("c1"), SimCluster("c2")
    for c in (c1, c2):
        await c.hello(h)
    await converge(h, [c1, c2])
    assert len(c1.ready()) == 2
    CLOCK.advance(16.0)
    await c2.report(h)  # c1 is silent past the liveness limit: lost
    index = len(h.transport.sent)
    await h.loop.tick()
    for _ in range(3):
        await c2.carry_out(h, index)
        index = len(h.transport.sent)
        await c2.promote(h)
        CLOCK.advance(2.0)
        await h.loop.tick()
    return h, c1, c2


async def test_a_lost_cluster_that_comes_back_counts_only_from_its_new_report(store):
    """A lost cluster's agent that says Hello again does not bring back the replicas it had before it
    was lost: until it reports, they are not counted, so the replacements serving in their place are
    not drained for replicas that may be gone."""
    h, c1, c2 = await lead_with_c1_lost(store)
    replacements = c2.ready()
    assert len(replacements) == 2
    c1.replicas.clear()  # the cluster came back without them (its nodes were replaced)
    await c1.hello(h, report=False)
    CLOCK.advance(0.05)
    await h.loop.tick()
    assert not any(d.action.replica_id in replacements for _, d in h.directives(fm.DrainReplica))
    assert h.fleet.snapshot(CLOCK.now()).clusters["c1"].replicas == {}


async def test_a_cluster_that_comes_back_is_planned_with_a_full_solve(store, caplog):
    """While c1 was lost its replicas moved to c2. When c1 reports again its pools are offered
    anew: that plan re-places every deployment (a full solve), not only those whose demand changed,
    so capacity a returning cluster billed all along is used again without waiting for the next
    periodic full solve (``full_solve_interval_s``, 10 minutes)."""
    h, c1, c2 = await lead_with_c1_lost(store)
    c1.replicas.clear()
    with caplog.at_level("INFO", logger="meridian.scheduler.loop"):
        await c1.hello(h)
        CLOCK.advance(2.0)
        await h.loop.tick()
    planned = [r.getMessage() for r in caplog.records if "event=planned" in r.getMessage()]
    assert planned and "full=true" in planned[-1], planned


async def test_published_routes_carry_the_deployments_max_rtt_ms(store):
    """Routers learn each deployment's max_rtt_ms from the routing table (0 when the SLA sets none),
    so they can keep clients on the replicas the solver placed within it."""
    text = SPECS.replace("client_regions: [na-east]}", "client_regions: [na-east], max_rtt_ms: 40}")
    assert text != SPECS
    await apply_specs(store, text)
    h = await lead(store, CLOCK)
    c1, c2 = SimCluster("c1"), SimCluster("c2")
    for c in (c1, c2):
        await c.hello(h)
    await converge(h, [c1, c2])
    table = await records.RoutingStore(store).load()
    assert table.model("chat").max_rtt_ms == 40.0
    # The TTFT target rides along too: routers derive each try's first-byte limit from it.
    assert table.model("chat").ttft_p99_ms > 0
    await apply_specs(store)
    CLOCK.advance(2.0)
    await h.loop.tick()
    assert (await records.RoutingStore(store).load()).model("chat").max_rtt_ms == 0.0


async def test_a_policy_asking_for_no_spot_fallback_still_loads_and_is_warned_about(store, caplog):
    """spot.fallback 'none' is not implemented: a policy with it (applied before or now) must still
    load with the other specs, not empty the scheduler's view; the loop says it falls back anyway."""
    policy = """---
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: default}
spec:
  clouds: [{name: aws}]
  spot: {allowed: true, fallback: none}
"""
    await apply_specs(store, SPECS + policy)
    caplog.set_level("WARNING", logger="meridian.scheduler")
    h = await lead(store, clock_mod.ManualClock(1_800_000_000.0))
    assert "chat" in h.loop.specs.deployments and h.loop.specs.policy is not None
    assert any("event=spot_fallback_unsupported" in r.getMessage() for r in caplog.records)


async def test_an_always_served_region_no_cluster_reaches_is_named_in_the_log_and_the_metric(store, caplog):
    """ap-south must always be served but every cluster is in the US (173 ms + an L4's prefill over a
    300 ms TTFT): the plan names it uncovered (ttft), the loop logs event=sla_unmet and sets
    meridian_scheduler_unmet_sla; once the spec drops the region, the gauge drops to 0 and sla_met is logged."""
    far = SPECS.replace("sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}",
                        "sla: {ttft_p99_ms: 300, tpot_p99_ms: 200, client_regions: [na-east, ap-south], "
                        "always_served_regions: [ap-south]}")
    await apply_specs(store, far)
    h = await lead(store, CLOCK)
    c1, c2 = SimCluster("c1"), SimCluster("c2")
    await c1.hello(h)
    await c2.hello(h)
    with caplog.at_level("INFO", logger="meridian.scheduler.loop"):
        await converge(h, [c1, c2], rounds=2)
        [u] = h.loop.plan.result.uncovered
        assert (u.deployment, u.client_region, u.constraint) == ("chat", "ap-south", "ttft")
        sample = {"deployment": "chat", "client_region": "ap-south", "cause": "ttft"}
        assert h.metrics.registry.get_sample_value("meridian_scheduler_unmet_sla", sample) == 1.0
        assert any("event=sla_unmet deployment=chat client_region=ap-south cause=ttft" in r.getMessage()
                   for r in caplog.records)
        await apply_specs(store, far.replace("client_regions: [na-east, ap-south], always_served_regions: [ap-south]",
                                             "client_regions: [na-east]"))
        await converge(h, [c1, c2], rounds=2)
        assert h.loop.plan.result.uncovered == ()
        assert h.metrics.registry.get_sample_value("meridian_scheduler_unmet_sla", sample) == 0.0
        assert any("event=sla_met deployment=chat client_region=ap-south" in r.getMessage() for r in caplog.records)


async def test_stored_specs_that_no_longer_validate_hold_everything_and_say_why(store):
    """Specs stored under an older version can fail a rule added since (here: the deployment's team
    is not among the policy's teams). A leader starting on them sends no directive and its hold
    names the stored specs' problem, not "the state store holds no specs"."""
    from meridian import spec  # noqa: PLC0415

    await apply_specs(store)
    policy = ("apiVersion: meridian/v1\nkind: CapacityPolicy\nmetadata: {name: default}\n"
              "spec:\n  clouds: [{name: aws}]\n  teams: [{name: research}]\n")
    await records.SpecStore(store).apply(spec.load_text(policy, "p.yaml").documents, 0.0)
    h = await lead(store, CLOCK)
    c1 = SimCluster("c1")
    c1.replicas["chat-old"] = fm.ReplicaReport("chat-old", "chat", "r1", "http://chat-old", fm.ReplicaState.READY,
                                               pool_id="l4", gpu_count=1, served_model_name="chat")
    await c1.hello(h)
    report = await h.loop.tick()
    for _ in range(30):  # past the new term's adoption wait
        if report.stage != "adopting":
            break
        CLOCK.advance(5.0)
        await c1.report(h)
        report = await h.loop.tick()
    assert report.stage == "store_empty" and h.transport.sent == []
    [held] = report.held
    assert "the stored specs no longer validate (1 problem(s), first: " in held.reason
    assert "unknown team 't'" in held.reason and "holds no specs" not in held.reason
