"""The pod status a kubelet reports, computed from its containers' records (pure): the phase by the
kubelet's ``getPhase`` rule, the conditions (PodReadyToStartContainers, Initialized, ContainersReady,
Ready; PodScheduled and DisruptionTarget are kept as others set them), ``containerStatuses`` with
``state``/``lastState``/``ready``/``started``/``restartCount``, pod and host IPs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from agents.testing.kube import objects

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")


@dataclasses.dataclass
class ContainerRecord:
    """What the kubelet knows of one container: its current state and the last termination."""
    name: str
    image: str
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    container_id: str = ""
    last: dict | None = None  # lastState.terminated
    restart_count: int = 0
    ready: bool = False
    started: bool = False

    def terminated(self) -> dict:
        out = {"exitCode": self.exit_code if self.exit_code is not None else 0, "reason": self.reason,
               "startedAt": objects.timestamp(self.started_at) if self.started_at else None,
               "finishedAt": objects.timestamp(self.finished_at) if self.finished_at else None,
               "containerID": self.container_id}
        if self.signal:
            out["signal"] = self.signal
        if self.message:
            out["message"] = self.message
        return out

    def status(self) -> dict:
        if self.state == "running":
            state: dict = {"running": {"startedAt": objects.timestamp(self.started_at or 0)}}
        elif self.state == "terminated":
            state = {"terminated": self.terminated()}
        else:
            waiting = {"reason": self.reason}
            if self.message:
                waiting["message"] = self.message
            state = {"waiting": waiting}
        out = {"name": self.name, "image": self.image,
               "imageID": f"fake://{self.image}" if self.container_id else "", "state": state,
               "lastState": {"terminated": self.last} if self.last else {}, "ready": self.ready,
               "restartCount": self.restart_count, "started": self.started}
        if self.container_id:
            out["containerID"] = self.container_id
        return out


def phase(restart_policy: str, init: Sequence[ContainerRecord], main: Sequence[ContainerRecord],
          init_failed_for_good: bool) -> str:
    """The kubelet's getPhase: Pending until init containers are done and every container started at
    least once; Running while any runs or will restart; Succeeded/Failed once all stopped for good."""
    if init_failed_for_good:
        return "Failed"
    if any(r.state != "terminated" or r.exit_code != 0 for r in init):
        return "Pending"
    waiting = running = stopped = succeeded = 0
    for r in main:
        if r.state == "running":
            running += 1
        elif r.state == "terminated":
            stopped += 1
            succeeded += r.exit_code == 0
        elif r.last is not None:
            stopped += 1
        else:
            waiting += 1
    if waiting:
        return "Pending"
    if running:
        return "Running"
    if restart_policy == "Always":
        return "Running"
    if stopped == succeeded:
        return "Succeeded"
    if restart_policy == "Never":
        return "Failed"
    return "Running"


def build(pod: Mapping, *, init: Sequence[ContainerRecord], main: Sequence[ContainerRecord], pod_ip: str | None,
          host_ip: str | None, start_time: float, now: str, sandbox_ready: bool, terminal: str | None = None,
          reason: str = "", message: str = "", init_failed_for_good: bool = False) -> dict:
    """The status to write: ``terminal`` forces the phase (an eviction, a shutdown, a finished delete)."""
    spec = pod.get("spec") or {}
    old = pod.get("status") or {}
    the_phase = terminal or phase(spec.get("restartPolicy", "Always"), init, main, init_failed_for_good)
    # The kubelet owns four conditions; the rest (PodScheduled, DisruptionTarget, readiness gates a
    # controller sets) are kept as others wrote them, as the kubelet's status manager merges them.
    conditions = [c for c in old.get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS]
    previous = {c["type"]: c for c in old.get("conditions") or []}

    def put(type_: str, status: str, cond_reason: str = "", cond_message: str = "") -> None:
        nonlocal conditions
        base = [previous[type_]] if type_ in previous else []
        merged = objects.set_condition(base, type_, status, now, cond_reason, cond_message, probe_time=True)
        conditions = [c for c in conditions if c.get("type") != type_] + merged

    put("PodReadyToStartContainers", "True" if sandbox_ready else "False")
    pending_init = [r.name for r in init if r.state != "terminated" or r.exit_code != 0]
    if pending_init and the_phase != "Succeeded":
        put("Initialized", "False", "ContainersNotInitialized", f"containers with incomplete status: "
            f"[{' '.join(pending_init)}]")
    else:
        put("Initialized", "True")
    unready = [r.name for r in main if not r.ready]
    gates_ok = all((previous.get(g.get("conditionType")) or {}).get("status") == "True"
                   for g in spec.get("readinessGates") or [])
    if the_phase in ("Succeeded", "Failed"):
        put("ContainersReady", "False", "PodCompleted")
        put("Ready", "False", "PodCompleted")
    elif unready:
        text = f"containers with unready status: [{' '.join(unready)}]"
        put("ContainersReady", "False", "ContainersNotReady", text)
        put("Ready", "False", "ContainersNotReady", text)
    else:
        put("ContainersReady", "True")
        if gates_ok:
            put("Ready", "True")
        else:
            put("Ready", "False", "ReadinessGatesNotReady", "the status of pod readiness gate is not \"True\"")
    order = {t: n for n, t in enumerate(("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                         "PodScheduled", "DisruptionTarget"))}
    conditions.sort(key=lambda c: order.get(c.get("type"), 99))
    status: dict = {"phase": the_phase, "conditions": conditions, "qosClass": old.get("qosClass", "BestEffort"),
                    "startTime": objects.timestamp(start_time)}
    if host_ip:
        status["hostIP"], status["hostIPs"] = host_ip, [{"ip": host_ip}]
    if pod_ip:
        status["podIP"], status["podIPs"] = pod_ip, [{"ip": pod_ip}]
    if init:
        status["initContainerStatuses"] = [r.status() for r in init]
    status["containerStatuses"] = [r.status() for r in main]
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return status
