"""What agents' events mean for planning, kept as plain data with the clock passed in:

- SPOT_INTERRUPTION (with a replica id): the replica is *doomed* until its deadline (default two
  minutes): it stops counting toward the placement, so its replacement starts at once, and it is
  drained when the replacement is ready (or at the deadline).
- STOCK_OUT and QUOTA_EXCEEDED (with a pool id), or a pool reported STOCKED_OUT: the pool may not
  grow for a backoff that doubles with each failure (``base_s`` .. ``max_s``); the plan is redone
  without that growth. A later success (the pool grew) resets the backoff.
- REPLICA_CRASH, THROTTLED, AUTH_FAILURE: logged; the next round looks at the reports."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping

from meridian import backoff
from meridian.fleet import models as fm
from scheduler.control import journal as journal_mod
from scheduler.solver import problem

log = logging.getLogger("meridian.scheduler.events")
SPOT_NOTICE_DEFAULT_S = 120.0


@dataclasses.dataclass(frozen=True)
class Backoff:
    until_s: float
    failures: int
    reason: str


class EventTracker:
    def __init__(self, *, base_s: float, max_s: float, journal: journal_mod.Journal | None = None):
        if not 0 < base_s <= max_s:
            raise ValueError(f"stock-out backoff needs 0 < base_s <= max_s, got {base_s}, {max_s}")
        self._base_s = base_s
        self._max_s = max_s
        self.doomed: dict[str, float] = {}
        self.backoff: dict[str, Backoff] = {}
        self.journal = journal if journal is not None else journal_mod.Journal()  # recent events, as data

    def on_event(self, cluster_id: str, event: fm.Event, now_s: float) -> bool:
        """Record ``event``; True when it calls for a new plan now."""
        kind = event.kind
        if kind not in (fm.EventKind.STOCK_OUT, fm.EventKind.QUOTA_EXCEEDED) or not event.pool_id:
            # A stock-out is journalled by stock_out(), once per backoff.
            subject = event.replica_id or (problem.pool_key(cluster_id, event.pool_id) if event.pool_id else "")
            self.journal.record(now_s, kind.value, cluster_id=cluster_id, subject=subject, message=event.message)
        if kind is fm.EventKind.SPOT_INTERRUPTION:
            if event.replica_id:
                deadline = event.deadline if event.deadline else now_s + SPOT_NOTICE_DEFAULT_S
                self.doomed[event.replica_id] = min(deadline, self.doomed.get(event.replica_id, deadline))
                log.warning("event=spot_interruption cluster=%s pool=%s replica=%s deadline_in_s=%.0f", cluster_id,
                            event.pool_id, event.replica_id, deadline - now_s)
            else:
                log.warning("event=spot_interruption cluster=%s pool=%s replica=- message=%r (pool capacity will "
                            "shrink; re-planning)", cluster_id, event.pool_id, event.message)
            return True
        if kind in (fm.EventKind.STOCK_OUT, fm.EventKind.QUOTA_EXCEEDED) and event.pool_id:
            self.stock_out(problem.pool_key(cluster_id, event.pool_id), now_s,
                           f"{kind.value.replace('_', '-')}: {event.message}".rstrip(": "), kind=kind.value)
            return True
        log.warning("event=agent_event kind=%s cluster=%s pool=%s replica=%s message=%r", kind.value, cluster_id,
                    event.pool_id or "-", event.replica_id or "-", event.message)
        return kind is fm.EventKind.REPLICA_CRASH

    def stock_out(self, pool_key: str, now_s: float, reason: str, *, kind: str = "stock_out") -> None:
        old = self.backoff.get(pool_key)
        if old is not None and now_s < old.until_s:
            return  # already backing off: the same stock-out reported again
        failures = (old.failures + 1) if old is not None else 1
        wait_s = backoff.ceiling_s(failures, self._base_s, self._max_s)  # deterministic: one pool, no jitter
        self.backoff[pool_key] = Backoff(now_s + wait_s, failures, reason)
        self.journal.record(now_s, kind, cluster_id=pool_key.split("/", 1)[0], subject=pool_key,
                            message=f"{reason}; not grown for {wait_s:.0f}s (failure {failures})")
        log.warning("event=pool_backoff pool=%s failures=%d retry_in_s=%.0f reason=%r", pool_key, failures, wait_s,
                    reason)

    def pool_grew(self, pool_key: str) -> None:
        """The pool gained nodes: it is no longer stocked out; forget its failures."""
        if self.backoff.pop(pool_key, None) is not None:
            log.info("event=pool_backoff_reset pool=%s", pool_key)

    def no_growth(self, now_s: float) -> dict[str, str]:
        """Pools in backoff now -> why (with when they will be tried again)."""
        return {k: f"{b.reason}; not grown until {b.until_s - now_s:.0f}s from now (failure {b.failures})"
                for k, b in self.backoff.items() if now_s < b.until_s}

    def doomed_at(self, replica_id: str) -> float | None:
        return self.doomed.get(replica_id)

    def prune(self, live_replica_ids: Collection[str]) -> None:
        """Forget notices about replicas no longer reported."""
        for rid in [r for r in self.doomed if r not in live_replica_ids]:
            del self.doomed[rid]

    def snapshot(self, now_s: float) -> Mapping[str, object]:
        return {"doomed": dict(self.doomed), "stocked_out": self.no_growth(now_s)}
