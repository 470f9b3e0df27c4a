"""One replica as the kubernetes backend tracks it: its placement, its pod (the latest object the
watch delivered), what that pod means (``podstate``), its load, its endpoint and what the agent
itself asked of it (deleting, draining). Reports are built here."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Mapping

from runtime_adapter import scraper as scraper_mod

from meridian.fleet import models

from agents import allocation
from agents.backends import base
from agents.backends.kubernetes import podstate

R = models.ReplicaState


def served_model_name(pod: Mapping | None) -> str:
    """The served model name from the pod's RuntimeSpec variable (the placement record lacks it)."""
    for c in ((pod or {}).get("spec") or {}).get("containers") or []:
        for e in c.get("env") or []:
            if e.get("name") == "MERIDIAN_RUNTIME_SPEC":
                try:
                    return str(json.loads(e.get("value") or "{}").get("served_model_name", ""))
                except ValueError:
                    return ""
    return ""


@dataclasses.dataclass
class PodReplica:
    placement: base.Placement
    name: str
    directive_id: str
    created_at: float
    slots: tuple[int, ...]  # GPU slots on the node, for the allocator's bookkeeping (the device plugin picks devices)
    pod: dict | None = None
    view: podstate.PodView = podstate.PodView(R.STARTING, "pod being created")
    final: podstate.PodView | None = None  # once STOPPED or FAILED, the view stays (a later deletion keeps the reason)
    served_model_name: str = ""
    was_ready: bool = False
    ready_at: float | None = None
    deleting: bool = False  # this agent asked for the pod's deletion (drain or stop)
    draining: bool = False
    deleted: bool = False  # the object is gone
    ended_at: float | None = None
    note: str = ""
    last_state: models.ReplicaState = R.STARTING
    last_restarts: int = 0
    load: models.ReplicaLoad = models.ReplicaLoad()
    scraper: scraper_mod.Scraper | None = None
    scraper_url: str = ""
    service: dict | None = None
    changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    gone: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    @property
    def state(self) -> models.ReplicaState:
        if self.draining and not self.deleted and self.view.state in base.LIVE_STATES:
            return R.DRAINING
        return self.view.state

    @property
    def holding(self) -> allocation.Holding:
        """GPUs on the node, no port: every pod has its own IP."""
        p = self.placement
        return allocation.Holding(p.replica_id, p.pool_id, p.node_id, self.slots, 0)

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def report(self, endpoint: str) -> models.ReplicaReport:
        p = self.placement
        message = self.view.message
        if self.note and self.state in (R.FAILED, R.STOPPED):
            message = self.note + (f"; {message}" if message else "")
        ttr = (self.ready_at - self.created_at) if self.ready_at is not None else 0.0
        return models.ReplicaReport(
            replica_id=p.replica_id, deployment=p.deployment, revision=p.revision, endpoint=endpoint,
            state=self.state, load=self.load, pool_id=p.pool_id, gpu_count=p.gpu_count,
            time_to_ready_s=round(max(0.0, ttr), 3), restarts=self.view.restarts, message=message,
            served_model_name=self.served_model_name, started_at=self.created_at)


def created_at(pod: Mapping, default: float | None = None) -> float:
    parsed = podstate.parse_time(((pod or {}).get("metadata") or {}).get("creationTimestamp"))
    return parsed if parsed is not None else (default if default is not None else time.time())


def endpoint(pod_ip: str, service: Mapping | None, *, mode: str, port: int, node_address: str = "") -> str:
    """Where routers reach the replica: the pod IP, or the Service's address by its type ("" until known)."""
    if mode == "pod_ip":
        return f"http://{pod_ip}:{port}" if pod_ip else ""
    svc = service
    if not svc:
        return ""
    spec = svc.get("spec") or {}
    stype = spec.get("type", "ClusterIP")
    if stype == "LoadBalancer":
        ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        host = (ingress[0].get("ip") or ingress[0].get("hostname")) if ingress else ""
        return f"http://{host}:{port}" if host else ""
    if stype == "NodePort":
        node_port = next((p.get("nodePort") for p in spec.get("ports") or [] if p.get("nodePort")), None)
        return f"http://{node_address}:{node_port}" if node_port and node_address else ""
    cluster_ip = spec.get("clusterIP")
    return f"http://{cluster_ip}:{port}" if cluster_ip and cluster_ip != "None" else ""


__all__ = ["PodReplica", "created_at", "endpoint", "served_model_name"]
