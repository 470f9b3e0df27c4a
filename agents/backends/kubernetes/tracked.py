"""One replica as the kubernetes backend tracks it: its placement, its pod (the latest object the
watch delivered), what that pod means (``podstate``), its load, its endpoint and what the agent
itself asked of it (deleting, draining). Reports are built here."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Mapping

from runtime_adapter import scraper as scraper_mod

from meridian.fleet import models
from meridian.spec import replicas as replicas_spec

from agents import allocation
from agents.backends import base
from agents.backends.kubernetes import podstate

R = models.ReplicaState
TERMINAL = (R.STOPPED, R.FAILED)


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
    drain_result: dict | None = None  # the pod adapter's own account of its drain (its /drain answer)
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
            served_model_name=self.served_model_name, started_at=self.created_at, node_id=p.node_id)


def created_at(pod: Mapping, default: float | None = None) -> float:
    parsed = podstate.parse_time(((pod or {}).get("metadata") or {}).get("creationTimestamp"))
    return parsed if parsed is not None else (default if default is not None else time.time())


def endpoint(pod_ip: str, service: Mapping | None, *, mode: str, port: int, node_address: str = "",
             scheme: str = "http") -> str:
    """Where routers reach the replica: the pod IP, or the Service's address by its type ("" until
    known); ``scheme`` https when the pod serves TLS (``port`` is then its TLS port)."""
    if mode == "pod_ip":
        return f"{scheme}://{pod_ip}:{port}" if pod_ip else ""
    svc = service
    if not svc:
        return ""
    spec = svc.get("spec") or {}
    stype = spec.get("type", "ClusterIP")
    if stype == "LoadBalancer":
        ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        host = (ingress[0].get("ip") or ingress[0].get("hostname")) if ingress else ""
        return f"{scheme}://{host}:{port}" if host else ""
    if stype == "NodePort":
        node_port = next((p.get("nodePort") for p in spec.get("ports") or [] if p.get("nodePort")), None)
        return f"{scheme}://{node_address}:{node_port}" if node_port and node_address else ""
    cluster_ip = spec.get("clusterIP")
    return f"{scheme}://{cluster_ip}:{port}" if cluster_ip and cluster_ip != "None" else ""




class PodTracker:
    """The replicas the backend tracks, by replica id and by pod name, and what their pods mean.
    ``endpoint(replica, view)``: where routers would reach it ("" unknown: a READY pod without an
    address is reported STARTING); ``delete_failed(replica)``: remove a pod that failed for good;
    ``event(replica, reason, message, warning)``: post a Kubernetes Event."""

    def __init__(self, settings: replicas_spec.KubernetesReplicas, *, clock: Callable[[], float],
                 endpoint: Callable[[PodReplica, podstate.PodView], str],
                 delete_failed: Callable[[PodReplica], None],
                 event: Callable[[PodReplica, str, str, bool], None], linger_s: float):
        self._k = settings
        self._clock = clock
        self._endpoint = endpoint
        self._delete_failed = delete_failed
        self._event = event
        self._linger_s = linger_s
        self.replicas: dict[str, PodReplica] = {}
        self.by_pod: dict[str, str] = {}
        self.forgotten: set[str] = set()  # pods of forgotten replicas, being deleted: never re-adopted

    def register(self, r: PodReplica) -> None:
        self.replicas[r.placement.replica_id] = r
        self.by_pod[r.name] = r.placement.replica_id

    def unregister(self, r: PodReplica) -> None:
        self.replicas.pop(r.placement.replica_id, None)
        if self.by_pod.get(r.name) == r.placement.replica_id:
            del self.by_pod[r.name]

    def of_pod(self, name: str) -> PodReplica | None:
        rid = self.by_pod.get(name)
        return self.replicas.get(rid) if rid is not None else None

    def assign_slots(self) -> None:
        """GPU slots per node for replicas that have none (adopted ones): the allocator counts them;
        the device plugin chose the devices."""
        used: dict[str, set[int]] = {}
        for r in self.replicas.values():
            used.setdefault(r.placement.node_id, set()).update(r.slots)
        for r in sorted(self.replicas.values(), key=lambda x: x.placement.replica_id):
            if r.slots:
                continue
            taken = used.setdefault(r.placement.node_id, set())
            free = [i for i in range(r.placement.gpu_count + len(taken)) if i not in taken]
            r.slots = tuple(free[:r.placement.gpu_count])
            taken.update(r.slots)

    def refresh(self, r: PodReplica) -> None:
        """Re-read what the replica's pod means now (time alone can end a start)."""
        if r.final is not None:
            r.view = r.final
            return
        now = self._clock()
        view = podstate.interpret(r.pod, now=now, created_at=r.created_at, was_ready=r.was_ready,
                                  start_timeout_s=self._k.pod_start_timeout_s, max_restarts=self._k.max_restarts,
                                  deleted=r.deleted, deleted_by_us=r.deleting)
        if view.state == R.READY and not self._endpoint(r, view):
            view = dataclasses.replace(view, state=R.STARTING, message="engine ready; waiting for the Service's address")
        if view.state == R.READY and not r.was_ready:
            r.was_ready, r.ready_at = True, now
        if view.state != R.READY:
            r.load = models.ReplicaLoad()
        r.view = view
        if view.state in TERMINAL:
            r.final = view
        if view.delete and not r.deleted and not r.deleting:
            r.deleting = True  # failed for good: remove the pod (the FAILED reason stays, frozen above)
            self._delete_failed(r)

    def on_pod(self, type_: str, obj: dict) -> bool:
        """Apply a pod event; False when the pod is not tracked (nor a forgotten one's)."""
        name = (obj.get("metadata") or {}).get("name", "")
        r = self.of_pod(name)
        if r is None:
            if type_ == "DELETED":
                self.forgotten.discard(name)
            return name in self.forgotten
        r.pod = obj
        if type_ == "DELETED":
            r.deleted = True
            r.gone.set()
        self.refresh(r)
        r.notify()
        return True

    def on_service(self, type_: str, obj: dict) -> None:
        r = self.of_pod((obj.get("metadata") or {}).get("name", ""))
        if r is not None:
            r.service = None if type_ == "DELETED" else obj
            self.refresh(r)
            r.notify()

    def poll(self) -> list[base.Change]:
        changes = []
        now = self._clock()
        for rid, r in list(self.replicas.items()):
            self.refresh(r)
            st = r.state
            restarted = r.view.restarts > r.last_restarts
            if st != r.last_state or restarted:
                crashed = (st == R.FAILED and not r.note) or restarted or (r.last_state == R.READY and st == R.STARTING)
                changes.append(base.Change(rid, r.last_state, st, crashed, r.view.message))
                if st == R.FAILED:
                    self._event(r, "Failed", r.view.message, True)
                r.last_state, r.last_restarts = st, r.view.restarts
                r.notify()
            if st in TERMINAL:
                if r.ended_at is None:
                    r.ended_at = now
                if now - r.ended_at >= self._linger_s:
                    self.unregister(r)
        return changes


__all__ = ["PodReplica", "PodTracker", "TERMINAL", "created_at", "endpoint", "served_model_name"]
