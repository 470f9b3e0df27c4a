"""``CapacityService.Connect``: the authenticated stream between each cluster's agent and the leader.

Protocol, as the scheduler enforces it:
- only the leader accepts streams; a standby answers UNAVAILABLE with the leader's address in the
  ``meridian-leader`` trailing metadata, so the agent reconnects there;
- the first message must be a Hello within ``hello_timeout_s``; its token must be that cluster's
  (an unknown cluster, a wrong token or another cluster's token is refused with UNAUTHENTICATED,
  logged and counted); the cluster is then fixed for the stream: a second Hello is refused with
  PERMISSION_DENIED (different cluster) or INVALID_ARGUMENT (same cluster);
- an agent whose ``agent_version`` is outside the skew rule (``meridian.compat``: same major, at most
  one minor apart) is refused with FAILED_PRECONDITION, after its token was accepted;
- the scheduler answers Welcome (its id, the fencing token of its term, the heartbeat interval),
  then writes Directives as the reconciler sends them, while every agent message counts as a sign
  of life for liveness;
- a message over a limit (``meridian.limits``: bytes per message, pools, replicas or completed ids
  per message) ends the stream with INVALID_ARGUMENT (RESOURCE_EXHAUSTED from gRPC itself for bytes)
  naming the limit, counted in ``limit_refusals_total{surface="agent"}``."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import grpc

from meridian import compat, limits
from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import capacity_pb2, capacity_pb2_grpc
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler.server import agents, auth

log = logging.getLogger("meridian.scheduler.capacity")
LEADER_METADATA = "meridian-leader"


class Leadership(Protocol):
    @property
    def token(self) -> int:
        """The fencing token of this node's term, 0 when it does not lead."""
        ...

    def leader_hint(self) -> str:
        """gRPC address of the current leader, "" when unknown."""
        ...


