"""The pure reconciler under a rollout's revision split: step-sized starts of the new revision,
make-before-break across revisions, old-side starts from the old spec, blue_green's full second set
and switch, a withdrawn (rolled back) revision drained at once, and replicas kept out of traffic."""

from __future__ import annotations

from meridian import spec
from meridian.fleet import models as fm
from scheduler.reconciler import plan, revisions
from scheduler.reconciler import types as t

from reconciler_helpers import of_kind, pool, replica, target

S = t.ReconcileSettings(drain_deadline_s=90, directives_per_min=600, burst=100, pool_scale_down_delay_s=300)
NOW = 1000.0
TEXT = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat, revision: %s}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
"""


def info(rev: str) -> t.DeploymentInfo:
    return t.DeploymentInfo.of(spec.load_text(TEXT % rev, "chat.yaml").of_kind("ModelDeployment")[0])


OLD, NEW, THIRD = info("v1"), info("v2"), info("v0")
POOLS = {"c1/l4": pool("c1", "l4", free=8, nodes=16, nodes_max=16)}


def run(replicas, split: t.RevisionSplit | None, n: int = 4, pools=POOLS) -> t.ReconcileResult:
    inp = t.ReconcileInput(NOW, target(("chat", "c1/l4", n)), {"chat": NEW}, pools, tuple(replicas),
                           rollouts={"chat": split} if split is not None else {})
    return plan.reconcile(inp, t.ReconcileState(), S, id_prefix="t1")


def reps(dep: t.DeploymentInfo, count: int, prefix: str, state=fm.ReplicaState.READY) -> list[t.ReplicaInfo]:
    return [replica("c1", "l4", f"{prefix}{i}", dep, state=state) for i in range(count)]


def drained(result: t.ReconcileResult) -> set[str]:
    return {p.directive.action.replica_id for p in of_kind(result, fm.DrainReplica)}


def test_canary_step_starts_its_share_of_the_new_revision_and_drains_old_only_when_it_is_ready():
    """At 25% of four replicas one new-revision replica starts (with the new spec's runtime) and no
    old one drains; once it is READY one old replica drains, leaving three."""
    split = t.RevisionSplit(OLD, 25)
    first = run(reps(OLD, 4, "o"), split)
    starts = of_kind(first, fm.StartReplica)
    assert len(starts) == 1 and starts[0].directive.action.revision == NEW.revision
    assert starts[0].directive.action.deployment_spec_json == NEW.spec_json
    assert not drained(first)
    assert any("make-before-break" in h.reason for h in first.held)
    starting = run(reps(OLD, 4, "o") + reps(NEW, 1, "n", fm.ReplicaState.STARTING), split)
    assert starting.directives == ()
    ready = run(reps(OLD, 4, "o") + reps(NEW, 1, "n"), split)
    assert len(drained(ready)) == 1 and drained(ready) <= {"o0", "o1", "o2", "o3"}
    assert not of_kind(ready, fm.StartReplica)


def test_old_side_deficit_starts_the_old_spec():
    """The old side short of its share (a replica was lost) starts a replica of the old revision,
    from the old spec, not of the applied one."""
    result = run(reps(OLD, 2, "o") + reps(NEW, 1, "n"), t.RevisionSplit(OLD, 25))
    starts = of_kind(result, fm.StartReplica)
    assert len(starts) == 1
    action = starts[0].directive.action
    assert action.revision == OLD.revision and action.deployment_spec_json == OLD.spec_json


def test_old_side_other_revisions_give_way_first():
    """On the old side, a replica of a third (never fully rolled out) revision drains before the
    stable revision's."""
    result = run(reps(OLD, 2, "o") + reps(THIRD, 2, "x") + reps(NEW, 2, "n"), t.RevisionSplit(OLD, 50))
    assert drained(result) == {"x0", "x1"}


def test_blue_green_runs_a_full_second_set_then_drains_the_old_one_at_once_after_the_switch():
    """Before the switch the new revision gets a full set beside the old one (nothing drains); after
    it the old set, out of traffic, drains without waiting."""
    before = run(reps(OLD, 4, "o"), t.RevisionSplit(OLD, 100, keep_old=True))
    assert len(of_kind(before, fm.StartReplica)) == 4 and not drained(before)
    full = run(reps(OLD, 4, "o") + reps(NEW, 4, "n"), t.RevisionSplit(OLD, 100, keep_old=True))
    assert full.directives == ()
    after = run(reps(OLD, 4, "o") + reps(NEW, 4, "n"), t.RevisionSplit(OLD, 100, old_unrouted=True))
    assert drained(after) == {"o0", "o1", "o2", "o3"}


def test_withdrawn_revision_drains_at_once_and_the_old_one_is_restored():
    """A rolled-back revision's replicas drain without waiting for replacements while an old replica
    is READY, and the old revision is started back to the plan's full size."""
    result = run(reps(OLD, 2, "o") + reps(NEW, 2, "n"), t.RevisionSplit(OLD, 0, withdrawn=True))
    assert drained(result) == {"n0", "n1"}
    starts = of_kind(result, fm.StartReplica)
    assert len(starts) == 2 and {p.directive.action.revision for p in starts} == {OLD.revision}


def test_withdrawn_revision_keeps_serving_while_nothing_else_is_ready():
    """With no old replica READY, the withdrawn revision stays routed and is drained only as old
    replicas become READY (a rollback never leaves the deployment without a routed replica)."""
    split = t.RevisionSplit(OLD, 0, withdrawn=True)
    result = run(reps(NEW, 4, "n") + reps(OLD, 4, "o", fm.ReplicaState.STARTING), split)
    assert not drained(result)
    assert revisions.unrouted(split, NEW, [r.report for r in reps(NEW, 4, "n")]) == set()


def test_unrouted_follows_the_split():
    """Before a blue_green switch the new side takes no traffic, after it the old side; a canary
    routes both sides."""
    fleet = [r.report for r in reps(OLD, 2, "o") + reps(NEW, 2, "n")]
    assert revisions.unrouted(t.RevisionSplit(OLD, 100, keep_old=True), NEW, fleet) == {"n0", "n1"}
    assert revisions.unrouted(t.RevisionSplit(OLD, 100, old_unrouted=True), NEW, fleet) == {"o0", "o1"}
    assert revisions.unrouted(t.RevisionSplit(OLD, 50), NEW, fleet) == set()
    assert revisions.unrouted(None, NEW, fleet) == set()


def test_new_share_stays_in_the_pools_where_it_runs():
    """The new side's share goes first to pools already running it, so a step does not move it."""
    split = t.RevisionSplit(OLD, 50)
    new_want, old_want = revisions.pool_targets({"a": 2, "b": 2}, split, {"b": 1})
    assert new_want == {"a": 1, "b": 1} and old_want == {"a": 1, "b": 1}
    new_want, old_want = revisions.pool_targets({"a": 2, "b": 2}, t.RevisionSplit(OLD, 25), {"b": 1})
    assert new_want == {"a": 0, "b": 1} and old_want == {"a": 2, "b": 1}


def test_split_counts_round_up_and_keep_at_least_one():
    """A split gives the new side its percent of the total rounded up, at least one, never more than
    the total; keep_old leaves the old side whole."""
    assert t.RevisionSplit(OLD, 10).counts(10) == (1, 9)
    assert t.RevisionSplit(OLD, 10).counts(11) == (2, 9)
    assert t.RevisionSplit(OLD, 1).counts(3) == (1, 2)
    assert t.RevisionSplit(OLD, 100, keep_old=True).counts(3) == (3, 3)
    assert t.RevisionSplit(OLD, 50).counts(0) == (0, 0)
