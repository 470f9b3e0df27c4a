"""The pure reconciler: make-before-break, adoption, rate limits, stock-out, spot replacement, and
keeping the serving capacity of a deployment the plan cannot place."""

from __future__ import annotations

import dataclasses

from meridian.fleet import models as fm
from scheduler.reconciler import plan
from scheduler.reconciler import types as t
from scheduler.solver import problem

from reconciler_helpers import deployment, of_kind, pool, replica, target

S = t.ReconcileSettings(drain_deadline_s=90, directives_per_min=60, burst=10, pool_scale_down_delay_s=300)
NOW = 1000.0


def run(inp: t.ReconcileInput, state: t.ReconcileState | None = None, settings: t.ReconcileSettings = S):
    return plan.reconcile(inp, state or t.ReconcileState(), settings, id_prefix="t1")


def test_reported_replicas_matching_the_plan_are_adopted_not_restarted():
    """Replicas agents report where the plan wants them produce no directive at all."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=2, nodes=4)}
    reps = (replica("c1", "l4", "r1", dep), replica("c1", "l4", "r2", dep))
    out = run(t.ReconcileInput(NOW, target(("chat-8b", "c1/l4", 2)), {"chat-8b": dep}, pools, reps))
    assert out.directives == ()


def test_deficit_starts_replicas_with_unique_ids_and_the_deployment_runtime():
    """A deficit of two starts two replicas with distinct directive and replica ids, the spec's
    revision and the runtime for the pool's GPU type."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=4)}
    out = run(t.ReconcileInput(NOW, target(("chat-8b", "c1/l4", 2)), {"chat-8b": dep}, pools))
    starts = of_kind(out, fm.StartReplica)
    assert len(starts) == 2
    assert len({p.directive.directive_id for p in starts}) == 2
    assert len({p.directive.action.replica_id for p in starts}) == 2
    a = starts[0].directive.action
    assert a.revision == dep.revision and a.pool_id == "l4" and a.gpu_count == 1
    assert a.runtime.served_model_name == "llama-3.1-8b" and a.runtime.tp_size == 1
    assert out.state.serial == 2


def test_pending_start_is_not_started_again():
    """An open start whose replica is not reported yet counts toward the target: no second start."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=4)}
    first = run(t.ReconcileInput(NOW, target(("chat-8b", "c1/l4", 1)), {"chat-8b": dep}, pools))
    opened = tuple(t.OpenDirective(p.cluster_id, p.directive) for p in first.directives)
    again = run(t.ReconcileInput(NOW + 5, target(("chat-8b", "c1/l4", 1)), {"chat-8b": dep}, pools, (), opened),
                first.state)
    assert again.directives == ()


def test_make_before_break_moves_a_replica_only_after_the_new_one_is_ready():
    """Moving a replica from pool A to pool B starts the new one first and drains the old one only
    once the new one reports READY."""
    dep = deployment()
    pools = {"c1/a": pool("c1", "a", free=3), "c2/b": pool("c2", "b", free=4)}
    old = replica("c1", "a", "old", dep)
    goal = target(("chat-8b", "c2/b", 1))
    r1 = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools, (old,)))
    assert [p.directive.action.pool_id for p in of_kind(r1, fm.StartReplica)] == ["b"]
    assert of_kind(r1, fm.DrainReplica) == []
    assert any("make-before-break" in h.reason for h in r1.held)
    new_id = of_kind(r1, fm.StartReplica)[0].directive.action.replica_id
    opened = tuple(t.OpenDirective(p.cluster_id, p.directive) for p in r1.directives)

    starting = replica("c2", "b", new_id, dep, state=fm.ReplicaState.STARTING)
    r2 = run(t.ReconcileInput(NOW + 10, goal, {"chat-8b": dep}, pools, (old, starting), opened), r1.state)
    assert r2.directives == ()

    ready = replica("c2", "b", new_id, dep)
    r3 = run(t.ReconcileInput(NOW + 60, goal, {"chat-8b": dep}, pools, (old, ready)), r2.state)
    drains = of_kind(r3, fm.DrainReplica)
    assert [p.directive.action.replica_id for p in drains] == ["old"]
    assert drains[0].cluster_id == "c1" and drains[0].directive.action.deadline_s == 90


def test_scale_down_drains_surplus_least_loaded_first():
    """With more READY replicas than the plan wants, the surplus is drained, least loaded first."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = (replica("c1", "l4", "busy", dep, outstanding=9), replica("c1", "l4", "idle", dep, outstanding=0),
            replica("c1", "l4", "mid", dep, outstanding=3))
    out = run(t.ReconcileInput(NOW, target(("chat-8b", "c1/l4", 1)), {"chat-8b": dep}, pools, reps))
    assert sorted(p.directive.action.replica_id for p in of_kind(out, fm.DrainReplica)) == ["idle", "mid"]


