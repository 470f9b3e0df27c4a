"""Inputs and outputs of the reconciler: frozen values, so ``reconcile`` is a pure function and the
simulator, the tests and the service run the same decision code."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping

from meridian.fleet import models as fm
from meridian.spec import deployment as deployment_spec
from scheduler.solver import problem


@dataclasses.dataclass(frozen=True)
class ReconcileSettings:
    drain_deadline_s: int = 120
    directives_per_min: float = 30.0
    burst: int = 10
    pool_scale_down_delay_s: float = 300.0

    def __post_init__(self) -> None:
        if self.directives_per_min <= 0:
            raise ValueError(f"directives_per_min must be > 0, got {self.directives_per_min}")
        if self.burst < 1:
            raise ValueError(f"burst must be >= 1, got {self.burst}")


def replica_revision(doc: deployment_spec.ModelDeployment) -> str:
    """A content hash of what a replica runs: the model, the runtime and the GPUs per replica.

    Unlike ``meridian.fleet.runtime.revision_of`` (the whole spec), a change of SLA, scaling or
    placement keeps this revision, so it re-plans capacity without restarting every replica; a
    change of model, engine flags or GPUs per replica rolls them (make-before-break)."""
    s = doc.spec
    what = {"model": s.model.model_dump(mode="json"), "runtime": s.runtime.model_dump(mode="json"),
            "gpus_per_replica": s.resources.gpus_per_replica, "gpus_by_type": s.resources.gpus_by_type}
    return hashlib.sha256(json.dumps(what, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True)
class DeploymentInfo:
    """An applied deployment with what its replicas are started from."""

    doc: deployment_spec.ModelDeployment
    revision: str
    spec_json: str

    @property
    def name(self) -> str:
        return self.doc.metadata.name

    @classmethod
    def of(cls, doc: deployment_spec.ModelDeployment) -> DeploymentInfo:
        return cls(doc, replica_revision(doc),
                   json.dumps(doc.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":")))

    def gpus_on(self, gpu_type: str) -> int:
        return self.doc.spec.resources.gpus_for(gpu_type)


@dataclasses.dataclass(frozen=True)
class RevisionSplit:
    """How a deployment under rollout divides the plan's replicas between its *new* revision (the
    applied spec's, ``DeploymentInfo.revision``) and its *old* side (every other revision; starts on
    that side run ``old``, the last spec fully rolled out). ``scheduler.rollout`` decides it.

    ``new_percent``: the new revision's share of the plan's replicas, rounded up, at least one while
    above 0. ``keep_old``: the old side keeps the plan's full size beside the new one (blue_green
    before its switch); the new side then serves no traffic. ``old_unrouted``: the old side serves no
    traffic (blue_green after its switch). ``withdrawn``: the new revision was rolled back: its
    replicas leave the routes and drain without waiting for replacements while the old revision has a
    READY replica, and only ``old.revision`` counts on the old side (any third revision is outdated)."""

    old: DeploymentInfo
    new_percent: int
    keep_old: bool = False
    old_unrouted: bool = False
    withdrawn: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.new_percent <= 100:
            raise ValueError(f"new_percent must be in 0..100, got {self.new_percent}")
        if self.withdrawn and self.new_percent:
            raise ValueError("a withdrawn revision gets no replicas: new_percent must be 0")

    def counts(self, total: int) -> tuple[int, int]:
        """(new, old) replicas out of the plan's ``total`` for the deployment."""
        return split_counts(total, self.new_percent, self.keep_old)


