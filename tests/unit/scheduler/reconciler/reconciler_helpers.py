"""Builders for reconciler tests: a deployment from the examples, pools and replica reports."""

from __future__ import annotations

import pathlib

from meridian import spec
from meridian.fleet import models as fm
from scheduler.reconciler import types as t
from scheduler.solver import problem

ROOT = pathlib.Path(__file__).resolve().parents[4]


def deployment(name: str = "chat-8b") -> t.DeploymentInfo:
    loaded = spec.load_files([ROOT / "examples" / "deployments.yaml"])
    doc = next(d for d in loaded.of_kind("ModelDeployment") if d.metadata.name == name)
    return t.DeploymentInfo.of(doc)


def pool(cluster: str, pool_id: str, *, free: int = 4, nodes: int = 4, nodes_max: int = 8, gpus_per_node: int = 1,
         gpu_type: str = "L4", tier: fm.Tier = fm.Tier.ON_DEMAND, nodes_min: int = 0, pending: int = 0) -> t.PoolInfo:
    return t.PoolInfo(cluster, fm.GpuPool(
        pool_id=pool_id, gpu_type=gpu_type, gpu_memory_gib=24, gpus_per_node=gpus_per_node, instance_type="g6.xlarge",
        nodes_current=nodes, nodes_min=nodes_min, nodes_max=nodes_max, gpus_free=free, tier=tier,
        price_per_node_hour_usd=0.8, quota_headroom_gpus=64, nodes_pending=pending))


def replica(cluster: str, pool_id: str, replica_id: str, dep: t.DeploymentInfo, *,
            state: fm.ReplicaState = fm.ReplicaState.READY, revision: str | None = None, doomed_at_s: float | None = None,
            outstanding: int = 0, started_at: float = 1.0) -> t.ReplicaInfo:
    return t.ReplicaInfo(cluster, fm.ReplicaReport(
        replica_id=replica_id, deployment=dep.name, revision=revision or dep.revision, endpoint=f"http://{replica_id}",
        state=state, load=fm.ReplicaLoad(running_requests=outstanding), pool_id=pool_id, gpu_count=1,
        served_model_name="llama-3.1-8b", started_at=started_at), doomed_at_s)


def target(*triples: tuple[str, str, int]) -> problem.Placement:
    return problem.Placement.from_counts(triples)


def of_kind(result: t.ReconcileResult, kind: type) -> list[t.PlannedDirective]:
    return [p for p in result.directives if isinstance(p.directive.action, kind)]