def test_rolling_a_new_revision_is_make_before_break():
    """Replicas of an outdated revision get replacements and drain only as the new ones become ready."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=2, nodes=4)}
    old = (replica("c1", "l4", "o1", dep, revision="old"), replica("c1", "l4", "o2", dep, revision="old"))
    goal = target(("chat-8b", "c1/l4", 2))
    r1 = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools, old))
    assert len(of_kind(r1, fm.StartReplica)) == 2 and of_kind(r1, fm.DrainReplica) == []
    ids = [p.directive.action.replica_id for p in of_kind(r1, fm.StartReplica)]
    one_ready = old + (replica("c1", "l4", ids[0], dep), replica("c1", "l4", ids[1], dep, state=fm.ReplicaState.STARTING))
    r2 = run(t.ReconcileInput(NOW + 30, goal, {"chat-8b": dep}, pools, one_ready), r1.state)
    assert len(of_kind(r2, fm.DrainReplica)) == 1


def test_a_full_pool_that_cannot_grow_lets_one_old_replica_go_first():
    """A new revision on a full pool at nodes_max: make-before-break would wait forever, so one
    outdated replica drains first (never the last ready one, one at a time); its GPU then takes
    the first new replica. A pool that can still grow waits for nodes instead."""
    dep = deployment()
    full = {"c1/l4": pool("c1", "l4", free=0, nodes=2, nodes_max=2)}
    old = (replica("c1", "l4", "o1", dep, revision="old"), replica("c1", "l4", "o2", dep, revision="old"))
    goal = target(("chat-8b", "c1/l4", 2))
    r1 = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, full, old))
    drains = of_kind(r1, fm.DrainReplica)
    assert len(drains) == 1 and of_kind(r1, fm.StartReplica) == []
    assert "cannot grow" in drains[0].reason
    opened = tuple(t.OpenDirective(p.cluster_id, p.directive) for p in r1.directives)
    r2 = run(t.ReconcileInput(NOW + 5, goal, {"chat-8b": dep}, full, old, opened), r1.state)
    assert of_kind(r2, fm.DrainReplica) == []  # one at a time
    gone = drains[0].directive.action.replica_id
    left = tuple(r for r in old if r.replica_id != gone)
    freed = {"c1/l4": pool("c1", "l4", free=1, nodes=2, nodes_max=2)}
    r3 = run(t.ReconcileInput(NOW + 60, goal, {"chat-8b": dep}, freed, left), r2.state)
    assert len(of_kind(r3, fm.StartReplica)) == 1 and of_kind(r3, fm.DrainReplica) == []  # the last old one stays
    room = {"c1/l4": pool("c1", "l4", free=0, nodes=2, nodes_max=4)}
    r4 = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, room, old))
    assert of_kind(r4, fm.DrainReplica) == [] and len(of_kind(r4, fm.ResizePool)) == 1


def test_rate_limit_per_cluster_holds_the_rest_for_later_rounds():
    """With a burst of 2, only two directives go to a cluster at once; the bucket refills with time and
    another cluster has its own bucket."""
    dep = deployment()
    settings = dataclasses.replace(S, burst=2, directives_per_min=6)
    pools = {"c1/l4": pool("c1", "l4", free=8), "c2/l4": pool("c2", "l4", free=8)}
    goal = target(("chat-8b", "c1/l4", 5), ("chat-8b", "c2/l4", 1))
    r1 = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools), settings=settings)
    by_cluster = [p.cluster_id for p in r1.directives]
    assert by_cluster.count("c1") == 2 and by_cluster.count("c2") == 1
    assert sum(1 for h in r1.held if h.reason == "rate limited") == 3
    opened = tuple(t.OpenDirective(p.cluster_id, p.directive) for p in r1.directives)
    r2 = run(t.ReconcileInput(NOW + 1, goal, {"chat-8b": dep}, pools, (), opened), r1.state, settings)
    assert r2.directives == ()
    opened += tuple(t.OpenDirective(p.cluster_id, p.directive) for p in r2.directives)
    r3 = run(t.ReconcileInput(NOW + 11, goal, {"chat-8b": dep}, pools, (), opened), r2.state, settings)
    assert [p.cluster_id for p in r3.directives] == ["c1"]


def test_spot_notice_starts_a_replacement_at_once_even_when_rate_limited():
    """A replica under a spot interruption notice gets a replacement started in the same round,
    bypassing an empty rate-limit bucket, and is itself drained only when the replacement is ready."""
    dep = deployment()
    pools = {"c1/spot": pool("c1", "spot", free=0, tier=fm.Tier.SPOT), "c1/od": pool("c1", "od", free=2)}
    doomed = replica("c1", "spot", "s1", dep, doomed_at_s=NOW + 120)
    empty = t.ReconcileState(buckets={"c1": (0.0, NOW)})
    goal = target(("chat-8b", "c1/od", 1))
    out = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools, (doomed,)), empty)
    starts = of_kind(out, fm.StartReplica)
    assert len(starts) == 1 and starts[0].urgent and starts[0].directive.action.pool_id == "od"
    assert of_kind(out, fm.DrainReplica) == []
    new = replica("c1", "od", starts[0].directive.action.replica_id, dep)
    later = run(t.ReconcileInput(NOW + 40, goal, {"chat-8b": dep}, pools, (doomed, new)),
                dataclasses.replace(out.state, buckets={"c1": (5.0, NOW + 40)}))
    drains = of_kind(later, fm.DrainReplica)
    assert [d.directive.action.replica_id for d in drains] == ["s1"]
    assert drains[0].directive.action.deadline_s <= 80


def test_spot_replacement_in_the_same_pool_when_the_plan_keeps_it():
    """When the plan still wants the spot pool, the doomed replica does not count, so a replacement
    starts there at once if the pool has free GPUs."""
    dep = deployment()
    pools = {"c1/spot": pool("c1", "spot", free=1, tier=fm.Tier.SPOT)}
    doomed = replica("c1", "spot", "s1", dep, doomed_at_s=NOW + 120)
    out = run(t.ReconcileInput(NOW, target(("chat-8b", "c1/spot", 1)), {"chat-8b": dep}, pools, (doomed,)))
    assert [p.urgent for p in of_kind(out, fm.StartReplica)] == [True]


def test_no_free_gpus_resizes_the_pool_and_the_start_waits():
    """A start that does not fit asks the pool for nodes (once) and waits for them."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0, nodes=2, nodes_max=8)}
    out = run(t.ReconcileInput(NOW, target(("chat-8b", "c1/l4", 3)), {"chat-8b": dep}, pools))
    resizes = of_kind(out, fm.ResizePool)
    assert [(p.directive.action.pool_id, p.directive.action.target_nodes) for p in resizes] == [("l4", 5)]
    assert of_kind(out, fm.StartReplica) == []
    opened = tuple(t.OpenDirective(p.cluster_id, p.directive) for p in out.directives)
    again = run(t.ReconcileInput(NOW + 5, target(("chat-8b", "c1/l4", 3)), {"chat-8b": dep}, pools, (), opened),
                out.state)
    assert of_kind(again, fm.ResizePool) == []


