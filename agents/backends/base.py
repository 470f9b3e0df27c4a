"""The replica backend interface: what the agent and the directive executor need from whatever
runs the engines. ``local`` runs them as processes on the agent's host (the runtime adapter as a
library); ``kubernetes`` runs each as a pod on the node the agent's allocator chose.

A backend owns what only it can know: how a replica is reached (ports, pod IPs, Services), which
GPU devices it gets, and the records that let a restarted agent re-adopt running replicas. The
agent owns placement (which node, how many GPUs) and reporting. Where a backend sees the nodes
itself (the Kubernetes node list), ``node_views`` is the truth for which nodes can take a replica,
and ``interruptions`` turns the signs of a node being reclaimed into notices."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Protocol

import runtime_adapter

from meridian.fleet import models

from agents import allocation
from agents.providers import base as provider_base

LIVE_STATES = (models.ReplicaState.STARTING, models.ReplicaState.READY, models.ReplicaState.DRAINING)


class Refused(Exception):
    """The backend cannot run this replica as asked; raised by ``prepare`` before anything is
    reserved or created. The message is the refusal reason sent to the scheduler."""


@dataclasses.dataclass(frozen=True)
class Placement:
    """The agent's record of a replica: where it sits and what it runs."""

    replica_id: str
    deployment: str
    revision: str
    pool_id: str
    node_id: str
    gpu_count: int
    gpu_type: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping) -> Placement:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


@dataclasses.dataclass(frozen=True)
class Change:
    """A replica state transition seen by ``poll``; ``crashed`` when the engine failed by itself."""

    replica_id: str
    old: models.ReplicaState
    new: models.ReplicaState
    crashed: bool
    message: str


class Tracked(Protocol):
    """A replica as a backend tracks it (what ``get`` and ``all`` return)."""

    @property
    def placement(self) -> Placement: ...

    @property
    def state(self) -> models.ReplicaState: ...


@dataclasses.dataclass(frozen=True)
class NodeView:
    """One pool's nodes as the backend sees them. ``usable``: nodes that can take a new replica now;
    ``present``: every node of the pool the backend knows (a replica whose node is not here has lost
    it); ``gpus_by_node``: GPUs each node offers; ``unusable``: why each other present node cannot
    take a replica; ``cloud_ids``: node name -> the cloud's id of the machine (instance id, VM
    name), to match provider notices and protect nodes on a shrink; ``instance_types``: per node,
    for messages that name the node size."""

    pool_id: str
    usable: tuple[str, ...] = ()
    present: frozenset[str] = frozenset()
    gpus_by_node: Mapping[str, int] = dataclasses.field(default_factory=dict)
    unusable: Mapping[str, str] = dataclasses.field(default_factory=dict)
    cloud_ids: Mapping[str, str] = dataclasses.field(default_factory=dict)
    instance_types: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ReplicaSettings:
    """How replicas are launched (from the Cluster spec's agent settings, plus adapter tuning).
    ``advertise_host`` and ``port_range`` concern local processes; the rest every backend uses."""

    advertise_host: str = "127.0.0.1"
    port_range: tuple[int, int] = (31000, 31999)
    engine_command: tuple[str, ...] = tuple(runtime_adapter.SGLANG_COMMAND)
    cache_dir: str | None = None
    engine_env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    api_key: str | None = dataclasses.field(default=None, repr=False)  # a secret: never in a repr or log
    supervisor: runtime_adapter.SupervisorConfig = runtime_adapter.SupervisorConfig(survive_supervisor_exit=True)
    ended_linger_s: float = 120.0  # how long STOPPED/FAILED replicas stay in reports
    # local backend: HTTPS through a TLS relay in front of each engine (spec.replicas.local.tls).
    tls: runtime_adapter.TlsFiles | None = None
    # Region an emulator engine pretends to run in, so clients feel the latency map's distance
    # (set for sim clusters; "" for none).
    emulator_region: str = ""


class ReplicaBackend(abc.ABC):
    """Runs the agent's replicas. Implementations register with ``agents.backends.register`` under
    the name the Cluster spec's ``replicas.backend`` field uses. Not thread-safe: one event loop."""

    name: str = ""

    # ----- views
    @abc.abstractmethod
    def get(self, replica_id: str) -> Tracked | None:
        """The replica, or None when unknown (never started, or ended and forgotten)."""

    @abc.abstractmethod
    def all(self) -> Sequence[Tracked]:
        """Every replica tracked, ended ones included until they are dropped."""

    @abc.abstractmethod
    def holdings(self) -> list[allocation.Holding]:
        """What live replicas hold (GPUs per node), for the allocator."""

    @abc.abstractmethod
    def reports(self) -> list[models.ReplicaReport]:
        """Every tracked replica as the scheduler sees it."""

    @abc.abstractmethod
    def poll(self) -> list[Change]:
        """State transitions since the last poll; drops replicas ended long enough ago."""

    def node_views(self) -> Mapping[str, NodeView] | None:
        """Per pool, the nodes as the backend sees them; None when the backend has no view of its
        own (the provider's node list is then the truth)."""
        return None

    def nodes_listed(self) -> bool:
        """Whether ``node_views`` holds every node yet. Until it does, a replica's node missing from it
        says nothing: no replica is judged to have lost its node (a backend with no view: always)."""
        return True

    def interruptions(self) -> list[provider_base.Interruption]:
        """Notices the backend derives from what it sees of the nodes (the cloud reclaiming one)."""
        return []

    def status(self) -> dict:
        """What the agent's ``/status`` shows of the backend."""
        return {"name": self.name}

    # ----- lifecycle
    @abc.abstractmethod
    async def adopt(self) -> tuple[list[str], list[str]]:
        """Re-attach replicas a previous agent left running. Returns (adopted ids, cleaned-up ids)."""

    @abc.abstractmethod
    def prepare(self, action: models.StartReplica, *, directive_id: str, node_id: str, gpu_ids: tuple[int, ...],
                gpu_type: str) -> object:
        """Build (not start) the replica on ``node_id``; raises ``Refused`` (this backend cannot)
        or ``runtime_adapter.LaunchError`` (a runtime spec the engine cannot run), before anything
        is reserved or created. Returns what ``launch`` takes."""

    @abc.abstractmethod
    async def launch(self, prepared: object) -> str:
        """Start what ``prepare`` built; returns a short description for the acknowledgement.
        Raises OSError/RuntimeError/ValueError when it could not be started."""

    @abc.abstractmethod
    async def wait_ready(self, replica_id: str, timeout_s: float) -> None:
        """Until READY; raises ``runtime_adapter.ReplicaFailed`` when it ends first, TimeoutError."""

    @abc.abstractmethod
    async def drain(self, replica_id: str, deadline_s: float) -> runtime_adapter.DrainResult:
        """DRAINING first (routers stop sending), in-flight requests finish (up to ``deadline_s``),
        then the engine stops."""

    @abc.abstractmethod
    async def stop(self, replica_id: str, note: str = "") -> None:
        """Stop now (no waiting for requests); ``note`` says why, in reports."""

    @abc.abstractmethod
    def forget(self, replica_id: str) -> None:
        """Drop an ended replica's record (a new one of the same id is about to start)."""

    @abc.abstractmethod
    async def close(self, *, stop_replicas: bool) -> None:
        """Agent shutdown: stop every replica, or leave them serving for the next agent."""


__all__ = ["Change", "LIVE_STATES", "NodeView", "Placement", "Refused", "ReplicaBackend", "ReplicaSettings", "Tracked"]
