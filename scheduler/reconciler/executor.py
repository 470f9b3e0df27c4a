"""The reconciler's executor: the only part that does I/O. For each planned directive it

1. stamps the leader's fencing token,
2. claims the directive id in the state store with a fenced insert (an id already there is never
   sent again; a deposed leader's claim is refused by the store),
3. hands it to the transport (the agent's stream) and records it as sent.

It keeps the open directives in memory (loaded from the store when a term starts) and updates them
from acks, from agents' Hello (``completed_directive_ids``) and from what reports show
(``tracking.resolve``). A success ack alone does not close a start, drain or resize: it stays open
until the reports show its effect, so the reconciler never counts a replica neither as pending nor
as present and sends a second start for it."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from meridian.fleet import models as fm
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler.reconciler import tracking
from scheduler.reconciler import types as t
from scheduler.state import base, records

log = logging.getLogger("meridian.scheduler.executor")
S = records.DirectiveStatus


class Transport(Protocol):
    async def send(self, cluster_id: str, directive: fm.Directive) -> bool:
        """Deliver to the cluster's agent; False if it is not connected."""
        ...


class Executor:
    def __init__(self, *, log_store: records.DirectiveLog, transport: Transport, clock: clock_mod.Clock,
                 metrics: metrics_mod.SchedulerMetrics, timeouts: tracking.Timeouts):
        self._log = log_store
        self._transport = transport
        self._clock = clock
        self._metrics = metrics
        self._timeouts = timeouts
        self._open: dict[str, records.DirectiveRecord] = {}

    async def load(self) -> int:
        """Take over the open directives recorded by any earlier leader (they are never resent)."""
        self._open = {r.directive_id: r for r in await self._log.all() if r.is_open}
        return len(self._open)

    def clear(self) -> None:
        self._open.clear()

    def open_records(self) -> list[records.DirectiveRecord]:
        return sorted(self._open.values(), key=lambda r: r.created_at)

    def open_directives(self) -> tuple[t.OpenDirective, ...]:
        return tuple(t.OpenDirective(r.cluster_id, r.directive) for r in self.open_records())

    async def execute(self, planned: Sequence[t.PlannedDirective], fence: int) -> list[records.DirectiveRecord]:
        """Claim and send ``planned`` in order; stops at the first FencedOut (this node lost the lease)
        and re-raises it. Returns the records of what was sent."""
        sent = []
        for p in planned:
            now = self._clock.now()
            directive = dataclasses.replace(p.directive, fencing_token=fence)
            rec = records.DirectiveRecord(directive, p.cluster_id, S.CLAIMED, now, now, p.reason)
            action = records.action_name(directive.action)
            if not await self._log.claim(rec, fence):
                log.warning("event=directive_exists id=%s cluster=%s: not sent again", rec.directive_id, p.cluster_id)
                self._metrics.directives.labels(action, "duplicate_id").inc()
                continue
            self._open[rec.directive_id] = rec
            delivered = await self._transport.send(p.cluster_id, directive)
            if delivered:
                rec = rec.with_status(S.SENT, self._clock.now())
                self._metrics.directives.labels(action, "sent").inc()
                sent.append(rec)
                log.info("event=directive_sent id=%s cluster=%s action=%s reason=%r", rec.directive_id, p.cluster_id,
                         _summary(directive.action), p.reason)
            else:
                rec = rec.with_status(S.FAILED, self._clock.now(), "agent not connected")
                self._metrics.directives.labels(action, "undelivered").inc()
                log.warning("event=directive_undelivered id=%s cluster=%s", rec.directive_id, p.cluster_id)
            await self._store(rec, fence)
        return sent

    async def on_ack(self, cluster_id: str, ack: fm.DirectiveAck, fence: int) -> None:
        rec = self._open.get(ack.directive_id) or await self._log.get(ack.directive_id)
        if rec is None:
            log.warning("event=ack_unknown id=%s cluster=%s outcome=%s", ack.directive_id, cluster_id,
                        ack.outcome.value)
            return
        if rec.cluster_id != cluster_id:
            self._metrics.auth_failures.labels("agent", "foreign_ack").inc()
            log.warning("event=ack_refused id=%s cluster=%s owner=%s: an agent cannot acknowledge another cluster's "
                        "directive", ack.directive_id, cluster_id, rec.cluster_id)
            return
        self._metrics.directives.labels(records.action_name(rec.directive.action), ack.outcome.value).inc()
        if not rec.is_open:
            return
        if ack.outcome in (fm.DirectiveOutcome.REFUSED, fm.DirectiveOutcome.FAILED):
            status = records.OUTCOME_STATUS[ack.outcome]
            log.warning("event=directive_%s id=%s cluster=%s reason=%r", status.value, rec.directive_id, cluster_id,
                        ack.reason)
        else:
            status = S.ACCEPTED  # closed when the reports show the effect
        await self._store(rec.with_status(status, self._clock.now(), ack.reason), fence)

    async def on_completed(self, cluster_id: str, directive_ids: Iterable[str], fence: int) -> None:
        """An agent's Hello lists directives it carried out: keep them from ever being resent, and
        treat those still open as accepted (their effect shows in the reports that follow)."""
        for directive_id in directive_ids:
            rec = self._open.get(directive_id)
            if rec is not None and rec.cluster_id != cluster_id:
                self._metrics.auth_failures.labels("agent", "foreign_ack").inc()
                log.warning("event=ack_refused id=%s cluster=%s owner=%s: a Hello cannot report another cluster's "
                            "directive done", directive_id, cluster_id, rec.cluster_id)
                continue
            if rec is not None and rec.status is not S.ACCEPTED:
                await self._store(rec.with_status(S.ACCEPTED, self._clock.now(), "agent reports it done"), fence)

    async def resolve(self, observed: tracking.Observed, fence: int) -> list[records.DirectiveRecord]:
        changed = tracking.resolve(self._open.values(), observed, self._clock.now(), self._timeouts)
        for rec in changed:
            self._metrics.directives.labels(records.action_name(rec.directive.action), rec.status.value).inc()
            if rec.status is not S.SUCCEEDED:
                log.warning("event=directive_%s id=%s cluster=%s reason=%r", rec.status.value, rec.directive_id,
                            rec.cluster_id, rec.reason)
            await self._store(rec, fence)
        return changed

    async def prune(self, before_s: float, fence: int) -> int:
        """Forget closed directives last updated before ``before_s`` (open ones are kept whatever their age)."""
        return await self._log.prune(before_s, fence)

    async def _store(self, rec: records.DirectiveRecord, fence: int) -> None:
        if rec.is_open:
            self._open[rec.directive_id] = rec
        else:
            self._open.pop(rec.directive_id, None)
        try:
            await self._log.update(rec, fence)
        except base.FencedOut:
            raise
        except base.StateError as exc:
            self._metrics.errors.labels("directive_log").inc()
            log.error("event=directive_log_error id=%s error=%r", rec.directive_id, str(exc))


def _summary(a: fm.Action) -> str:
    if isinstance(a, fm.StartReplica):
        return f"start {a.replica_id} ({a.deployment}) on {a.pool_id} x{a.gpu_count}"
    if isinstance(a, fm.DrainReplica):
        return f"drain {a.replica_id} deadline={a.deadline_s}s"
    return f"resize {a.pool_id} -> {a.target_nodes}"