def test_stocked_out_pool_is_not_grown():
    """A pool in stock-out backoff gets no resize; the held reason says why."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0, nodes=2)}
    inp = t.ReconcileInput(NOW, target(("chat-8b", "c1/l4", 3)), {"chat-8b": dep}, pools,
                           no_growth={"c1/l4": "stock-out; retry after 60s"})
    out = run(inp)
    assert out.directives == ()
    assert any("stock-out" in h.reason for h in out.held)


def test_idle_nodes_are_released_after_the_delay():
    """Nodes beyond what replicas use and the plan wants are released only after the scale-down delay."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=3, nodes=4, nodes_min=1)}
    reps = (replica("c1", "l4", "r1", dep),)
    goal = target(("chat-8b", "c1/l4", 1))
    first = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools, reps))
    assert first.directives == ()
    later = run(t.ReconcileInput(NOW + 301, goal, {"chat-8b": dep}, pools, reps), first.state)
    assert [(p.directive.action.pool_id, p.directive.action.target_nodes) for p in of_kind(later, fm.ResizePool)] \
        == [("l4", 1)]


def test_idle_nodes_still_provisioning_are_released_after_the_delay_too():
    """Nodes being provisioned that no start waits for (a cloud's backfill after a spot preemption, an
    order the plan no longer needs) bill from the order: they count as idle from the first round and
    go after the delay, pending ones included, rather than only once they run."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0, nodes=2, pending=2)}
    reps = (replica("c1", "l4", "r1", dep), replica("c1", "l4", "r2", dep))
    goal = target(("chat-8b", "c1/l4", 2))
    first = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools, reps))
    assert of_kind(first, fm.ResizePool) == [] and first.state.pool_idle_since == {"c1/l4": NOW}
    later = run(t.ReconcileInput(NOW + 300, goal, {"chat-8b": dep}, pools, reps), first.state)
    (resize,) = of_kind(later, fm.ResizePool)
    assert resize.directive.action.target_nodes == 2 and "2 still provisioning" in resize.reason


def test_a_start_or_resize_under_way_postpones_the_shrink_but_not_the_delay():
    """While a start or a resize is open in a pool its idle nodes are not resized, but their idle time
    keeps counting: once nothing is under way, a pool idle for the delay shrinks at once."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=3, nodes=4)}
    reps = (replica("c1", "l4", "r1", dep),)
    goal = target(("chat-8b", "c1/l4", 1))
    resizing = (t.OpenDirective("c1", fm.Directive("x-1", fm.ResizePool("l4", 5))),)
    first = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools, reps, resizing))
    held = run(t.ReconcileInput(NOW + 301, goal, {"chat-8b": dep}, pools, reps, resizing), first.state)
    assert of_kind(held, fm.ResizePool) == []
    assert any(h.what == "shrink c1/l4" and "under way" in h.reason for h in held.held)
    done = run(t.ReconcileInput(NOW + 303, goal, {"chat-8b": dep}, pools, reps), held.state)
    assert [p.directive.action.target_nodes for p in of_kind(done, fm.ResizePool)] == [1]


