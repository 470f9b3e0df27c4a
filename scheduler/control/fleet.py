"""The leader's live view of the fleet, learned only from agent reports (never stored as truth): per
cluster its identity, GPU pools, replicas, and liveness.

An agent that has been silent (no message of any kind) for ``lost_after_s`` is *lost*: its replicas
leave the routing table and the plan, and its pools are no longer offered to the solver. A stream
that merely closed keeps its cluster live until then, so a scheduler restart or a network blip does
not reroute traffic. A lost agent that connects again counts only from its new reports (what it said
before it was lost is forgotten). ``snapshot()`` gives frozen values for the pure planners."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping

from meridian.fleet import models as fm
from scheduler.control import journal as journal_mod
from scheduler.solver import problem

log = logging.getLogger("meridian.scheduler.fleet")


@dataclasses.dataclass(frozen=True)
class ClusterView:
    identity: fm.ClusterIdentity
    pools: Mapping[str, fm.GpuPool]
    replicas: Mapping[str, fm.ReplicaReport]
    connected: bool
    lost: bool
    last_seen_s: float
    reported: bool  # a complete replica report arrived since the agent (re)connected
    first_connected_at_s: float = 0.0  # its first Hello to this leader (the view is cleared between terms)

    @property
    def cluster_id(self) -> str:
        return self.identity.cluster_id

    @property
    def live(self) -> bool:
        return not self.lost


@dataclasses.dataclass(frozen=True)
class FleetSnapshot:
    clusters: Mapping[str, ClusterView]
    version: int
    taken_at: float

    def live(self) -> list[ClusterView]:
        return [c for _, c in sorted(self.clusters.items()) if c.live]

    def replicas(self) -> list[tuple[ClusterView, fm.ReplicaReport]]:
        """(cluster, replica) for every replica of a live cluster."""
        return [(c, r) for c in self.live() for _, r in sorted(c.replicas.items())]

    def pool_regions(self) -> dict[str, str]:
        """Pool key (``cluster/pool``) -> its cluster's cloud region, for every pool of a live cluster."""
        return {problem.pool_key(c.cluster_id, p.pool_id): c.identity.region
                for c in self.live() for p in c.pools.values()}


@dataclasses.dataclass
class _Cluster:
    identity: fm.ClusterIdentity
    pools: dict[str, fm.GpuPool] = dataclasses.field(default_factory=dict)
    replicas: dict[str, fm.ReplicaReport] = dataclasses.field(default_factory=dict)
    connected: bool = False
    lost: bool = False
    last_seen_s: float = 0.0
    reported: bool = False
    first_connected_at_s: float | None = None


