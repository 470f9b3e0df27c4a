"""The agent's side of ``meridian.v1.CapacityService.Connect``: one long-lived bidirectional
stream, re-established with jittered exponential backoff whenever it breaks.

Per connection: Hello (cluster identity, the per-cluster token, recently completed directive ids)
-> Welcome (scheduler id, fencing token, heartbeat interval) -> complete inventory and replica
reports -> then, concurrently, directives in and acks/events/reports/heartbeats out. Protobuf stays
in this module: everything crossing it is converted by ``meridian.fleet.wire``."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

import grpc

from meridian import backoff as backoff_mod
from meridian import limits
from meridian import grpc_tls
from meridian.fleet import models, wire
from meridian.spec import cluster as cluster_spec
from meridian.v1 import capacity_pb2 as cap
from meridian.v1 import capacity_pb2_grpc as cap_grpc

from agents import metrics as metrics_mod
from agents import outbox as outbox_mod
from agents import state

log = logging.getLogger(__name__)

HELLO_COMPLETED_LIMIT = 256
# Trailing metadata with which a standby scheduler names the leader's address.
LEADER_METADATA = "meridian-leader"


class StreamRejected(Exception):
    """The scheduler closed the stream before welcoming the agent (bad token, unknown cluster)."""


class _Redirect(Exception):
    """A standby scheduler named the leader: connect there next."""

    def __init__(self, address: str, detail: str):
        super().__init__(detail)
        self.address = address


def leader_hint(metadata) -> str:
    """The leader's address a standby scheduler put in the trailing metadata, or ""."""
    for key, value in metadata or ():
        if key == LEADER_METADATA and value:
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""


def make_channel(address: str, credentials: grpc.ChannelCredentials | None,
                 options: tuple[tuple[str, object], ...] = (), server_name: str = "") -> grpc.aio.Channel:
    """An aio channel to the scheduler: TLS (server-verified, optionally mutual) with ``credentials``,
    the certificate checked against ``server_name`` when given (else the address's host),
    plaintext without. Messages are bounded both ways by ``meridian.limits`` (the scheduler enforces
    the same bound on what it receives, so an over-large report fails here, with gRPC's
    RESOURCE_EXHAUSTED)."""
    options = (*limits.grpc_options(limits.GRPC_MAX_MESSAGE_BYTES, limits.GRPC_MAX_MESSAGE_BYTES), *options)
    if credentials is not None and server_name:
        options = (*options, ("grpc.ssl_target_name_override", server_name))
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, credentials, options=options)


def _files(tls: cluster_spec.Tls) -> dict:
    pair = bool(tls.cert_file and tls.key_file)
    return dict(ca_file=tls.ca_file, cert_file=tls.cert_file or "" if pair else "",
                key_file=tls.key_file or "" if pair else "", ca_setting="spec.scheduler.tls.ca_file",
                cert_setting="spec.scheduler.tls.cert_file", key_setting="spec.scheduler.tls.key_file")


def channel_credentials(tls: cluster_spec.Tls) -> grpc.ChannelCredentials:
    """The TLS credentials of the Cluster spec's ``scheduler.tls``, its files read and checked
    (meridian.tls.TlsFileError names the field and the path of a missing or bad one)."""
    return grpc_tls.channel_credentials(**_files(tls))


def reloading_credentials(tls: cluster_spec.Tls, on_error: Callable[[str], None] | None = None
                          ) -> grpc_tls.ChannelCredentials:
    """``channel_credentials`` that are rebuilt when the files change (checked before each connect)."""
    return grpc_tls.ChannelCredentials(**_files(tls), on_error=on_error)