def test_nodes_a_start_waits_for_are_not_idle():
    """Nodes ordered for a start that waits for GPUs are not idle: no shrink, however long it takes."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0, nodes=1, pending=1)}
    reps = (replica("c1", "l4", "r1", dep),)
    goal = target(("chat-8b", "c1/l4", 2))
    first = run(t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools, reps))
    later = run(t.ReconcileInput(NOW + 900, goal, {"chat-8b": dep}, pools, reps), first.state)
    assert of_kind(later, fm.ResizePool) == [] and "c1/l4" not in later.state.pool_idle_since


def test_failed_and_deleted_deployment_replicas_are_drained():
    """A FAILED replica is cleaned up, and replicas of a deleted deployment drain."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = (replica("c1", "l4", "f1", dep, state=fm.ReplicaState.FAILED), replica("c1", "l4", "r1", dep))
    out = run(t.ReconcileInput(NOW, target(), {}, pools, reps))
    assert sorted(p.directive.action.replica_id for p in of_kind(out, fm.DrainReplica)) == ["f1", "r1"]


def test_replicas_already_draining_are_not_drained_twice():
    """A replica with an open drain directive or reported DRAINING gets no further drain."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = (replica("c1", "l4", "d1", dep, state=fm.ReplicaState.DRAINING), replica("c1", "l4", "d2", dep))
    opened = (t.OpenDirective("c1", fm.Directive("x-1", fm.DrainReplica("d2", 90))),)
    out = run(t.ReconcileInput(NOW, target(), {"chat-8b": dep}, pools, reps, opened))
    assert out.directives == ()


def test_spot_replacement_without_free_gpus_resizes_at_once_past_the_rate_limit():
    """When the replacement does not fit, the pool resize it needs is urgent too (not rate limited)."""
    dep = deployment()
    pools = {"c1/spot": pool("c1", "spot", free=0, nodes=1, tier=fm.Tier.SPOT)}
    doomed = replica("c1", "spot", "s1", dep, doomed_at_s=NOW + 120)
    empty = t.ReconcileState(buckets={"c1": (0.0, NOW)})
    out = run(t.ReconcileInput(NOW, target(("chat-8b", "c1/spot", 1)), {"chat-8b": dep}, pools, (doomed,)), empty)
    resizes = of_kind(out, fm.ResizePool)
    assert [(p.directive.action.target_nodes, p.urgent) for p in resizes] == [(2, True)]


def test_scaling_change_keeps_the_replica_revision_but_a_runtime_change_rolls():
    """Changing scaling or SLA leaves running replicas alone; changing what a replica runs makes the
    old ones outdated."""
    dep = deployment()
    scaled = t.DeploymentInfo.of(dep.doc.model_copy(update={"spec": dep.doc.spec.model_copy(update={
        "scaling": dep.doc.spec.scaling.model_copy(update={"min_replicas": 5})})}))
    assert scaled.revision == dep.revision
    flags = t.DeploymentInfo.of(dep.doc.model_copy(update={"spec": dep.doc.spec.model_copy(update={
        "runtime": dep.doc.spec.runtime.model_copy(update={"mem_fraction_static": 0.8})})}))
    assert flags.revision != dep.revision


# ------------------------------------------------------------ a plan that cannot place a deployment

WHY = "3 for na-east: no L4 meets isolation: it needs 2 clouds and 1 regions with room at once"


def short(replicas: int | None = 3) -> t.Shortfall:
    return t.Shortfall(WHY, replicas)


def test_unplaced_deployment_keeps_every_ready_replica():
    """A plan that places none of a deployment (isolation cannot be met) drains none of its READY
    replicas, and says so in ``held`` with the count and the constraint."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0), "c2/l4": pool("c2", "l4", free=0)}
    reps = (replica("c1", "l4", "r1", dep), replica("c1", "l4", "r2", dep), replica("c2", "l4", "r3", dep))
    out = run(t.ReconcileInput(NOW, target(), {"chat-8b": dep}, pools, reps, unplaced={"chat-8b": short()}))
    assert of_kind(out, fm.DrainReplica) == []
    kept = [h for h in out.held if h.what.startswith("drain ")]
    assert len(kept) == 3
    assert kept[0].reason.startswith("keeping 3 ready replica(s) of chat-8b: the plan could not place it (")
    assert "isolation" in kept[0].reason


