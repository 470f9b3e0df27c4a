"""The agents' side of the gRPC edge: one ``AgentSession`` per open Connect stream, and the
``AgentHub`` that finds a cluster's session to send it a directive (the reconciler's transport).

A cluster has at most one session: a new authenticated stream for the same cluster (the agent
restarted or reconnected) replaces the old one, which is closed. A session's outbox is bounded
(``OUTBOX_LIMIT``): an agent that stops reading while directives keep coming is disconnected
(it reconnects and reports; the undelivered directives expire and are decided afresh) rather than
letting directives pile up in the scheduler's memory."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from meridian.fleet import models as fm

log = logging.getLogger("meridian.scheduler.agents")


class AgentSink(Protocol):
    """What the control side does with agent messages (already authenticated and converted)."""

    async def on_hello(self, identity: fm.ClusterIdentity, completed_ids: tuple[str, ...], now_s: float) -> None: ...

    async def on_inventory(self, cluster_id: str, pools: list[fm.GpuPool], complete: bool, now_s: float) -> None: ...

    async def on_replicas(self, cluster_id: str, reports: list[fm.ReplicaReport], complete: bool,
                          now_s: float) -> None: ...

    async def on_ack(self, cluster_id: str, ack: fm.DirectiveAck, now_s: float) -> None: ...

    async def on_event(self, cluster_id: str, event: fm.Event, now_s: float) -> None: ...

    async def on_heartbeat(self, cluster_id: str, now_s: float) -> None: ...

    async def on_disconnect(self, cluster_id: str, now_s: float) -> None: ...


_CLOSE = object()
OUTBOX_LIMIT = 1000


class AgentSession:
    def __init__(self, cluster_id: str, peer: str):
        self.cluster_id = cluster_id
        self.peer = peer
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.close_reason = ""

    def close(self, reason: str) -> None:
        if not self.close_reason:
            self.close_reason = reason
            self.outbox.put_nowait(_CLOSE)

    @property
    def closed(self) -> bool:
        return bool(self.close_reason)

    async def next_directive(self) -> fm.Directive | None:
        """The next directive to write, or None once the session is closed."""
        item = await self.outbox.get()
        return None if item is _CLOSE else item


class AgentHub:
    def __init__(self) -> None:
        self._sessions: dict[str, AgentSession] = {}

    def attach(self, cluster_id: str, peer: str) -> AgentSession:
        old = self._sessions.get(cluster_id)
        if old is not None:
            log.info("event=agent_replaced cluster=%s old_peer=%s new_peer=%s", cluster_id, old.peer, peer)
            old.close("replaced by a newer stream of the same cluster")
        session = self._sessions[cluster_id] = AgentSession(cluster_id, peer)
        return session

    def detach(self, session: AgentSession) -> bool:
        """Forget ``session``; True if it was the cluster's current one."""
        if self._sessions.get(session.cluster_id) is session:
            del self._sessions[session.cluster_id]
            return True
        return False

    def connected(self) -> set[str]:
        return {cid for cid, s in self._sessions.items() if not s.closed}

    async def send(self, cluster_id: str, directive: fm.Directive) -> bool:
        """Queue ``directive`` on the cluster's stream; False when no stream is open, or when the
        agent has left ``OUTBOX_LIMIT`` directives unread (the stream is then closed)."""
        session = self._sessions.get(cluster_id)
        if session is None or session.closed:
            return False
        if session.outbox.qsize() >= OUTBOX_LIMIT:
            log.warning("event=agent_outbox_full cluster=%s peer=%s queued=%d", cluster_id, session.peer,
                        session.outbox.qsize())
            session.close(f"the agent left {OUTBOX_LIMIT} directives unread; reconnect")
            return False
        session.outbox.put_nowait(directive)
        return True

    def close_all(self, reason: str) -> None:
        for session in list(self._sessions.values()):
            session.close(reason)
        self._sessions.clear()