class _Refuse(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class CapacityServicer(capacity_pb2_grpc.CapacityServiceServicer):
    def __init__(self, *, scheduler_id: str, leadership: Leadership, tokens: auth.TokenBook, hub: agents.AgentHub,
                 sink: agents.AgentSink, metrics: metrics_mod.SchedulerMetrics, clock: clock_mod.Clock,
                 heartbeat_interval_s: float, hello_timeout_s: float = 10.0):
        self._id = scheduler_id
        self._leadership = leadership
        self._tokens = tokens
        self._hub = hub
        self._sink = sink
        self._metrics = metrics
        self._clock = clock
        self._heartbeat_s = heartbeat_interval_s
        self._hello_timeout_s = hello_timeout_s

    async def Connect(self, request_iterator, context: grpc.aio.ServicerContext):  # noqa: N802 (gRPC name)
        peer = context.peer()
        fence = self._leadership.token
        if not fence:
            hint = self._leadership.leader_hint()
            if hint:
                context.set_trailing_metadata(((LEADER_METADATA, hint),))
            await context.abort(grpc.StatusCode.UNAVAILABLE,
                                f"scheduler {self._id} is a standby; the leader is at {hint or 'an unknown address'}")
        try:
            first = await asyncio.wait_for(context.read(), timeout=self._hello_timeout_s)
        except TimeoutError:
            self._refused("no_hello", "", peer, "no Hello in time")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"no Hello within {self._hello_timeout_s:g}s")
        if first is grpc.aio.EOF:
            return
        if first.WhichOneof("payload") != "hello":
            self._refused("no_hello", "", peer, f"first message was {first.WhichOneof('payload')}")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "the first message on the stream must be a Hello")
        try:
            identity, token, completed = wire.hello_from_pb(first.hello)
        except wire.WireError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Hello: {exc}")
        over = _over_limit("hello", len(completed), limits.MAX_COMPLETED_IDS_PER_HELLO, "completed directive ids")
        if over is not None:
            self._over_limit(identity.cluster_id, peer, "completed_ids", over)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, over)
        cluster_id = identity.cluster_id
        verdict = self._tokens.verify_cluster(cluster_id, token)
        if not verdict.ok:
            self._refused(verdict.reason, cluster_id, peer, verdict.detail)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                f"credentials for cluster {cluster_id!r} refused ({verdict.reason})")
        skew = compat.refusal(identity.agent_version, peer="agent")
        if skew is not None:
            self._metrics.version_refusals.labels("agent").inc()
            log.warning("event=agent_refused reason=version_skew cluster=%s peer=%s agent_version=%s detail=%r",
                        cluster_id, peer, identity.agent_version or "-", skew)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, skew)
        session = self._hub.attach(cluster_id, peer)
        if self._leadership.token != fence:  # deposed while this agent said Hello
            self._hub.detach(session)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"scheduler {self._id} is no longer the leader")
        log.info("event=agent_connected cluster=%s peer=%s cloud=%s region=%s agent_version=%s completed=%d",
                 cluster_id, peer, identity.cloud.value, identity.region, identity.agent_version, len(completed))
        refusal: _Refuse | None = None
        reader = None
        try:
            await self._sink.on_hello(identity, completed, self._clock.now())
            await context.write(capacity_pb2.SchedulerMessage(welcome=capacity_pb2.Welcome(
                scheduler_id=self._id, fencing_token=fence, heartbeat_interval_s=int(self._heartbeat_s))))
            reader = asyncio.create_task(self._read(context, identity))
            refusal = await self._write(context, session, reader)
        finally:
            if reader is not None and not reader.done():
                reader.cancel()
            if self._hub.detach(session):
                await self._sink.on_disconnect(cluster_id, self._clock.now())
            log.info("event=agent_disconnected cluster=%s peer=%s reason=%r", cluster_id, peer,
                     session.close_reason or (refusal.message if refusal else "stream ended"))
        if refusal is not None:
            await context.abort(refusal.code, refusal.message)

    async def _write(self, context, session: agents.AgentSession, reader: asyncio.Task) -> _Refuse | None:
        while True:
            getter = asyncio.ensure_future(session.next_directive())
            done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                exc = reader.exception()
                if isinstance(exc, _Refuse):
                    return exc
                if exc is not None:
                    raise exc
                return None
            directive = getter.result()
            if directive is None:
                return _Refuse(grpc.StatusCode.UNAVAILABLE, session.close_reason)
            await context.write(capacity_pb2.SchedulerMessage(directive=wire.directive_to_pb(directive)))

    async def _read(self, context, identity: fm.ClusterIdentity) -> None:
        cluster_id = identity.cluster_id
        last_seq = 0
        while True:
            msg = await context.read()
            if msg is grpc.aio.EOF:
                return
            now = self._clock.now()
            kind = msg.WhichOneof("payload")
            if msg.sequence and msg.sequence <= last_seq:
                log.warning("event=agent_sequence_replay cluster=%s seq=%d last=%d", cluster_id, msg.sequence, last_seq)
                continue
            if msg.sequence > last_seq + 1 and last_seq:
                log.warning("event=agent_sequence_gap cluster=%s seq=%d last=%d", cluster_id, msg.sequence, last_seq)
            last_seq = msg.sequence or last_seq
            if kind == "hello":
                other = msg.hello.cluster_id
                if other != cluster_id:
                    self._refused("cluster_switch", cluster_id, context.peer(), f"second Hello names {other!r}")
                    raise _Refuse(grpc.StatusCode.PERMISSION_DENIED,
                                  f"this stream belongs to cluster {cluster_id!r}; it cannot report for {other!r}")
                raise _Refuse(grpc.StatusCode.INVALID_ARGUMENT, "Hello may only be the first message of a stream")
            over = _message_over_limit(msg, kind)
            if over is not None:
                self._over_limit(cluster_id, context.peer(), kind or "unknown", over)
                raise _Refuse(grpc.StatusCode.INVALID_ARGUMENT, over)
            try:
                await self._dispatch(cluster_id, msg, kind, now)
            except wire.WireError as exc:
                self._metrics.errors.labels("agent_message").inc()
                log.warning("event=agent_bad_message cluster=%s kind=%s error=%r", cluster_id, kind, str(exc))

    async def _dispatch(self, cluster_id: str, msg: capacity_pb2.AgentMessage, kind: str | None, now: float) -> None:
        if kind == "inventory":
            pools = [wire.pool_from_pb(p) for p in msg.inventory.pools]
            await self._sink.on_inventory(cluster_id, pools, msg.inventory.complete, now)
        elif kind == "replicas":
            reports = [wire.report_from_pb(r) for r in msg.replicas.replicas]
            await self._sink.on_replicas(cluster_id, reports, msg.replicas.complete, now)
        elif kind == "ack":
            await self._sink.on_ack(cluster_id, wire.ack_from_pb(msg.ack), now)
        elif kind == "event":
            await self._sink.on_event(cluster_id, wire.event_from_pb(msg.event), now)
        else:  # heartbeat, or a payload this version does not know: still a sign of life
            await self._sink.on_heartbeat(cluster_id, now)

    def _over_limit(self, cluster_id: str, peer: str, limit: str, detail: str) -> None:
        self._metrics.limit_refusals.labels("agent", limit).inc()
        log.warning("event=agent_message_refused limit=%s cluster=%s peer=%s detail=%r", limit, cluster_id or "-",
                    peer, detail)

    def _refused(self, reason: str, cluster_id: str, peer: str, detail: str) -> None:
        self._metrics.auth_failures.labels("agent", reason).inc()
        log.warning("event=agent_refused reason=%s cluster=%s peer=%s detail=%r", reason, cluster_id or "-", peer,
                    detail)


def _over_limit(what: str, count: int, limit: int, items: str) -> str | None:
    if count <= limit:
        return None
    return f"{what}: {count} {items} in one message; the scheduler accepts at most {limit}"


def _message_over_limit(msg: capacity_pb2.AgentMessage, kind: str | None) -> str | None:
    """Why ``msg`` carries too many items (``meridian.limits``), or None."""
    if kind == "inventory":
        return _over_limit("Inventory", len(msg.inventory.pools), limits.MAX_POOLS_PER_INVENTORY, "pools")
    if kind == "replicas":
        return _over_limit("ReplicaReports", len(msg.replicas.replicas), limits.MAX_REPLICAS_PER_REPORT, "replicas")
    return None
