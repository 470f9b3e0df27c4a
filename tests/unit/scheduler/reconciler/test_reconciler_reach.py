"""Make-before-break per client region: a plan that moves a region's only nearby replica elsewhere
keeps it serving (within max_rtt_ms) until the replacement within reach is READY."""

from __future__ import annotations

from meridian.fleet import models as fm
from scheduler.reconciler import plan, reach
from scheduler.reconciler import types as t
from scheduler.solver import problem

from reconciler_helpers import deployment, of_kind, pool, replica

S = t.ReconcileSettings(drain_deadline_s=90, directives_per_min=60, burst=10, pool_scale_down_delay_s=300)
NOW = 1000.0
# Pools of four clusters: Oregon serves na-west, Ireland eu-west, Virginia both, Mumbai neither
# (chat-8b's max_rtt_ms is 90 in the examples).
REGIONS = {"usw/l4": "us-west-2", "euw/l4": "eu-west-1", "use/h100": "us-east-1", "aps/l4": "ap-south-1"}
RTT = {("na-west", "us-west-2"): 20.0, ("na-west", "us-east-1"): 65.0, ("eu-west", "us-east-1"): 75.0,
       ("eu-west", "eu-west-1"): 10.0, ("ap-south", "ap-south-1"): 5.0}


def rtt(client: str, cloud: str) -> float:
    return RTT.get((client, cloud), 250.0)


def inp(replicas, goal, covered=("na-west", "eu-west"), with_reach=True):
    dep = deployment()
    pools = {k: pool(k.split("/")[0], k.split("/")[1], free=4) for k in REGIONS}
    target = problem.Placement(replicas={("chat-8b", k): n for k, n in goal.items()},
                               demand={"chat-8b": {r: 1 for r in covered}}, coverage={"chat-8b": tuple(covered)})
    return t.ReconcileInput(NOW, target, {"chat-8b": dep}, pools, tuple(replicas),
                            reach=reach.reach_map({"chat-8b": dep}, REGIONS, rtt) if with_reach else {})


def run(i: t.ReconcileInput) -> t.ReconcileResult:
    return plan.reconcile(i, t.ReconcileState(), S, id_prefix="t1")


def test_reach_map_lists_the_sla_regions_within_max_rtt_of_each_pool():
    dep = deployment()
    assert dep.doc.spec.sla.max_rtt_ms == 90
    got = reach.reach_map({"chat-8b": dep}, REGIONS, rtt)
    assert got[("chat-8b", "usw/l4")] == {"na-west"}
    assert got[("chat-8b", "use/h100")] == {"na-west", "eu-west"}
    assert got[("chat-8b", "aps/l4")] == {"ap-south"}
    unknown = reach.reach_map({"chat-8b": dep}, {"x/l4": "nowhere-1"},
                              lambda a, b: (_ for _ in ()).throw(KeyError(b)))
    assert unknown[("chat-8b", "x/l4")] == frozenset()
    free = deployment("embed")  # no max_rtt_ms: served from anywhere, nothing to guard
    assert free.doc.spec.sla.max_rtt_ms is None
    assert reach.reach_map({"embed": free}, REGIONS, rtt) == {}


def test_a_regions_last_nearby_replica_stays_until_its_replacement_within_reach_is_ready():
    """The plan moves na-west's and eu-west's nearby replicas (Oregon, Ireland) to one in Virginia
    that reaches both, and keeps Mumbai's: 3 READY, 2 wanted. The count rule alone would drain one
    of them the round Virginia's start goes out (its region then served from 250 ms away for
    minutes); per region, both stay while it starts and both go once it is READY."""
    dep = deployment()
    now_ready = [replica("usw", "l4", "oregon", dep), replica("euw", "l4", "ireland", dep),
                 replica("aps", "l4", "mumbai", dep)]
    goal = {"use/h100": 1, "aps/l4": 1}

    blind = run(inp(now_ready, goal, with_reach=False))
    assert len(of_kind(blind, fm.DrainReplica)) == 1  # what the count rule alone does

    r1 = run(inp(now_ready, goal))
    assert [p.directive.action.pool_id for p in of_kind(r1, fm.StartReplica)] == ["h100"]
    assert of_kind(r1, fm.DrainReplica) == []
    held = {h.what: h.reason for h in r1.held}
    assert "within reach of na-west" in held["drain oregon"] and "use/h100" in held["drain oregon"]
    assert "within reach of eu-west" in held["drain ireland"]

    starting = replica("use", "h100", "virginia", dep, state=fm.ReplicaState.STARTING)
    r2 = run(inp(now_ready + [starting], goal))
    assert of_kind(r2, fm.DrainReplica) == [] and of_kind(r2, fm.StartReplica) == []

    ready = replica("use", "h100", "virginia", dep)
    r3 = run(inp(now_ready + [ready], goal))
    assert sorted(p.directive.action.replica_id for p in of_kind(r3, fm.DrainReplica)) == ["ireland", "oregon"]


def test_a_region_the_plan_no_longer_covers_does_not_hold_its_replica():
    """eu-west sent no traffic for the coverage hold: the plan covers na-west only, so Ireland's
    replica drains at once while Virginia starts (na-west keeps Oregon meanwhile)."""
    dep = deployment()
    now_ready = [replica("usw", "l4", "oregon", dep), replica("euw", "l4", "ireland", dep)]
    out = run(inp(now_ready, {"use/h100": 1}, covered=("na-west",)))
    assert [p.directive.action.replica_id for p in of_kind(out, fm.DrainReplica)] == ["ireland"]
    assert "drain oregon" in {h.what for h in out.held}


def test_a_spot_replica_under_notice_is_not_held_for_its_region():
    """A replica whose node is being reclaimed is drained before its deadline whatever its region:
    holding it would only lose its requests when the node goes."""
    dep = deployment()
    doomed = replica("usw", "l4", "oregon", dep, doomed_at_s=NOW + 100)
    others = [replica("euw", "l4", "ireland", dep), replica("aps", "l4", "mumbai", dep)]
    out = run(inp([doomed] + others, {"use/h100": 1, "aps/l4": 1}))
    drains = of_kind(out, fm.DrainReplica)
    assert [p.directive.action.replica_id for p in drains] == ["oregon"]
    assert 0 < drains[0].directive.action.deadline_s <= 100
