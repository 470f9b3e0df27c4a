"""Pure mapping of a replica's pod, as the API server reports it, to the replica state the agent
reports (docs/kubernetes.md, "State mapping"):

- Pending (scheduling, ContainerCreating, image pull, Unschedulable) -> STARTING with the reason;
  FAILED (and the pod deleted) when not ready ``pod_start_timeout_s`` after creation;
- Running and Ready -> READY; Running, not Ready -> STARTING (restarts counted from
  ``restartCount``); CrashLoopBackOff with ``max_restarts`` or more restarts -> FAILED, pod deleted;
  an init step (``model-cache-owner``) not done is what a starting pod reports, and its crash loop
  fails the replica the same way;
- Failed: Evicted, Terminated (graceful node shutdown), anything else -> FAILED with the reason;
- being deleted -> DRAINING (its preStop drains it); gone -> STOPPED when the agent deleted it,
  else FAILED: node lost (NodeLost) or deleted by someone else."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping

from meridian.fleet import models

R = models.ReplicaState


@dataclasses.dataclass(frozen=True)
class PodView:
    state: models.ReplicaState
    message: str = ""
    restarts: int = 0
    ready: bool = False
    pod_ip: str = ""
    host_ip: str = ""
    reason: str = ""  # a short machine reason: Evicted, Terminated, NodeLost, CrashLoop, StartTimeout, Deleted, ...
    delete: bool = False  # the backend should delete the pod (it failed for good and lingers)


def parse_time(text: str | None) -> float | None:
    """RFC 3339 (what the API server writes) -> Unix seconds."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _condition(status: Mapping, type_: str) -> Mapping | None:
    for c in status.get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def _container(status: Mapping) -> Mapping:
    statuses = status.get("containerStatuses") or []
    return statuses[0] if statuses else {}


def _init_blocking(status: Mapping) -> Mapping | None:
    """The first init step (``model-cache-owner``) that has not completed, when one is waiting or
    failing (the engine waits for it: its crash loop is the pod's)."""
    for cs in status.get("initContainerStatuses") or []:
        state = cs.get("state") or {}
        done = (state.get("terminated") or {}).get("exitCode") == 0
        if not done and (state.get("waiting") or state.get("terminated")):
            return cs
    return None


def _last_exit(cs: Mapping) -> str:
    term = ((cs.get("lastState") or {}).get("terminated")) or ((cs.get("state") or {}).get("terminated")) or {}
    if not term:
        return ""
    parts = [f"exit code {term.get('exitCode')}"]
    if term.get("reason"):
        parts.append(str(term["reason"]))
    if term.get("message"):
        parts.append(str(term["message"])[:300])
    return ", ".join(parts)


