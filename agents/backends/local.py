"""The ``local`` replica backend: replicas as runtime-adapter processes on the agent's own host,
on the cluster's GPUs (indices become ``CUDA_VISIBLE_DEVICES``), each on a port of the agent's range.

Engines run in the adapter's adoptable mode (``survive_supervisor_exit``): they outlive the agent,
so a crashed or upgraded agent does not take serving capacity down (static stability). What the
adapter's record lacks (deployment, revision, pool, node) the agent keeps in a placement file per
replica; a running engine without a placement, or a placement without an engine, is cleaned up at
adoption, so a restart leaves neither duplicates nor orphans.

With ``spec.replicas.local.tls`` (``settings.tls``) each replica takes two ports of the range: the
engine binds 127.0.0.1 on one, and the adapter's TLS relay process, on the other, is the replica's
endpoint (``https://<advertise_host>:<port>``). The relay's pid and port are in the adapter's
record beside the engine's, so adoption checks both; a replica whose TLS mode differs from the
spec's (a plaintext one left by an agent without TLS, or the reverse) is stopped, never adopted."""

from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
import socket
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import prometheus_client as prom
import runtime_adapter
from runtime_adapter import records as adapter_records

from meridian import spec
from meridian.fleet import models

from agents import allocation, backends, state
from agents.backends import base, engine

log = logging.getLogger(__name__)

