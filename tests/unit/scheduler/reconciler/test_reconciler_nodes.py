"""Pools sized by the nodes their replicas occupy: no shrink below the busy nodes (the agent would
refuse it), and a pool whose replicas are spread over more nodes than they need is consolidated,
make-before-break, so the emptied node can be released."""

from __future__ import annotations

import dataclasses

from meridian.fleet import models as fm
from scheduler.reconciler import nodes, plan
from scheduler.reconciler import types as t

from reconciler_helpers import deployment, of_kind, pool, replica, target

S = t.ReconcileSettings(drain_deadline_s=90, directives_per_min=60, burst=10, pool_scale_down_delay_s=300)
KEY = "c1/h100"


def on(r: t.ReplicaInfo, node: str, gpus: int) -> t.ReplicaInfo:
    return dataclasses.replace(r, report=dataclasses.replace(r.report, node_id=node, gpu_count=gpus))


def h100(free: int, nodes_current: int = 2, *, pending: int = 0,
         tier: fm.Tier = fm.Tier.ON_DEMAND) -> dict[str, t.PoolInfo]:
    return {KEY: pool("c1", "h100", free=free, nodes=nodes_current, nodes_max=3, gpus_per_node=8, gpu_type="H100",
                      tier=tier, pending=pending)}


def run(now: float, reps, state: t.ReconcileState, free: int = 0, nodes_current: int = 2,
        goal: tuple = (("chat-8b", KEY, 1), ("reasoning-70b", KEY, 1)),
        pools: dict[str, t.PoolInfo] | None = None) -> t.ReconcileResult:
    chat, big = deployment("chat-8b"), deployment("reasoning-70b")
    return plan.reconcile(t.ReconcileInput(now, target(*goal), {"chat-8b": chat, "reasoning-70b": big},
                                           pools or h100(free, nodes_current), tuple(reps)), state, S, id_prefix="t1")


def test_a_pool_spread_over_two_nodes_is_consolidated_then_shrunk():
    """A 1-GPU chat replica alone on node n1 and a 4-GPU replica on n2: 5 GPUs fit one 8-GPU node by
    count, but a shrink to one node would take a replica (the agent refuses it). So: no shrink while
    both nodes are busy; after the scale-down delay the chat replica moves (a replacement starts in
    the pool, which the agent's best fit puts on n2), drains once the replacement is READY, and the
    emptied node is released at once."""
    chat, big = deployment("chat-8b"), deployment("reasoning-70b")
    stay = on(replica("c1", "h100", "big", big), "n2", 4)
    old = on(replica("c1", "h100", "chat-old", chat), "n1", 1)
    state = t.ReconcileState()

    r0 = run(1000.0, [old, stay], state, free=11)
    assert r0.directives == ()  # before: a shrink to 1 node, refused by the agent every 5 minutes
    r1 = run(1200.0, [old, stay], r0.state, free=11)
    assert r1.directives == ()  # the delay runs
    r2 = run(1320.0, [old, stay], r1.state, free=11)
    starts = of_kind(r2, fm.StartReplica)
    assert [(p.directive.action.deployment, p.directive.action.pool_id) for p in starts] == [("chat-8b", "h100")]
    assert starts[0].directive.action.avoid_nodes == ("n1",)  # not back onto the node being emptied
    assert of_kind(r2, fm.DrainReplica) == [] and of_kind(r2, fm.ResizePool) == []
    assert r2.state.emptying == {KEY: "n1"}
    new_id = starts[0].directive.action.replica_id

    starting = on(replica("c1", "h100", new_id, chat, state=fm.ReplicaState.STARTING), "n2", 1)
    r3 = run(1340.0, [old, stay, starting], r2.state, free=10)
    assert r3.directives == ()
    assert any("drain chat-old" == h.what and "make-before-break" in h.reason for h in r3.held)

    ready = on(replica("c1", "h100", new_id, chat), "n2", 1)
    r4 = run(1400.0, [old, stay, ready], r3.state, free=10)
    drains = of_kind(r4, fm.DrainReplica)
    assert [p.directive.action.replica_id for p in drains] == ["chat-old"]
    assert "consolidation: node n1" in drains[0].reason

    # n1 empty: released in that round, not after another scale-down delay of idle (the spread
    # waited it already); before, n1 billed 300 s more.
    r5 = run(1500.0, [stay, ready], r4.state, free=11)
    resizes = of_kind(r5, fm.ResizePool)
    assert [p.directive.action.target_nodes for p in resizes] == [1]
    assert resizes[0].reason == "node n1 emptied by consolidation"
    assert r5.state.emptying == {}