def _starting_message(status: Mapping, cs: Mapping) -> tuple[str, str]:
    scheduled = _condition(status, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        return scheduled.get("reason") or "Unschedulable", f"{scheduled.get('reason', 'unschedulable')}: " \
                                                          f"{scheduled.get('message', '')}".strip()
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if waiting:
        reason = waiting.get("reason", "Waiting")
        text = f"{reason}: {waiting.get('message')}" if waiting.get("message") else reason
        last = _last_exit(cs)
        return reason, text + (f" (last: {last})" if last and reason == "CrashLoopBackOff" else "")
    if (cs.get("state") or {}).get("running"):
        return "NotReady", "engine running, not ready yet (loading weights or warming up)"
    phase = status.get("phase") or "Pending"
    if not scheduled:
        return "Pending", "waiting to be scheduled"
    return phase, f"pod {phase}"


def interpret(pod: Mapping | None, *, now: float, created_at: float, was_ready: bool, start_timeout_s: float,
              max_restarts: int, deleted: bool = False, deleted_by_us: bool = False) -> PodView:
    """The replica state of ``pod`` (its last known object when ``deleted``)."""
    status = (pod or {}).get("status") or {}
    meta = (pod or {}).get("metadata") or {}
    cs = _container(status)
    restarts = sum(int(c.get("restartCount", 0))
                   for c in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []))
    pod_ip, host_ip = str(status.get("podIP") or ""), str(status.get("hostIP") or "")
    phase = status.get("phase") or "Pending"
    reason = status.get("reason") or ""
    if deleted:
        if deleted_by_us:
            return PodView(R.STOPPED, "stopped", restarts, reason="Deleted", pod_ip=pod_ip, host_ip=host_ip)
        if reason == "NodeLost":
            return PodView(R.FAILED, f"node lost: {status.get('message') or 'the node was removed'}", restarts,
                           reason="NodeLost", pod_ip=pod_ip, host_ip=host_ip)
        if phase == "Failed" and reason:
            return PodView(R.FAILED, f"{reason}: {status.get('message', '')}".strip(), restarts, reason=reason, pod_ip=pod_ip, host_ip=host_ip)
        return PodView(R.FAILED, "pod deleted by someone else (not by this agent)", restarts, reason="DeletedElsewhere",
                       pod_ip=pod_ip, host_ip=host_ip)
    if meta.get("deletionTimestamp") and deleted_by_us:
        if phase in ("Failed", "Succeeded"):  # the containers ended as asked; the object goes next
            return PodView(R.STOPPED, "stopped", restarts, reason="Deleted", pod_ip=pod_ip, host_ip=host_ip)
        return PodView(R.DRAINING, "draining", restarts, reason="Terminating", pod_ip=pod_ip, host_ip=host_ip)
    if meta.get("deletionTimestamp") and phase not in ("Failed", "Succeeded"):
        return PodView(R.DRAINING, "pod is being deleted by someone else; its preStop drains it", restarts,
                       reason="Terminating", pod_ip=pod_ip, host_ip=host_ip)
    if phase == "Failed":
        if reason == "Evicted":
            text = f"evicted: {status.get('message') or 'the kubelet evicted the pod'}"
        elif reason == "Terminated":
            text = f"terminated: {status.get('message') or 'node shutdown'}"
        else:
            last = _last_exit(cs)
            text = f"pod failed: {reason or 'Failed'}" + (f" ({last})" if last else "") + \
                   (f": {status['message']}" if status.get("message") else "")
        return PodView(R.FAILED, text, restarts, reason=reason or "Failed", delete=True, pod_ip=pod_ip, host_ip=host_ip)
    if phase == "Succeeded":
        return PodView(R.STOPPED, "the engine exited and the pod completed", restarts, reason="Succeeded", delete=True,
                       pod_ip=pod_ip, host_ip=host_ip)
    init = _init_blocking(status)
    if init is not None:
        # The engine has not started: the init step is what to report (and what crash-loops).
        cs = init
    waiting = (cs.get("state") or {}).get("waiting") or {}
    if init is not None and waiting.get("reason") == "CrashLoopBackOff" and restarts >= max_restarts:
        last = _last_exit(cs)
        return PodView(R.FAILED, f"crash loop: the init step {cs.get('name', '')} restarted {restarts} times"
                       + (f"; last {last}" if last else ""), restarts, reason="CrashLoop", delete=True,
                       pod_ip=pod_ip, host_ip=host_ip)
    if waiting.get("reason") == "CrashLoopBackOff" and restarts >= max_restarts:
        last = _last_exit(cs)
        return PodView(R.FAILED, f"crash loop: the engine restarted {restarts} times" + (f"; last {last}" if last else ""),
                       restarts, reason="CrashLoop", delete=True, pod_ip=pod_ip, host_ip=host_ip)
    ready_cond = _condition(status, "Ready")
    ready = phase == "Running" and bool(ready_cond and ready_cond.get("status") == "True") and bool(cs.get("ready"))
    if ready:
        return PodView(R.READY, "", restarts, ready=True, pod_ip=pod_ip, host_ip=host_ip)
    why, text = _starting_message(status, cs)
    if init is not None:
        text = f"init step {init.get('name', '')}: {text}"
    if not was_ready and now - created_at > start_timeout_s:
        return PodView(R.FAILED, f"not ready {start_timeout_s:g}s after the pod was created: {text}", restarts,
                       reason="StartTimeout", delete=True, pod_ip=pod_ip, host_ip=host_ip)
    if phase == "Unknown":
        text = "pod status Unknown (the node stopped reporting)"
    return PodView(R.STARTING, text, restarts, reason=why, pod_ip=pod_ip, host_ip=host_ip)


__all__ = ["PodView", "interpret", "parse_time"]
