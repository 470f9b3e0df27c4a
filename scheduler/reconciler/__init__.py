"""The reconciler: ``reconcile`` (pure) turns the placement plan and the reported fleet into
directives; the ``Executor`` sends them (claimed once, fenced) and tracks their outcome."""

from scheduler.reconciler import executor, plan, ratelimit, reach, revisions, tracking, types
from scheduler.reconciler.executor import Executor, Transport
from scheduler.reconciler.plan import reconcile, unplaced_deployments
from scheduler.reconciler.tracking import Observed, Timeouts, resolve
from scheduler.reconciler.types import (
    DeploymentInfo,
    Held,
    OpenDirective,
    PlannedDirective,
    PoolInfo,
    ReconcileInput,
    ReconcileResult,
    ReconcileSettings,
    ReconcileState,
    ReplicaInfo,
    RevisionSplit,
    ServingFloor,
)

__all__ = [
    "DeploymentInfo", "Executor", "Held", "Observed", "OpenDirective", "PlannedDirective", "PoolInfo",
    "ReconcileInput", "ReconcileResult", "ReconcileSettings", "ReconcileState", "ReplicaInfo", "RevisionSplit",
    "ServingFloor", "Timeouts", "Transport", "executor", "plan", "ratelimit", "reach", "reconcile", "resolve", "revisions",
    "tracking", "types",
    "unplaced_deployments",
]