def emptied_n1(goal: tuple = (("chat-8b", KEY, 1), ("reasoning-70b", KEY, 1))):
    """The consolidation of the test above, carried to the round before n1's last replica is gone:
    (its state, the replica staying on n2, the chat replica's replacement READY on n2)."""
    chat, big = deployment("chat-8b"), deployment("reasoning-70b")
    stay = on(replica("c1", "h100", "big", big), "n2", 4)
    old = on(replica("c1", "h100", "chat-old", chat), "n1", 1)
    state = run(1000.0, [old, stay], t.ReconcileState(), free=11, goal=goal).state
    r2 = run(1320.0, [old, stay], state, free=11, goal=goal)
    new_id = of_kind(r2, fm.StartReplica)[0].directive.action.replica_id
    ready = on(replica("c1", "h100", new_id, chat), "n2", 1)
    r4 = run(1400.0, [old, stay, ready], r2.state, free=10, goal=goal)
    assert [p.directive.action.replica_id for p in of_kind(r4, fm.DrainReplica)] == ["chat-old"]
    return r4.state, stay, ready


def test_an_emptied_node_waits_for_what_is_under_way_in_its_pool_then_goes():
    """When n1 is emptied while another replica of the pool is still draining, the release waits
    for it (the agent refuses a shrink below the busy nodes, and the pool is in flux) and then goes
    at once, not a scale-down delay later: the move stays on record until then."""
    chat = deployment("chat-8b")
    state, stay, ready = emptied_n1()
    leaving = on(replica("c1", "h100", "chat-x", chat, state=fm.ReplicaState.DRAINING), "n2", 1)
    r5 = run(1500.0, [stay, ready, leaving], state, free=10)
    assert of_kind(r5, fm.ResizePool) == [] and r5.state.emptying == {KEY: "n1"}
    r6 = run(1530.0, [stay, ready], r5.state, free=11)
    resizes = of_kind(r6, fm.ResizePool)
    assert [(p.directive.action.target_nodes, p.reason) for p in resizes] == [(1, "node n1 emptied by consolidation")]
    assert r6.state.emptying == {}


def test_an_emptied_node_the_plan_wants_again_is_kept():
    """By the time n1 is empty the plan wants 10 GPUs in the pool (two nodes' worth): nothing is
    given back, then or after the delay."""
    state, stay, ready = emptied_n1()
    grown = (("chat-8b", KEY, 6), ("reasoning-70b", KEY, 1))
    for now in (1500.0, 1900.0):
        out = run(now, [stay, ready], state, free=11, goal=grown)
        assert of_kind(out, fm.ResizePool) == []
        state = out.state
    # Nor is the move kept on record while something else is under way in the pool: the plan's
    # new replicas may start on n1 (no avoid_nodes), since they need it.
    chat = deployment("chat-8b")
    state, stay, ready = emptied_n1()
    leaving = on(replica("c1", "h100", "chat-x", chat, state=fm.ReplicaState.DRAINING), "n2", 1)
    out = run(1500.0, [stay, ready, leaving], state, free=10, goal=grown)
    assert out.state.emptying == {} and of_kind(out, fm.ResizePool) == []
    assert all(p.directive.action.avoid_nodes == () for p in of_kind(out, fm.StartReplica))


def test_no_move_where_the_other_nodes_have_no_room_or_the_node_is_unknown():
    """Three 5-GPU replicas on three 8-GPU nodes: 15 GPUs fit two nodes by count, but no node has
    room for another's replica: nothing moves and nothing shrinks. A replica that does not report
    its node (an older agent) leaves the pool to the GPU count."""
    big = deployment("reasoning-70b")
    a, b, c = (on(replica("c1", "h100", x, big), f"n{i}", 5) for i, x in enumerate("abc", 1))
    assert nodes.pick({"n1": 5, "n2": 5, "n3": 5}, 8, [a, b, c], KEY) is None
    state = t.ReconcileState()
    for now in (1000.0, 1400.0, 1800.0):
        out = run(now, [a, b, c], state, free=9, nodes_current=3, goal=(("reasoning-70b", KEY, 3),))
        assert of_kind(out, fm.StartReplica) == [] and of_kind(out, fm.DrainReplica) == []
        assert of_kind(out, fm.ResizePool) == []
        state = out.state
    unknown = dataclasses.replace(a, report=dataclasses.replace(a.report, node_id=""))
    assert nodes.by_pool([unknown, b]).get(KEY) is None


