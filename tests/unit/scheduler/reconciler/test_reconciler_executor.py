"""The executor: claim once then send, fencing, acks (own cluster only), completion from reports,
expiry; and resolution of open directives from what agents report."""

from __future__ import annotations

import pytest

from meridian.fleet import models as fm
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler import reconciler, state
from scheduler.reconciler import types as t
from scheduler.state import records

S = records.DirectiveStatus


class Transport:
    def __init__(self, connected=("c1", "c2")):
        self.connected = set(connected)
        self.sent: list[tuple[str, fm.Directive]] = []

    async def send(self, cluster_id, directive):
        if cluster_id not in self.connected:
            return False
        self.sent.append((cluster_id, directive))
        return True


@pytest.fixture
async def env():
    clock = clock_mod.ManualClock(1000.0)
    store = state.open_store("sqlite://:memory:", clock=clock)
    lease = await store.acquire_lease("me", 3600.0, {})
    transport = Transport()
    metrics = metrics_mod.SchedulerMetrics()
    ex = reconciler.Executor(log_store=records.DirectiveLog(store), transport=transport, clock=clock, metrics=metrics,
                             timeouts=reconciler.Timeouts(ack_s=30.0, start_s=600.0))
    try:
        yield clock, store, lease.token, transport, ex, metrics
    finally:
        await store.close()


def start(did: str, cluster: str = "c1", rid: str = "r1") -> t.PlannedDirective:
    rt = fm.RuntimeSpec("m", "chat")
    return t.PlannedDirective(cluster, fm.Directive(did, fm.StartReplica(rid, "chat", "rev", rt, "l4", 1)), "test")


def observed(replicas=(), clusters=("c1",)) -> reconciler.Observed:
    return reconciler.Observed(set(clusters), {r.replica_id: r for r in replicas}, {})


async def test_a_directive_id_is_sent_once_with_the_fencing_token(env):
    """Executing the same directive id twice sends it once; the sent copy carries the fencing token."""
    clock, store, token, transport, ex, metrics = env
    await ex.execute([start("d1")], token)
    await ex.execute([start("d1")], token)
    assert [(c, d.directive_id, d.fencing_token) for c, d in transport.sent] == [("c1", "d1", token)]
    assert metrics.registry.get_sample_value("meridian_scheduler_directives_total",
                                             {"action": "start_replica", "outcome": "duplicate_id"}) == 1


async def test_a_fenced_out_executor_sends_nothing(env):
    """With a stale fencing token the claim is refused and nothing reaches the transport."""
    clock, store, token, transport, ex, metrics = env
    with pytest.raises(state.FencedOut):
        await ex.execute([start("d1")], token + 1)
    assert transport.sent == []


async def test_undelivered_directive_is_closed_not_resent(env):
    """A directive for a cluster with no open stream is recorded failed (it never left)."""
    clock, store, token, transport, ex, metrics = env
    await ex.execute([start("d1", cluster="c9")], token)
    assert transport.sent == [] and ex.open_records() == []
    assert (await records.DirectiveLog(store).get("d1")).status is S.FAILED


async def test_acks_from_another_cluster_are_ignored(env):
    """Only the cluster a directive was sent to can acknowledge it."""
    clock, store, token, transport, ex, metrics = env
    await ex.execute([start("d1")], token)
    await ex.on_ack("c2", fm.DirectiveAck("d1", fm.DirectiveOutcome.REFUSED, "no"), token)
    assert ex.open_records()[0].status is S.SENT
    assert metrics.registry.get_sample_value("meridian_scheduler_auth_failures_total",
                                             {"surface": "agent", "reason": "foreign_ack"}) == 1