def test_partly_placed_deployment_moves_make_before_break_and_keeps_its_ready_count():
    """When the plan places fewer replicas than are ready and leaves demand unplaced, old replicas are
    drained only one for one as the plan's new replicas become READY: the ready count never drops."""
    dep = deployment()
    pools = {"c1/a": pool("c1", "a", free=0), "c2/b": pool("c2", "b", free=4)}
    old = tuple(replica("c1", "a", f"o{i}", dep, started_at=float(i)) for i in range(3))
    goal = target(("chat-8b", "c2/b", 1))
    inp = t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools, old, unplaced={"chat-8b": short(2)})
    r1 = run(inp)
    assert len(of_kind(r1, fm.StartReplica)) == 1 and of_kind(r1, fm.DrainReplica) == []
    new = replica("c2", "b", of_kind(r1, fm.StartReplica)[0].directive.action.replica_id, dep)
    r2 = run(dataclasses.replace(inp, now_s=NOW + 60, replicas=old + (new,)), r1.state)
    drained = [p.directive.action.replica_id for p in of_kind(r2, fm.DrainReplica)]
    assert len(drained) == 1
    # The drained replica is gone; the other two old ones still serve the unplaced demand.
    rest = tuple(r for r in old if r.replica_id not in drained) + (new,)
    r3 = run(dataclasses.replace(inp, now_s=NOW + 120, replicas=rest), r2.state)
    assert of_kind(r3, fm.DrainReplica) == []
    assert any(h.reason.startswith("keeping 3 ready replica(s) of chat-8b") for h in r3.held)