def test_pick_takes_the_least_used_node_whose_replicas_fit_elsewhere_best_fit():
    """n1 holds 1 GPU, n2 2, n3 6: n1's replica goes (it fits on n3's 2 free GPUs or n2's 6)."""
    chat = deployment("chat-8b")
    reps = [on(replica("c1", "h100", "x", chat), "n1", 1), on(replica("c1", "h100", "y", chat), "n2", 2),
            on(replica("c1", "h100", "z", chat), "n3", 6)]
    assert nodes.pick({"n1": 1, "n2": 2, "n3": 6}, 8, reps, KEY) == "n1"


def spot_h100(free: int, nodes_current: int, pending: int = 0) -> dict[str, t.PoolInfo]:
    return h100(free, nodes_current, pending=pending, tier=fm.Tier.SPOT)


def spot_run(now: float, reps, state: t.ReconcileState, pools: dict[str, t.PoolInfo]) -> t.ReconcileResult:
    return run(now, reps, state, goal=(("reasoning-70b", KEY, 2),), pools=pools)


def test_a_reclaimed_spot_node_the_cloud_backfills_is_given_back_at_once():
    """Two 4-GPU replicas on spot node n1 get a 30-s notice: the pool grows to 2 for their
    replacements (make-before-break). When n1 goes, the cloud's group keeps its target of 2 and
    orders a node in n1's place: two nodes on their way where the replacements need one. The extra
    one is given back in that round, not after 300 s of billing idle; the same pool state without
    a reclaim behind it keeps waiting for its resize."""
    big = deployment("reasoning-70b")
    doomed = [on(replica("c1", "h100", x, big, doomed_at_s=1030.0), "n1", 4) for x in ("a", "b")]
    r0 = spot_run(1000.0, doomed, t.ReconcileState(), spot_h100(free=0, nodes_current=1))
    grow = of_kind(r0, fm.ResizePool)
    assert [(p.directive.action.target_nodes, p.urgent) for p in grow] == [(2, True)]
    assert r0.state.notice_nodes == {(KEY, "n1"): 1030.0}

    r1 = spot_run(1060.0, [], r0.state, spot_h100(free=0, nodes_current=0, pending=2))
    shrink = of_kind(r1, fm.ResizePool)
    assert [p.directive.action.target_nodes for p in shrink] == [1]
    assert "after 1 spot reclaim" in shrink[0].reason
    assert r1.state.notice_nodes == {}

    # Nothing reclaimed: two nodes ordered for two waiting replicas' worth is the plan's own order.
    fresh = spot_run(1060.0, [], t.ReconcileState(), spot_h100(free=0, nodes_current=0, pending=2))
    assert of_kind(fresh, fm.ResizePool) == []

    # The reclaim is spent: a node idle later in the window waits out the delay as any idle node.
    r2 = spot_run(1120.0, [], r1.state, spot_h100(free=8, nodes_current=1))
    starts = of_kind(r2, fm.StartReplica)
    assert len(starts) == 2 and of_kind(r2, fm.ResizePool) == []
    ready = [on(replica("c1", "h100", p.directive.action.replica_id, big), "n2", 4) for p in starts]
    r3 = spot_run(1200.0, ready, r2.state, spot_h100(free=8, nodes_current=2))
    assert of_kind(r3, fm.ResizePool) == []


def test_a_noticed_node_still_hosting_replicas_is_not_counted_as_reclaimed():
    """A node past its notice deadline whose replicas are still reported (the agent's report is
    late) is not reclaimed yet: no pool shrinks on its account."""
    big = deployment("reasoning-70b")
    doomed = [on(replica("c1", "h100", x, big, doomed_at_s=1030.0), "n1", 4) for x in ("a", "b")]
    r0 = spot_run(1000.0, doomed, t.ReconcileState(), spot_h100(free=0, nodes_current=1))
    r1 = spot_run(1040.0, doomed, r0.state, spot_h100(free=0, nodes_current=1, pending=1))
    assert r1.state.reclaimed == {} and r1.state.notice_nodes == {(KEY, "n1"): 1030.0}
    assert of_kind(r1, fm.ResizePool) == []