LIVE_STATES = base.LIVE_STATES
Placement = base.Placement


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (a bind test; SO_REUSEADDR as servers use it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def bind_host_for(advertise_host: str) -> str:
    """Engines bind the advertised address when it is loopback (one-box setups), every interface
    otherwise (the advertised name may be a DNS name or a NAT'd address)."""
    return advertise_host if advertise_host.startswith("127.") or advertise_host == "localhost" else "0.0.0.0"


@dataclasses.dataclass
class Managed:
    handle: runtime_adapter.Replica
    placement: Placement
    port: int
    gpu_ids: tuple[int, ...]
    last_state: models.ReplicaState
    last_restarts: int = 0
    engine_port: int | None = None  # with TLS: the engine's loopback port behind the relay's ``port``
    ended_at: float | None = None  # wall time it reached STOPPED or FAILED
    note: str = ""  # why the agent ended it, when it did (lost node)

    @property
    def state(self) -> models.ReplicaState:
        return self.handle.state

    @property
    def holding(self) -> allocation.Holding:
        p = self.placement
        return allocation.Holding(p.replica_id, p.pool_id, p.node_id, self.gpu_ids, self.port)


class LocalBackend(base.ReplicaBackend):
    """Replicas as local engine processes under the runtime adapter's supervision."""

    name = "local"

    def __init__(self, settings: base.ReplicaSettings, state_dir: pathlib.Path, *,
                 adapter_metrics: runtime_adapter.AdapterMetrics | None = None,
                 clock: Callable[[], float] = time.time,
                 is_port_free: Callable[[int], bool] | None = None):
        if not settings.supervisor.survive_supervisor_exit:
            raise ValueError("the agent runs engines in the adapter's adoptable mode: "
                             "settings.supervisor.survive_supervisor_exit must be True")
        self.settings = settings
        self._bind_host = bind_host_for(settings.advertise_host)
        self._engine_dir = state_dir / "replicas"
        self._placement_dir = state_dir / "placements"
        self._adapter_metrics = adapter_metrics or runtime_adapter.AdapterMetrics()
        self._clock = clock
        self._is_port_free = is_port_free or (lambda port: port_is_free(self._bind_host, port))
        self._replicas: dict[str, Managed] = {}
        self._session: aiohttp.ClientSession | None = None
        self._reserved_ports: set[int] = set()

    # ------------------------------------------------------------------ views

    def get(self, replica_id: str) -> Managed | None:
        return self._replicas.get(replica_id)

    def all(self) -> list[Managed]:
        return list(self._replicas.values())

    def holdings(self) -> list[allocation.Holding]:
        """GPUs and ports held by replicas whose engine may be running."""
        return [m.holding for m in self._replicas.values() if m.state in LIVE_STATES]

    def used_ports(self) -> set[int]:
        engine_ports = {m.engine_port for m in self._replicas.values()
                        if m.engine_port is not None and m.state in LIVE_STATES}
        return {h.port for h in self.holdings()} | engine_ports | self._reserved_ports

    def choose_port(self) -> int | None:
        return allocation.choose_port(self.settings.port_range, self.used_ports(), self._is_port_free)

    def reports(self) -> list[models.ReplicaReport]:
        out = []
        for m in self._replicas.values():
            p = m.placement
            report = dataclasses.replace(m.handle.report(p.deployment, p.revision, p.pool_id, p.gpu_count),
                                         node_id=p.node_id)
            if m.note and report.state in (models.ReplicaState.FAILED, models.ReplicaState.STOPPED):
                report = dataclasses.replace(report, message=m.note + (f"; {report.message}" if report.message else ""))
            out.append(report)
        return out

    # ------------------------------------------------------------------ lifecycle

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def _replica_kwargs(self) -> dict:
        s = self.settings
        return dict(api_key=s.api_key, cache_dir=s.cache_dir, config=s.supervisor, session=self._ensure_session(),
                    state_dir=str(self._engine_dir), metrics=self._adapter_metrics, advertise_host=s.advertise_host)

    def prepare(self, action: models.StartReplica, *, directive_id: str, node_id: str, gpu_ids: tuple[int, ...],
                gpu_type: str) -> Managed:
        """Build (not start) the replica on a free port of the range; raises ``base.Refused`` when no
        port is left and ``runtime_adapter.LaunchError`` for a spec the engine cannot run, before
        anything is reserved or spawned."""
        port = self.choose_port()
        tls = self.settings.tls
        engine_port = None
        if port is not None and tls is not None:
            engine_port = allocation.choose_port(self.settings.port_range, self.used_ports() | {port},
                                                 self._is_port_free)
        if port is None or (tls is not None and engine_port is None):
            lo, hi = self.settings.port_range
            need = " (a TLS replica takes two: its HTTPS port and its engine's loopback port)" if tls else ""
            raise base.Refused(f"no free port left in the replica port range {lo}-{hi}{need}")
        where: dict[str, Any]
        if engine_port is not None:  # the engine behind the relay: loopback only
            where = dict(port=engine_port, host="127.0.0.1", tls=tls, tls_host=self._bind_host, tls_port=port)
        else:
            where = dict(port=port, host=self._bind_host)
        handle = runtime_adapter.Replica(
            action.runtime, action.replica_id, gpu_ids=gpu_ids, engine_command=self.settings.engine_command,
            env=engine.engine_env(self.settings, gpu_type), **where, **self._replica_kwargs())
        placement = Placement(action.replica_id, action.deployment, action.revision, action.pool_id, node_id,
                              action.gpu_count, gpu_type)
        return Managed(handle=handle, placement=placement, port=port, gpu_ids=gpu_ids,
                       last_state=models.ReplicaState.STARTING, engine_port=engine_port)

    async def launch(self, managed: Managed) -> str:  # type: ignore[override]
        """Record the placement, then start the engine under supervision."""
        rid = managed.placement.replica_id
        if rid in self._replicas:
            raise ValueError(f"replica {rid!r} is already managed")
        state.write_json_atomic(self._placement_dir / f"{rid}.json", managed.placement.to_json())
        self._replicas[rid] = managed
        try:
            await managed.handle.start()
        except BaseException:
            self._replicas.pop(rid, None)
            (self._placement_dir / f"{rid}.json").unlink(missing_ok=True)
            raise
        log.info("replica started replica=%s pool=%s node=%s gpus=%s port=%d engine_port=%s endpoint=%s", rid,
                 managed.placement.pool_id, managed.placement.node_id, list(managed.gpu_ids), managed.port,
                 managed.engine_port, managed.handle.endpoint)
        return f"starting on node {managed.placement.node_id} GPUs {list(managed.gpu_ids)} port {managed.port}"

    async def wait_ready(self, replica_id: str, timeout_s: float) -> None:
        await self._replicas[replica_id].handle.wait_ready(timeout_s)

    async def drain(self, replica_id: str, deadline_s: float) -> runtime_adapter.DrainResult:
        m = self._replicas[replica_id]
        result = await m.handle.drain(deadline_s)
        self._ended(m)
        return result

    async def stop(self, replica_id: str, note: str = "") -> None:
        m = self._replicas[replica_id]
        m.note = note or m.note
        await m.handle.stop()
        self._ended(m)

    def _ended(self, m: Managed) -> None:
        if m.ended_at is None:
            m.ended_at = self._clock()
        (self._placement_dir / f"{m.placement.replica_id}.json").unlink(missing_ok=True)

    def forget(self, replica_id: str) -> None:
        m = self._replicas.pop(replica_id, None)
        if m is not None:
            self._ended(m)

    async def adopt(self) -> tuple[list[str], list[str]]:
        """Re-attach engines left running by a previous agent. Returns (adopted ids, cleaned-up ids):
        an engine without a placement is stopped (an orphan), a placement without a live engine is
        dropped (the scheduler sees the replica gone from the next complete report)."""
        placements: dict[str, Placement] = {}
        if self._placement_dir.is_dir():
            for path in sorted(self._placement_dir.glob("*.json")):
                try:
                    p = Placement.from_json(json.loads(path.read_text()))
                    placements[p.replica_id] = p
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    log.error("unreadable placement path=%s error=%s; removing it", path, exc)
                    path.unlink(missing_ok=True)
        adopted, cleaned = [], []
        for record in adapter_records.load_all(str(self._engine_dir)):
            placement = placements.pop(record.replica_id, None)
            try:
                handle = await runtime_adapter.Replica.adopt(record, engine_command=self.settings.engine_command,
                                                             tls=self.settings.tls, **self._replica_kwargs())
            except runtime_adapter.AdoptError as exc:
                log.warning("cannot re-adopt replica=%s error=%s; dropping it", record.replica_id, exc)
                adapter_records.remove(str(self._engine_dir), record.replica_id)
                if placement is not None:
                    (self._placement_dir / f"{record.replica_id}.json").unlink(missing_ok=True)
                cleaned.append(record.replica_id)
                continue
            mismatch = _tls_mismatch(handle.tls is not None, self.settings.tls is not None)
            if placement is None or mismatch:
                why = mismatch or "engine without placement: stopping the orphan"
                log.warning("not re-adopting replica=%s pid=%s: %s", record.replica_id, record.pid, why)
                await handle.stop()
                if placement is not None:
                    (self._placement_dir / f"{record.replica_id}.json").unlink(missing_ok=True)
                cleaned.append(record.replica_id)
                continue
            public_port = record.relay.port if record.relay is not None else record.port
            self._replicas[record.replica_id] = Managed(
                handle=handle, placement=placement, port=public_port, gpu_ids=tuple(record.gpu_ids),
                last_state=handle.state, last_restarts=handle.restarts,
                engine_port=record.port if record.relay is not None else None)
            adopted.append(record.replica_id)
            log.info("replica re-adopted replica=%s pid=%s relay_pid=%s port=%d endpoint=%s", record.replica_id,
                     record.pid, handle.relay_pid, public_port, handle.endpoint)
        for rid in placements:
            log.warning("placement without engine replica=%s: dropping it", rid)
            (self._placement_dir / f"{rid}.json").unlink(missing_ok=True)
            cleaned.append(rid)
        return adopted, cleaned

    def poll(self) -> list[base.Change]:
        """State transitions since the last poll; drops ended replicas after ``ended_linger_s``."""
        changes = []
        now = self._clock()
        for rid, m in list(self._replicas.items()):
            st = m.state
            restarted = m.handle.restarts > m.last_restarts
            if st != m.last_state or restarted:
                crashed = (st == models.ReplicaState.FAILED and not m.note) or restarted or (
                    m.last_state == models.ReplicaState.READY and st == models.ReplicaState.STARTING)
                changes.append(base.Change(rid, m.last_state, st, crashed, m.handle.message))
                m.last_state, m.last_restarts = st, m.handle.restarts
            if st in (models.ReplicaState.STOPPED, models.ReplicaState.FAILED):
                self._ended(m)
                if m.ended_at is not None and now - m.ended_at >= self.settings.ended_linger_s:
                    del self._replicas[rid]
        return changes

    async def close(self, *, stop_replicas: bool) -> None:
        """Agent shutdown: stop every engine, or detach them so the next agent re-adopts them."""
        for m in list(self._replicas.values()):
            if m.state not in LIVE_STATES:
                continue
            try:
                if stop_replicas:
                    await m.handle.stop()
                    self._ended(m)
                else:
                    await m.handle.detach()
            except Exception as exc:  # one replica must not keep the others running/attached
                log.error("replica shutdown failed replica=%s error=%s", m.placement.replica_id, exc)
        if self._session is not None and not self._session.closed:
            await self._session.close()


def _tls_mismatch(serves_tls: bool, wants_tls: bool) -> str:
    """Why an adopted replica does not match the spec's TLS setting ("" when it does)."""
    if wants_tls and not serves_tls:
        return ("it serves plain HTTP but spec.replicas.local.tls is set: stopping it (never adopted as plaintext; "
                "the scheduler starts a replacement)")
    if serves_tls and not wants_tls:
        return "it serves HTTPS but spec.replicas.local.tls is not set: stopping it (the scheduler starts a replacement)"
    return ""


@backends.register("local")
def create(cluster: spec.Cluster, *, settings: base.ReplicaSettings, state_dir: pathlib.Path,
           clock: Callable[[], float] = time.time, registry: prom.CollectorRegistry | None = None,
           is_port_free: Callable[[int], bool] | None = None) -> LocalBackend:
    """Options: ``registry`` (the agent's metrics registry: the runtime adapter's metrics join it),
    ``is_port_free`` (tests)."""
    return LocalBackend(settings, state_dir, adapter_metrics=runtime_adapter.AdapterMetrics(registry), clock=clock,
                        is_port_free=is_port_free)


__all__ = ["LIVE_STATES", "LocalBackend", "Managed", "Placement", "bind_host_for", "create", "port_is_free"]