async def test_success_ack_keeps_a_start_open_until_the_replica_shows(env):
    """An accepted or succeeded start stays open (still counted as on its way) until the replica is
    reported; a refusal closes it at once."""
    clock, store, token, transport, ex, metrics = env
    await ex.execute([start("d1"), start("d2", rid="r2")], token)
    await ex.on_ack("c1", fm.DirectiveAck("d1", fm.DirectiveOutcome.SUCCEEDED), token)
    await ex.on_ack("c1", fm.DirectiveAck("d2", fm.DirectiveOutcome.REFUSED, "pool full"), token)
    assert [(r.directive_id, r.status) for r in ex.open_records()] == [("d1", S.ACCEPTED)]
    await ex.resolve(observed(), token)
    assert len(ex.open_records()) == 1
    rep = fm.ReplicaReport("r1", "chat", "rev", "http://x", fm.ReplicaState.STARTING, pool_id="l4")
    await ex.resolve(observed([rep]), token)
    assert ex.open_records() == []
    assert (await records.DirectiveLog(store).get("d1")).status is S.SUCCEEDED


async def test_completed_ids_in_hello_mark_directives_accepted(env):
    """Directive ids an agent lists as done in its Hello are treated as accepted."""
    clock, store, token, transport, ex, metrics = env
    await ex.execute([start("d1")], token)
    await ex.on_completed("c1", ["d1", "unknown"], token)
    assert ex.open_records()[0].status is S.ACCEPTED


async def test_unacknowledged_directive_expires(env):
    """No ack within ack_timeout_s: the directive expires (it will not be resent; the reconciler decides
    afresh from reports)."""
    clock, store, token, transport, ex, metrics = env
    await ex.execute([start("d1")], token)
    clock.advance(29.0)
    await ex.resolve(observed(clusters=()), token)
    assert len(ex.open_records()) == 1
    clock.advance(2.0)
    await ex.resolve(observed(clusters=()), token)
    assert ex.open_records() == []
    assert (await records.DirectiveLog(store).get("d1")).status is S.EXPIRED
    assert len(transport.sent) == 1


async def test_a_new_term_loads_open_directives(env):
    """Open directives recorded by an earlier leader are loaded by the next one."""
    clock, store, token, transport, ex, metrics = env
    await ex.execute([start("d1")], token)
    fresh = reconciler.Executor(log_store=records.DirectiveLog(store), transport=transport, clock=clock,
                                metrics=metrics, timeouts=reconciler.Timeouts())
    assert await fresh.load() == 1
    assert fresh.open_directives()[0].directive.directive_id == "d1"


def test_resolve_drain_and_resize():
    """A drain is done when its replica is gone; a resize when the pool reaches its target; a resize of a
    stocked-out pool fails."""
    drain = records.DirectiveRecord(fm.Directive("x", fm.DrainReplica("r1", 10)), "c1", S.ACCEPTED, 0.0, 0.0)
    resize = records.DirectiveRecord(fm.Directive("y", fm.ResizePool("l4", 3)), "c1", S.ACCEPTED, 0.0, 0.0)
    pool = fm.GpuPool("l4", "L4", 24, 1, "g6.xlarge", 3, 0, 4, 0, fm.Tier.ON_DEMAND, 1.0, 8)
    changed = reconciler.resolve([drain, resize], reconciler.Observed({"c1"}, {}, {"c1/l4": pool}), 1.0,
                                 reconciler.Timeouts())
    assert [(r.directive_id, r.status) for r in changed] == [("x", S.SUCCEEDED), ("y", S.SUCCEEDED)]
    stocked = fm.GpuPool("l4", "L4", 24, 1, "g6.xlarge", 1, 0, 4, 0, fm.Tier.ON_DEMAND, 1.0, 8,
                         fm.ProvisioningState.STOCKED_OUT)
    changed = reconciler.resolve([resize], reconciler.Observed({"c1"}, {}, {"c1/l4": stocked}), 1.0,
                                 reconciler.Timeouts())
    assert [(r.directive_id, r.status) for r in changed] == [("y", S.FAILED)]


async def test_a_hello_cannot_mark_another_clusters_directive_done(env):
    """A Hello from c2 listing c1's open directive as completed changes nothing and is counted."""
    clock, store, token, transport, ex, metrics = env
    await ex.execute([start("d1")], token)
    await ex.on_completed("c2", ["d1"], token)
    assert ex.open_records()[0].status is S.SENT
    assert metrics.registry.get_sample_value("meridian_scheduler_auth_failures_total",
                                             {"surface": "agent", "reason": "foreign_ack"}) == 1
