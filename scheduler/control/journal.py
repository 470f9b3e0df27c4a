"""The leader's recent events as data: a bounded ring the control side writes to as it handles what
happens to the fleet, read by ``GET /v1/events`` (the web dashboard's "recent events").

What is recorded (``KINDS``), each at the moment the scheduler learns it (seconds of the scheduler's
clock), with the cluster, the subject (pool key, replica id or deployment) and a message:
- agents' events: ``spot_interruption``, ``stock_out``, ``quota_exceeded`` (once per backoff, not
  once per repeat), ``replica_crash``, ``throttled``, ``auth_failure``;
- the fleet view: ``cluster_lost`` (an agent silent for ``lost_after_s``: its replicas are re-placed
  elsewhere, the scheduler's failover) and ``cluster_back``;
- rollouts: ``rollout_started``, ``rollout_step``, ``rollout_complete``, ``rollout_rolled_back``.

The ring keeps the newest ``capacity`` entries; sequence numbers only grow, so a reader asks for
``after`` the last one it saw and learns from ``dropped`` whether it missed some. The ring lives in
memory, not in the state store: a restarted scheduler starts it empty, and only the leader (the
node agents talk to) fills it."""

from __future__ import annotations

import collections
import dataclasses

DEFAULT_CAPACITY = 200
KINDS = ("spot_interruption", "stock_out", "quota_exceeded", "replica_crash", "throttled", "auth_failure",
         "cluster_lost", "cluster_back", "rollout_started", "rollout_step", "rollout_complete",
         "rollout_rolled_back")
MAX_MESSAGE_CHARS = 500


@dataclasses.dataclass(frozen=True)
class Entry:
    seq: int
    at_s: float
    kind: str
    cluster_id: str = ""
    subject: str = ""
    message: str = ""

    def to_dict(self) -> dict:
        return {"seq": self.seq, "at": round(self.at_s, 3), "kind": self.kind, "cluster_id": self.cluster_id,
                "subject": self.subject, "message": self.message}


class Journal:
    """A ring of the newest ``capacity`` events (not thread-safe: the event loop writes and reads it)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY):
        if capacity < 1:
            raise ValueError(f"journal capacity must be >= 1, got {capacity}")
        self._entries: collections.deque[Entry] = collections.deque(maxlen=capacity)
        self._seq = 0

    @property
    def last_seq(self) -> int:
        return self._seq

    def record(self, at_s: float, kind: str, *, cluster_id: str = "", subject: str = "", message: str = "") -> Entry:
        if kind not in KINDS:
            raise ValueError(f"unknown journal kind {kind!r}; one of {', '.join(KINDS)}")
        self._seq += 1
        entry = Entry(self._seq, at_s, kind, cluster_id, subject, message[:MAX_MESSAGE_CHARS])
        self._entries.append(entry)
        return entry

    def after(self, seq: int = 0, limit: int | None = None) -> list[Entry]:
        """Entries newer than ``seq``, oldest first; with ``limit``, the newest ``limit`` of them."""
        out = [e for e in self._entries if e.seq > seq]
        return out[-limit:] if limit is not None and limit >= 0 else out

    def dropped(self, seq: int) -> int:
        """How many entries after ``seq`` the ring no longer holds (a reader fell behind)."""
        oldest = self._entries[0].seq if self._entries else self._seq + 1
        return max(0, oldest - seq - 1)

    def clear(self) -> None:
        """Forget the entries (leadership lost); sequence numbers keep growing."""
        self._entries.clear()