def test_fully_placed_again_the_kept_surplus_drains():
    """Once the plan places the deployment fully, replicas beyond its target drain as usual."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = tuple(replica("c1", "l4", f"r{i}", dep, outstanding=i) for i in range(3))
    kept = run(t.ReconcileInput(NOW, target(), {"chat-8b": dep}, pools, reps, unplaced={"chat-8b": short()}))
    assert of_kind(kept, fm.DrainReplica) == []
    placed = run(t.ReconcileInput(NOW + 30, target(("chat-8b", "c1/l4", 1)), {"chat-8b": dep}, pools, reps),
                 kept.state)
    assert sorted(p.directive.action.replica_id for p in of_kind(placed, fm.DrainReplica)) == ["r0", "r1"]


def test_replicas_lost_with_their_cluster_stop_counting_toward_the_kept_capacity():
    """Replicas that vanish (their cluster lost) lower the capacity kept for an unplaced deployment, so
    the plan's new replicas replace the survivors and the lost ones are not waited for."""
    dep = deployment()
    pools = {"c1/a": pool("c1", "a", free=0), "c2/b": pool("c2", "b", free=4)}
    old = (replica("c1", "a", "o1", dep), replica("c1", "a", "o2", dep), replica("c3", "x", "o3", dep))
    goal = target(("chat-8b", "c2/b", 2))
    inp = t.ReconcileInput(NOW, goal, {"chat-8b": dep}, pools, old, unplaced={"chat-8b": short()})
    r1 = run(inp)
    ids = [p.directive.action.replica_id for p in of_kind(r1, fm.StartReplica)]
    assert len(ids) == 2
    # c3 is lost: its replica leaves the input; the two new replicas are READY.
    now_up = old[:2] + tuple(replica("c2", "b", i, dep) for i in ids)
    r2 = run(dataclasses.replace(inp, now_s=NOW + 60, replicas=now_up), r1.state)
    assert sorted(p.directive.action.replica_id for p in of_kind(r2, fm.DrainReplica)) == ["o1", "o2"]


def test_starting_replicas_of_an_unplaced_deployment_are_kept_too():
    """A replica still STARTING when the plan fails to place its deployment is capacity on its way:
    it is not drained either."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = (replica("c1", "l4", "r1", dep), replica("c1", "l4", "s1", dep, state=fm.ReplicaState.STARTING))
    out = run(t.ReconcileInput(NOW, target(), {"chat-8b": dep}, pools, reps, unplaced={"chat-8b": short()}))
    assert of_kind(out, fm.DrainReplica) == []


def test_deleted_deployment_drains_even_while_the_plan_leaves_demand_unplaced():
    """Replicas of a deployment that has no spec any more drain whatever the plan says about placement."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = (replica("c1", "l4", "r1", dep), replica("c1", "l4", "r2", dep))
    out = run(t.ReconcileInput(NOW, target(), {}, pools, reps, unplaced={"chat-8b": short(None)}))
    assert sorted(p.directive.action.replica_id for p in of_kind(out, fm.DrainReplica)) == ["r1", "r2"]


