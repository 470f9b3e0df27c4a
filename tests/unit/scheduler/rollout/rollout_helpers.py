"""Builders for rollout tests: a deployment at a given model revision with a rollout section, replica
reports of a revision, and router traffic windows."""

from __future__ import annotations

from meridian import spec
from meridian.fleet import models as fm
from scheduler import rollout
from scheduler.reconciler import types as t
from scheduler.state import records

T0 = 1_800_000_000.0

DEPLOYMENT = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat, revision: %(rev)s}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 2, max_replicas: 10}
  rollout: %(rollout)s
"""
CANARY = ("{strategy: canary, steps_percent: [10, 50, 100], step_duration_s: 60, "
          "rollback: {error_rate: 0.05, ttft_p99_ms: 800}}")
BLUE_GREEN = "{strategy: blue_green, step_duration_s: 60}"


def deployment_text(rev: str = "v1", rollout_section: str = CANARY) -> str:
    return DEPLOYMENT % {"rev": rev, "rollout": rollout_section}


def info(rev: str = "v1", rollout_section: str = CANARY) -> t.DeploymentInfo:
    doc = spec.load_text(deployment_text(rev, rollout_section), "chat.yaml").of_kind("ModelDeployment")[0]
    return t.DeploymentInfo.of(doc)


def replica(rid: str, dep: t.DeploymentInfo, state: fm.ReplicaState = fm.ReplicaState.READY,
            ttft_p99_ms: float = 0.0) -> fm.ReplicaReport:
    return fm.ReplicaReport(rid, dep.name, dep.revision, f"http://{rid}", state,
                            load=fm.ReplicaLoad(ttft=fm.LatencyPercentiles(p99_ms=ttft_p99_ms)), pool_id="l4",
                            gpu_count=1, served_model_name="chat")


def fleet(old: t.DeploymentInfo, n_old: int, new: t.DeploymentInfo | None = None, n_new: int = 0,
          new_state: fm.ReplicaState = fm.ReplicaState.READY, ttft_p99_ms: float = 0.0) -> tuple[fm.ReplicaReport, ...]:
    reps = [replica(f"old-{i}", old) for i in range(n_old)]
    if new is not None:
        reps += [replica(f"new-{i}", new, new_state, ttft_p99_ms) for i in range(n_new)]
    return tuple(reps)


def window(dep: t.DeploymentInfo, at_s: float, requests: int, errors: int = 0, router: str = "r1",
           region: str = "na-east") -> records.RevisionTraffic:
    key = f'["chat", "{region}", "{router}", "{dep.revision}"]'
    return records.RevisionTraffic("chat", dep.revision, key, at_s, requests, errors, 0.0)


def stable(dep: t.DeploymentInfo, at_s: float = T0 - 3600) -> rollout.RolloutState:
    """The record of ``dep`` fully rolled out."""
    state = rollout.advance(None, dep, rollout.Observation(at_s, 0))
    assert state.phase is rollout.Phase.COMPLETE
    return state
