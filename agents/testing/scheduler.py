"""A small, real CapacityService server for tests and demos of the agent alone: a grpc.aio server
on loopback that checks each agent's token, welcomes it, records everything it sends, and lets the
caller push directives. It plans nothing (the real scheduler is its own component)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from meridian.fleet import models, wire
from meridian.v1 import capacity_pb2 as cap
from meridian.v1 import capacity_pb2_grpc as cap_grpc

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ClusterRecord:
    """Everything one cluster's agent sent, across its connections, oldest first."""

    hellos: list[tuple[models.ClusterIdentity, tuple[str, ...]]] = dataclasses.field(default_factory=list)
    inventories: list[tuple[models.GpuPool, ...]] = dataclasses.field(default_factory=list)
    reports: list[tuple[models.ReplicaReport, ...]] = dataclasses.field(default_factory=list)
    acks: list[models.DirectiveAck] = dataclasses.field(default_factory=list)
    events: list[models.Event] = dataclasses.field(default_factory=list)
    heartbeats: int = 0
    sequences: list[int] = dataclasses.field(default_factory=list)

    @property
    def inventory(self) -> tuple[models.GpuPool, ...]:
        return self.inventories[-1] if self.inventories else ()

    @property
    def replicas(self) -> tuple[models.ReplicaReport, ...]:
        return self.reports[-1] if self.reports else ()

    def replica(self, replica_id: str) -> models.ReplicaReport | None:
        return next((r for r in self.replicas if r.replica_id == replica_id), None)

    def acks_for(self, directive_id: str) -> list[models.DirectiveAck]:
        return [a for a in self.acks if a.directive_id == directive_id]


class _Servicer(cap_grpc.CapacityServiceServicer):
    def __init__(self, owner: TestScheduler):
        self._owner = owner

    async def Connect(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:  # noqa: N802 (gRPC name)
        await self._owner._serve(context)


class TestScheduler:
    """``tokens`` maps cluster id -> the token its agent must present. ``tls`` is (key PEM, cert
    PEM) to serve TLS. Start with ``await start()`` (returns ``host:port``), stop with ``stop()``;
    a stopped scheduler can be started again on the same port (a scheduler restart)."""

    __test__ = False  # not a pytest test class

    def __init__(self, tokens: Mapping[str, str], *, host: str = "127.0.0.1", port: int = 0,
                 scheduler_id: str = "test-scheduler", fencing_token: int = 1, heartbeat_interval_s: int = 2,
                 tls: tuple[bytes, bytes] | None = None):
        self.tokens = dict(tokens)
        self.host = host
        self.port = port
        self.scheduler_id = scheduler_id
        self.fencing_token = fencing_token
        self.heartbeat_interval_s = heartbeat_interval_s
        self._tls = tls
        self._server: grpc.aio.Server | None = None
        self._sessions: dict[str, asyncio.Queue[cap.SchedulerMessage]] = {}
        self.records: dict[str, ClusterRecord] = {}
        self.connects: dict[str, int] = {}
        self.rejected = 0
        # Set to an address to act as a standby: streams are refused UNAVAILABLE, naming the leader
        # in the ``meridian-leader`` trailing metadata (as the real scheduler's standbys do).
        self.standby_for: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> str:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        cap_grpc.add_CapacityServiceServicer_to_server(_Servicer(self), server)
        if self._tls is None:
            bound = server.add_insecure_port(f"{self.host}:{self.port}")
        else:
            creds = grpc.ssl_server_credentials([(self._tls[0], self._tls[1])])
            bound = server.add_secure_port(f"{self.host}:{self.port}", creds)
        if bound == 0:
            raise OSError(f"cannot bind the test scheduler on {self.host}:{self.port}")
        self.port = bound
        await server.start()
        self._server = server
        return self.address

    async def stop(self, grace_s: float | None = None) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
        self._sessions.clear()

    def record(self, cluster_id: str) -> ClusterRecord:
        return self.records.setdefault(cluster_id, ClusterRecord())

    def connected(self, cluster_id: str) -> bool:
        return cluster_id in self._sessions

    async def send(self, cluster_id: str, directive: models.Directive) -> None:
        """Push a directive to the cluster's connected agent."""
        queue = self._sessions.get(cluster_id)
        if queue is None:
            raise LookupError(f"no agent of cluster {cluster_id!r} is connected")
        await queue.put(cap.SchedulerMessage(directive=wire.directive_to_pb(directive)))

    async def wait_for(self, predicate: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.05,
                       what: str = "condition") -> Any:
        """Poll ``predicate`` until it returns something truthy; return it. Raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
            await asyncio.sleep(interval_s)

    async def _serve(self, context: grpc.aio.ServicerContext) -> None:
        if self.standby_for is not None:
            self.rejected += 1
            context.set_trailing_metadata((("meridian-leader", self.standby_for),))
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"standby; the leader is at {self.standby_for}")
        first = await context.read()
        if first is grpc.aio.EOF or first.WhichOneof("payload") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be a Hello")
        ident, token, completed = wire.hello_from_pb(first.hello)
        expected = self.tokens.get(ident.cluster_id)
        if expected is None or token != expected:
            self.rejected += 1
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"bad token for cluster {ident.cluster_id!r}")
        rec = self.record(ident.cluster_id)
        rec.hellos.append((ident, completed))
        rec.sequences.append(first.sequence)
        self.connects[ident.cluster_id] = self.connects.get(ident.cluster_id, 0) + 1
        await context.write(cap.SchedulerMessage(welcome=cap.Welcome(
            scheduler_id=self.scheduler_id, fencing_token=self.fencing_token,
            heartbeat_interval_s=self.heartbeat_interval_s)))
        queue: asyncio.Queue[cap.SchedulerMessage] = asyncio.Queue()
        self._sessions[ident.cluster_id] = queue

        async def pump() -> None:
            while True:
                await context.write(await queue.get())

        writer = asyncio.create_task(pump())
        try:
            while True:
                msg = await context.read()
                if msg is grpc.aio.EOF:
                    break
                self._record(rec, msg)
        finally:
            writer.cancel()
            if self._sessions.get(ident.cluster_id) is queue:
                del self._sessions[ident.cluster_id]

    @staticmethod
    def _record(rec: ClusterRecord, msg: cap.AgentMessage) -> None:
        rec.sequences.append(msg.sequence)
        kind = msg.WhichOneof("payload")
        if kind == "inventory":
            rec.inventories.append(tuple(wire.pool_from_pb(p) for p in msg.inventory.pools))
        elif kind == "replicas":
            rec.reports.append(tuple(wire.report_from_pb(r) for r in msg.replicas.replicas))
        elif kind == "ack":
            rec.acks.append(wire.ack_from_pb(msg.ack))
        elif kind == "event":
            rec.events.append(wire.event_from_pb(msg.event))
        elif kind == "heartbeat":
            rec.heartbeats += 1