class FleetView:
    """Mutated by the gRPC edge as messages arrive; read by the control loop through ``snapshot``.
    ``version`` increases with every change that matters to routing or placement (not load alone;
    ``load_version`` counts those)."""

    def __init__(self, lost_after_s: float, *, journal: journal_mod.Journal | None = None):
        if lost_after_s <= 0:
            raise ValueError(f"lost_after_s must be > 0, got {lost_after_s}")
        self.lost_after_s = lost_after_s
        self.journal = journal if journal is not None else journal_mod.Journal()  # clusters lost and back
        self._clusters: dict[str, _Cluster] = {}
        self.version = 0
        self.load_version = 0

    def _bump(self) -> None:
        self.version += 1

    def cluster_of_replica(self, replica_id: str) -> str | None:
        for cid, c in self._clusters.items():
            if replica_id in c.replicas:
                return cid
        return None

    def knows(self, cluster_id: str) -> bool:
        """Whether this term has heard Hello from the cluster (its view was not cleared since)."""
        return cluster_id in self._clusters

    def pools_of(self, cluster_id: str) -> dict[str, fm.GpuPool]:
        c = self._clusters.get(cluster_id)
        return dict(c.pools) if c else {}

    def connect(self, identity: fm.ClusterIdentity, now_s: float) -> None:
        c = self._clusters.get(identity.cluster_id)
        if c is None:
            c = self._clusters[identity.cluster_id] = _Cluster(identity)
        was_lost = c.lost
        c.identity, c.connected, c.lost, c.last_seen_s, c.reported = identity, True, False, now_s, False
        if was_lost:
            # What it reported before it was lost is stale (its replicas were replaced elsewhere and
            # may be gone): it counts again from its new inventory and report, not from memory.
            c.pools, c.replicas = {}, {}
        if c.first_connected_at_s is None:
            c.first_connected_at_s = now_s
        if was_lost:
            log.info("event=cluster_back cluster=%s", identity.cluster_id)
            self.journal.record(now_s, "cluster_back", cluster_id=identity.cluster_id,
                                message="the agent connected again; it counts from its new reports")
        self._bump()

    def disconnect(self, cluster_id: str, now_s: float) -> None:
        c = self._clusters.get(cluster_id)
        if c is not None and c.connected:
            c.connected = False
            self._bump()

    def seen(self, cluster_id: str, now_s: float) -> None:
        c = self._clusters.get(cluster_id)
        if c is not None:
            c.last_seen_s = max(c.last_seen_s, now_s)

    def inventory(self, cluster_id: str, pools: Iterable[fm.GpuPool], complete: bool, now_s: float) -> None:
        c = self._clusters.get(cluster_id)
        if c is None:
            unknown(cluster_id, "inventory")
            return
        self.seen(cluster_id, now_s)
        new = {p.pool_id: p for p in pools}
        merged = new if complete else {**c.pools, **new}
        if merged != c.pools:
            c.pools = merged
            self._bump()

    def report(self, cluster_id: str, reports: Iterable[fm.ReplicaReport], complete: bool, now_s: float) -> None:
        """Replica reports of one cluster. A STOPPED replica is forgotten; with ``complete``, replicas
        absent from the message are gone."""
        c = self._clusters.get(cluster_id)
        if c is None:
            unknown(cluster_id, "replica report")
            return
        self.seen(cluster_id, now_s)
        incoming = {r.replica_id: r for r in reports}
        merged = {} if complete else dict(c.replicas)
        merged.update(incoming)
        merged = {k: r for k, r in merged.items() if r.state is not fm.ReplicaState.STOPPED}
        structural = ({k: _shape(r) for k, r in merged.items()} != {k: _shape(r) for k, r in c.replicas.items()})
        c.replicas = merged
        if complete and not c.reported:
            c.reported = True
            structural = True
        if structural:
            self._bump()
        else:
            self.load_version += 1

    def sweep(self, now_s: float) -> list[str]:
        """Mark agents silent for ``lost_after_s`` as lost; returns the clusters newly lost."""
        lost = []
        for cid, c in self._clusters.items():
            if not c.lost and now_s - c.last_seen_s >= self.lost_after_s:
                c.lost, c.connected = True, False
                lost.append(cid)
                log.warning("event=cluster_lost cluster=%s silent_s=%.1f replicas=%d", cid, now_s - c.last_seen_s,
                            len(c.replicas))
                self.journal.record(now_s, "cluster_lost", cluster_id=cid,
                                    message=f"silent for {now_s - c.last_seen_s:.0f}s; its {len(c.replicas)} "
                                            "replica(s) leave the routes and are re-placed elsewhere")
        if lost:
            self._bump()
        return lost

    def forget(self, cluster_id: str) -> None:
        if self._clusters.pop(cluster_id, None) is not None:
            self._bump()

    def clear(self) -> None:
        """Forget everything (leadership lost: the next leader learns afresh from reports)."""
        self._clusters.clear()
        self._bump()

    def snapshot(self, now_s: float) -> FleetSnapshot:
        return FleetSnapshot(
            {cid: ClusterView(c.identity, dict(c.pools), dict(c.replicas), c.connected, c.lost, c.last_seen_s,
                              c.reported, c.first_connected_at_s or 0.0)
             for cid, c in self._clusters.items()},
            self.version, now_s)


def _shape(r: fm.ReplicaReport) -> tuple:
    """The parts of a report that change routing or placement (not load)."""
    return (r.deployment, r.revision, r.endpoint, r.state, r.pool_id, r.gpu_count, r.served_model_name)


def unknown(cluster_id: str, what: str) -> None:
    """A message from a cluster this term has not heard Hello from: its stream began in a term that
    has ended (the fleet was cleared) and is being closed; the agent says Hello to the next term."""
    log.info("event=report_ignored cluster=%s what=%s reason='no Hello from it in this term'", cluster_id, what)