class StreamClient:
    """Keeps a stream to the scheduler open and moves messages across it.

    ``on_directive`` is awaited for each directive in arrival order; it must not block for long
    (it validates, acts or starts background work, and acknowledges through the outbox)."""

    def __init__(self, *, address: str, tls: cluster_spec.Tls | None, token: str, identity: models.ClusterIdentity,
                 journal: state.DirectiveJournal, outbox: outbox_mod.Outbox,
                 on_directive: Callable[[models.Directive], Awaitable[None]], metrics: metrics_mod.AgentMetrics,
                 backoff: backoff_mod.Backoff, heartbeat_interval_s: float = 5.0, welcome_timeout_s: float = 15.0,
                 clock: Callable[[], float] = time.time, channel_options: tuple[tuple[str, object], ...] = ()):
        if not token:
            raise ValueError("token must not be empty: the scheduler refuses an agent without its cluster token")
        self._address = address
        # Read and checked now (TlsFileError at start); looked at again before each connect, so a
        # rotated CA or client certificate is used from the next reconnect on.
        self._credentials = (reloading_credentials(tls, on_error=lambda _where: metrics.tls_reloads.labels(
            metrics.cluster, "failed").inc()) if tls is not None else None)
        self._server_name = (tls.server_name or "") if tls is not None else ""
        self._token = token
        self._identity = identity
        self._journal = journal
        self._outbox = outbox
        self._on_directive = on_directive
        self._metrics = metrics
        self._backoff = backoff
        self._heartbeat_interval_s = heartbeat_interval_s
        self._welcome_timeout_s = welcome_timeout_s
        self._clock = clock
        self._channel_options = channel_options
        self.connected = False
        self.scheduler_id = ""
        self.sessions = 0
        self.last_error = ""
        self._redirect = ""  # a standby's hint: where the leader is, tried once before the configured address

    async def run(self) -> None:
        """Connect, serve, reconnect: until cancelled."""
        attempt = 0
        redirected = False
        while True:
            if attempt > 0:
                self._metrics.reconnects.labels(self._metrics.cluster).inc()
            attempt += 1
            hint = ""
            try:
                await self._session()
                self.last_error = "stream ended by the scheduler"
            except asyncio.CancelledError:
                raise
            except _Redirect as exc:
                self.last_error, hint = str(exc), exc.address
            except StreamRejected as exc:
                self.last_error = str(exc)
                log.error("event=stream_rejected cluster=%s error=%s", self._identity.cluster_id, exc)
            except grpc.aio.AioRpcError as exc:
                self.last_error = f"{exc.code().name}: {exc.details()}"
                log.warning("event=stream_broken cluster=%s code=%s details=%s", self._identity.cluster_id,
                            exc.code().name, exc.details())
                hint = leader_hint(exc.trailing_metadata()) if exc.code() == grpc.StatusCode.UNAVAILABLE else ""
            except (OSError, TimeoutError, wire.WireError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("event=stream_failed cluster=%s error=%s", self._identity.cluster_id, self.last_error)
            if hint and not redirected:
                # A standby named the leader: go there at once (once; a second hop waits as usual).
                log.info("event=leader_redirect cluster=%s leader=%s", self._identity.cluster_id,
                         hint)
                self._redirect, redirected = hint, True
                continue
            redirected = False
            delay_s = self._backoff.next_delay_s()
            log.info("event=reconnecting cluster=%s in_s=%.2f attempt=%d", self._identity.cluster_id, delay_s, attempt)
            await asyncio.sleep(delay_s)

    def _message(self, seq: itertools.count, **payload) -> cap.AgentMessage:
        return cap.AgentMessage(sequence=next(seq), sent_at=wire.ts(self._clock()), **payload)

    async def _session(self) -> None:
        address, self._redirect = self._redirect or self._address, ""
        credentials = None
        if self._credentials is not None:
            if self._credentials.reload_if_changed():  # os.stat of three files; reads them only on a change
                self._metrics.tls_reloads.labels(self._metrics.cluster, "reloaded").inc()
            credentials = self._credentials.current
        channel = make_channel(address, credentials, self._channel_options, self._server_name)
        try:
            stub = cap_grpc.CapacityServiceStub(channel)
            call = stub.Connect(metadata=(("authorization", f"Bearer {self._token}"),))
            seq = itertools.count(1)
            hello = wire.hello_to_pb(self._identity, self._token, self._journal.recent(HELLO_COMPLETED_LIMIT))
            await call.write(self._message(seq, hello=hello))
            first = await asyncio.wait_for(call.read(), timeout=self._welcome_timeout_s)
            if first is grpc.aio.EOF:
                status = await call.code()
                details = await call.details()
                hint = leader_hint(await call.trailing_metadata())
                if status == grpc.StatusCode.UNAVAILABLE and hint:
                    raise _Redirect(hint, f"{status.name}: {details}")
                raise StreamRejected(f"scheduler closed the stream before Welcome: {status.name}: {details}")
            if first.WhichOneof("payload") != "welcome":
                raise StreamRejected(f"expected Welcome first, got {first.WhichOneof('payload')}")
            self._welcomed(first.welcome)
            reader = asyncio.create_task(self._read(call), name="agent-stream-read")
            writer = asyncio.create_task(self._write(call, seq), name="agent-stream-write")
            try:
                done, _pending = await asyncio.wait({reader, writer}, return_when=asyncio.FIRST_COMPLETED)
                for task in (reader, writer):  # the one that ended first says why
                    if task in done and not task.cancelled() and task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
            finally:
                self.connected = False
                self._metrics.connected.labels(self._metrics.cluster).set(0)
                # Both halves end with the session, also when this task is cancelled (shutdown): a
                # half left running would fail on the finished call with nobody to read its error.
                for task in (reader, writer):
                    task.cancel()
                await asyncio.gather(reader, writer, return_exceptions=True)
                call.cancel()
        finally:
            await channel.close(grace=None)

    def _welcomed(self, welcome: cap.Welcome) -> None:
        self.scheduler_id = welcome.scheduler_id
        if welcome.heartbeat_interval_s:
            self._heartbeat_interval_s = float(welcome.heartbeat_interval_s)
        if not self._journal.observe_fencing_token(welcome.fencing_token):
            log.warning("event=stale_fencing_token scheduler=%s token=%d highest=%d; "
                        "its directives will be refused", welcome.scheduler_id, welcome.fencing_token,
                        self._journal.fencing_token)
        self.connected = True
        self.sessions += 1
        self._backoff.reset()
        self._metrics.connected.labels(self._metrics.cluster).set(1)
        self._outbox.mark_all_dirty()
        log.info("event=stream_up cluster=%s scheduler=%s fencing_token=%d session=%d", self._identity.cluster_id,
                 welcome.scheduler_id, welcome.fencing_token, self.sessions)

    async def _read(self, call) -> None:
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:
                return
            if msg.WhichOneof("payload") != "directive":
                log.debug("ignoring scheduler message kind=%s", msg.WhichOneof("payload"))
                continue
            try:
                directive = wire.directive_from_pb(msg.directive)
            except wire.WireError as exc:
                self._outbox.put_ack(models.DirectiveAck(msg.directive.directive_id, models.DirectiveOutcome.REFUSED,
                                                         f"malformed directive: {exc}"))
                self._metrics.directive("malformed", models.DirectiveOutcome.REFUSED)
                continue
            await self._on_directive(directive)

    async def _write(self, call, seq: itertools.count) -> None:
        last_sent = time.monotonic()
        while True:
            due_s = max(0.0, self._heartbeat_interval_s - (time.monotonic() - last_sent))
            await self._outbox.wait(due_s)
            batch = self._outbox.take()
            messages = self._encode(batch, seq)
            if not messages and time.monotonic() - last_sent >= self._heartbeat_interval_s:
                messages = [("heartbeat", self._message(seq, heartbeat=cap.Heartbeat()))]
            try:
                for kind, msg in messages:
                    await call.write(msg)
                    self._metrics.messages.labels(self._metrics.cluster, kind).inc()
            except BaseException:
                self._outbox.requeue(batch)
                raise
            if messages:
                last_sent = time.monotonic()

    def _encode(self, batch: outbox_mod.Batch, seq: itertools.count) -> list[tuple[str, cap.AgentMessage]]:
        out = [("ack", self._message(seq, ack=wire.ack_to_pb(a))) for a in batch.acks]
        out += [("event", self._message(seq, event=wire.event_to_pb(e))) for e in batch.events]
        if batch.inventory is not None:
            inv = cap.Inventory(pools=[wire.pool_to_pb(p) for p in batch.inventory], complete=True)
            out.append(("inventory", self._message(seq, inventory=inv)))
        if batch.replicas is not None:
            reps = cap.ReplicaReports(replicas=[wire.report_to_pb(r) for r in batch.replicas], complete=True)
            out.append(("replicas", self._message(seq, replicas=reps)))
        return out
