"""Resolving open directives from what agents report (pure): a start is done when its replica shows
up, a drain when its replica is gone, a resize when the pool reaches its target; anything that gets
no answer in time expires. An expired directive is never resent: the reconciler looks at the fleet
again and, if the effect is still missing, issues a new directive with a new id."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping

from meridian.fleet import models as fm
from scheduler.state import records

S = records.DirectiveStatus


@dataclasses.dataclass(frozen=True)
class Timeouts:
    ack_s: float = 30.0
    start_s: float = 1200.0
    drain_grace_s: float = 60.0  # beyond the drain's own deadline


@dataclasses.dataclass(frozen=True)
class Observed:
    """What the fleet shows now, for the clusters whose agents have sent a complete report."""

    clusters: Collection[str]
    replicas: Mapping[str, fm.ReplicaReport]  # replica id -> report (those clusters only)
    pools: Mapping[str, fm.GpuPool]  # "cluster/pool" -> pool (those clusters only)


def resolve(open_records: Iterable[records.DirectiveRecord], observed: Observed, now_s: float,
            timeouts: Timeouts) -> list[records.DirectiveRecord]:
    """The open records whose status changes now, with their new status."""
    out = []
    for rec in open_records:
        new = _resolve_one(rec, observed, now_s, timeouts)
        if new is not None:
            out.append(rec.with_status(new[0], now_s, new[1]))
    return out


def _resolve_one(rec: records.DirectiveRecord, observed: Observed, now: float,
                 timeouts: Timeouts) -> tuple[S, str] | None:
    a = rec.directive.action
    age = now - rec.updated_at
    if rec.cluster_id in observed.clusters:
        if isinstance(a, fm.StartReplica):
            r = observed.replicas.get(a.replica_id)
            if r is not None:
                if r.state is fm.ReplicaState.FAILED:
                    return S.FAILED, f"replica failed: {r.message[:200]}"
                return S.SUCCEEDED, f"replica reported {r.state.value}"
        elif isinstance(a, fm.DrainReplica):
            if a.replica_id not in observed.replicas:
                return S.SUCCEEDED, "replica gone"
        elif isinstance(a, fm.ResizePool):
            p = observed.pools.get(f"{rec.cluster_id}/{a.pool_id}")
            if p is not None and p.nodes_current == a.target_nodes and p.nodes_pending == 0:
                return S.SUCCEEDED, f"pool at {a.target_nodes} node(s)"
            if p is not None and p.provisioning_state is fm.ProvisioningState.STOCKED_OUT:
                return S.FAILED, "pool stocked out"
    if rec.status in (S.CLAIMED, S.SENT) and age > timeouts.ack_s:
        return S.EXPIRED, f"no acknowledgement within {timeouts.ack_s:g}s"
    if rec.status is S.ACCEPTED:
        limit = timeouts.start_s
        if isinstance(a, fm.DrainReplica):
            limit = a.deadline_s + timeouts.drain_grace_s
        if age > limit:
            return S.EXPIRED, f"no effect within {limit:g}s of acceptance"
    return None
