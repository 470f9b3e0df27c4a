"""Rollout arithmetic of the reconciler (pure): which side of a ``RevisionSplit`` a replica is on, how
many replicas of each side every pool of the plan holds, and which replicas take no traffic.

The control loop builds the routing table from ``unrouted`` too, so what routers send traffic to and
what the reconciler drains without waiting for a replacement are the same replicas."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from meridian.fleet import models as fm
from scheduler.reconciler import types as t

NEW, OLD, WITHDRAWN, OUTDATED = "new", "old", "withdrawn", "outdated"


def side_of(split: t.RevisionSplit, info: t.DeploymentInfo, revision: str) -> str:
    """``NEW``: the applied spec's revision; ``WITHDRAWN``: the same, rolled back; ``OLD``: any other
    revision (only the last rolled-out one once rolled back); ``OUTDATED``: a third revision after a
    rollback, replaced like any outdated replica."""
    if revision == info.revision:
        return WITHDRAWN if split.withdrawn else NEW
    if split.withdrawn and revision != split.old.revision:
        return OUTDATED
    return OLD


def pool_targets(target: Mapping[str, int], split: t.RevisionSplit,
                 new_present: Mapping[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(new, old) replicas wanted per pool, from the plan's ``target`` per pool.

    The new side's share goes first to the pools where new-revision replicas already run or start
    (``new_present``), so a later round or step never moves them; the rest to the pools the plan
    gives the most replicas, then by pool key. The old side gets the remainder of each pool (all of
    it while ``keep_old``)."""
    new_total, _old_total = split.counts(sum(target.values()))
    new_want = {key: 0 for key in target}
    left = new_total
    for key in sorted(target, key=lambda k: (-min(new_present.get(k, 0), target[k]), k)):
        give = min(target[key], new_present.get(key, 0), left)
        new_want[key] += give
        left -= give
    for key in sorted(target, key=lambda k: (-target[k], k)):
        if left <= 0:
            break
        give = min(target[key] - new_want[key], left)
        new_want[key] += give
        left -= give
    old_want = {key: n if split.keep_old else n - new_want[key] for key, n in target.items()}
    return new_want, old_want


def unrouted(split: t.RevisionSplit | None, info: t.DeploymentInfo | None,
             replicas: Iterable[fm.ReplicaReport]) -> set[str]:
    """Replica ids (of ``replicas``: one deployment's, not being drained) that take no traffic:
    the new side before a blue_green switch, the old side after it, a withdrawn revision. A side is
    taken out of traffic only while another READY replica of the deployment stays routed: a
    deployment never loses its last routed replica to a rollout."""
    if split is None or info is None:
        return set()
    replicas = list(replicas)
    hidden: set[str] = set()
    for r in replicas:
        side = side_of(split, info, r.revision)
        if (side == NEW and split.keep_old) or (side == OLD and split.old_unrouted) or side == WITHDRAWN:
            hidden.add(r.replica_id)
    routed_ready = any(r.state is fm.ReplicaState.READY and r.replica_id not in hidden for r in replicas)
    return hidden if routed_ready else set()