def test_failed_replicas_of_an_unplaced_deployment_are_still_cleaned_up():
    """Keeping capacity does not keep a FAILED replica: it serves nothing."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = (replica("c1", "l4", "f1", dep, state=fm.ReplicaState.FAILED), replica("c1", "l4", "r1", dep))
    out = run(t.ReconcileInput(NOW, target(), {"chat-8b": dep}, pools, reps, unplaced={"chat-8b": short()}))
    assert [p.directive.action.replica_id for p in of_kind(out, fm.DrainReplica)] == ["f1"]


def test_kept_capacity_never_exceeds_what_demand_asks_for():
    """With the shortfall known, an unplaced deployment keeps only as many ready replicas as its demand
    asks for (target + shortfall): surplus the autoscaler no longer wants still drains, least loaded first."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = tuple(replica("c1", "l4", f"r{i}", dep, outstanding=i) for i in range(4))
    out = run(t.ReconcileInput(NOW, target(), {"chat-8b": dep}, pools, reps, unplaced={"chat-8b": short(2)}))
    assert sorted(p.directive.action.replica_id for p in of_kind(out, fm.DrainReplica)) == ["r0", "r1"]
    assert any(h.reason.startswith("keeping 2 ready replica(s) of chat-8b") for h in out.held)


def test_a_solve_without_a_plan_keeps_every_live_replica():
    """When the solve found no plan at all (shortfall unknown), no ready replica of any deployment is
    drained, however many there are."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = tuple(replica("c1", "l4", f"r{i}", dep) for i in range(4))
    out = run(t.ReconcileInput(NOW, target(("chat-8b", "c1/l4", 1)), {"chat-8b": dep}, pools, reps,
                               unplaced={"chat-8b": short(None)}))
    assert of_kind(out, fm.DrainReplica) == []


def test_a_spot_replica_at_its_deadline_does_not_let_another_ready_replica_go():
    """Make-before-break counts only replicas that will still serve: a spot replica whose deadline has
    come is drained, and it does not make room for draining an outdated READY replica too."""
    dep = deployment()
    pools = {"c1/l4": pool("c1", "l4", free=0)}
    reps = (replica("c1", "l4", "a", dep), replica("c1", "l4", "d", dep, doomed_at_s=NOW - 1),
            replica("c1", "l4", "o", dep, revision="old"))
    out = run(t.ReconcileInput(NOW, target(("chat-8b", "c1/l4", 2)), {"chat-8b": dep}, pools, reps))
    assert [p.directive.action.replica_id for p in of_kind(out, fm.DrainReplica)] == ["d"]


def test_unplaced_deployments_names_the_constraint_or_the_failed_solve():
    """``unplaced_deployments`` lists deployments with unplaced demand and why; a solve without a plan
    marks every deployment."""
    u = problem.Unplaced("chat-8b", "na-east", 3.0, "isolation",
                         "3 replica(s) of chat-8b for na-east unplaced: no L4 within 80 ms of na-east meets isolation")
    eu = problem.Unplaced("chat-8b", "eu-west", 0.5, "latency", "0.5 replica(s) of chat-8b for eu-west unplaced: far")
    ok = problem.PlacementResult(problem.SolveStatus.OPTIMAL, target(), 0.0, 0.0, 0.0, 0.1, (u, eu))
    why = plan.unplaced_deployments(ok, ["chat-8b", "embed"])
    assert list(why) == ["chat-8b"] and why["chat-8b"].replicas == 4
    assert "meets isolation" in why["chat-8b"].reason and "na-east" in why["chat-8b"].reason
    failed = problem.PlacementResult(problem.SolveStatus.NO_SOLUTION, target(), 0.0, 0.0, 0.0, 5.0, ())
    marked = plan.unplaced_deployments(failed, ["chat-8b", "embed"])
    assert set(marked) == {"chat-8b", "embed"} and marked["embed"].replicas is None


def test_demand_held_back_by_a_spending_limit_is_not_kept():
    """Demand the plan leaves unplaced only because of a team quota or a budget does not mark the
    deployment: the user asked to spend less, so replicas beyond the plan drain as usual."""
    u = problem.Unplaced("chat-8b", "na-east", 2.0, "budget", "2 replica(s) of chat-8b for na-east unplaced: budget")
    ok = problem.PlacementResult(problem.SolveStatus.OPTIMAL, target(), 0.0, 0.0, 0.0, 0.1, (u,))
    assert plan.unplaced_deployments(ok, ["chat-8b"]) == {}