def split_counts(total: int, new_percent: int, keep_old: bool) -> tuple[int, int]:
    """(new, old) replicas out of ``total``: the new side ``new_percent`` of it, rounded up, at least
    one while the percent is above 0; the old side the rest (all of ``total`` with ``keep_old``)."""
    if total <= 0:
        return 0, 0
    new = 0 if new_percent == 0 else min(total, max(1, -(-total * new_percent // 100)))
    return new, total if keep_old else total - new


@dataclasses.dataclass(frozen=True)
class PoolInfo:
    cluster_id: str
    pool: fm.GpuPool

    @property
    def key(self) -> str:
        return problem.pool_key(self.cluster_id, self.pool.pool_id)


@dataclasses.dataclass(frozen=True)
class ReplicaInfo:
    """A replica as its agent reported it; ``doomed_at_s`` is set when a spot interruption notice
    says its node goes away then (Unix seconds)."""

    cluster_id: str
    report: fm.ReplicaReport
    doomed_at_s: float | None = None

    @property
    def replica_id(self) -> str:
        return self.report.replica_id

    @property
    def pool_key(self) -> str:
        return problem.pool_key(self.cluster_id, self.report.pool_id)


@dataclasses.dataclass(frozen=True)
class OpenDirective:
    """A directive sent (or claimed) and not yet resolved: its effect is on the way."""

    cluster_id: str
    directive: fm.Directive


@dataclasses.dataclass(frozen=True)
class ReconcileInput:
    """Everything the reconciler looks at, at ``now_s``.

    ``pools``: pools of live clusters, by pool key. ``replicas``: replicas of live clusters (the
    current placement: replicas reported by agents are adopted, never restarted). ``no_growth``:
    pools that must not grow now (stock-out backoff), with why. ``unplaced``: deployments the plan
    does not fully place (it left demand unplaced, or the solve found no plan at all), with their
    shortfall (``plan.unplaced_deployments`` builds it from a solver result); their serving capacity
    is kept (see ``ServingFloor``). ``rollouts``: deployments whose replicas are split between two
    revisions (see ``RevisionSplit``); any other deployment replaces a replica of another revision
    than its spec's as soon as a replacement is READY. ``reach``: (deployment, pool key) -> the
    client regions that pool serves within the deployment's ``max_rtt_ms`` (``reach.reach_map``;
    absent: no region is guarded, the count rule alone applies)."""

    now_s: float
    target: problem.Placement
    deployments: Mapping[str, DeploymentInfo]
    pools: Mapping[str, PoolInfo]
    replicas: tuple[ReplicaInfo, ...] = ()
    open_directives: tuple[OpenDirective, ...] = ()
    no_growth: Mapping[str, str] = dataclasses.field(default_factory=dict)
    unplaced: Mapping[str, Shortfall] = dataclasses.field(default_factory=dict)
    rollouts: Mapping[str, RevisionSplit] = dataclasses.field(default_factory=dict)
    reach: Mapping[tuple[str, str], frozenset[str]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Shortfall:
    """Why the plan does not fully place a deployment, in words, and how many replicas of its demand
    it leaves unplaced (None when the solve found no plan, so the shortfall is unknown)."""

    reason: str
    replicas: int | None = None

    def __post_init__(self) -> None:
        if self.replicas is not None and self.replicas < 0:
            raise ValueError(f"shortfall replicas must be >= 0, got {self.replicas}")


@dataclasses.dataclass(frozen=True)
class ServingFloor:
    """The capacity kept for a deployment while the plan cannot fully place it.

    ``replica_ids``: its live replicas (STARTING or READY, not draining) when the plan first failed to
    place it, those still live; ``drained``: how many of them the reconciler has drained since (each
    only once another replica was READY in its place). The deployment keeps ``count`` READY replicas,
    but never more than its demand asks for (the plan's target plus the shortfall, when known), so
    surplus the autoscaler no longer wants still drains. A replica that vanishes on its own (its
    cluster lost, it crashed, the cloud reclaimed it) leaves the set and lowers the floor; a drain of
    ours does not. Forgotten once the plan places the deployment fully (then its target applies
    again) or the deployment is deleted."""

    replica_ids: frozenset[str]
    drained: int = 0

    @property
    def count(self) -> int:
        return len(self.replica_ids) + self.drained


@dataclasses.dataclass(frozen=True)
class ReconcileState:
    """Carried between rounds: per-cluster token buckets (tokens, at_s), when each pool started
    having idle nodes, the serial that makes directive and replica ids unique within a term, the
    serving floor of each deployment the plan does not fully place, the consolidation under way and
    the spot nodes noticed and reclaimed."""

    buckets: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    pool_idle_since: Mapping[str, float] = dataclasses.field(default_factory=dict)
    serial: int = 0
    floors: Mapping[str, ServingFloor] = dataclasses.field(default_factory=dict)
    # Consolidation (``nodes``): pool key -> the node whose replicas are moving off it, and pool key
    # -> since when its replicas are spread over more nodes than they need.
    emptying: Mapping[str, str] = dataclasses.field(default_factory=dict)
    spread_since: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # Spot reclaims (``nodes.reclaims``): (pool key, node id) -> notice deadline for nodes under an
    # interruption notice, and pool key -> (nodes reclaimed lately whose backfill the plan did not
    # ask for, when the last went).
    notice_nodes: Mapping[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    reclaimed: Mapping[str, tuple[int, float]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PlannedDirective:
    cluster_id: str
    directive: fm.Directive
    reason: str
    urgent: bool = False


@dataclasses.dataclass(frozen=True)
class Held:
    """Something the reconciler wanted to do but did not, this round, and why."""

    cluster_id: str
    what: str
    reason: str


@dataclasses.dataclass(frozen=True)
class ReconcileResult:
    directives: tuple[PlannedDirective, ...]
    held: tuple[Held, ...]
    state: ReconcileState
