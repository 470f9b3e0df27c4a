"""What the agent must remember across its own restarts, kept in its state directory:
the directives it has carried out (so a resent directive is acknowledged, not redone) and the highest
leadership fencing token it has seen (so a deposed scheduler cannot command it).

Replica records (to re-adopt running engines) belong to the runtime adapter and live beside these,
under ``replicas/``. Writes are atomic (temp file + rename) so a kill mid-write leaves the old file."""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import pathlib
import tempfile

from meridian.fleet import models

log = logging.getLogger(__name__)

JOURNAL_FILE = "directives.json"


def write_json_atomic(path: pathlib.Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` so that readers see either the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


@dataclasses.dataclass(frozen=True)
class JournalEntry:
    directive_id: str
    outcome: models.DirectiveOutcome
    reason: str = ""
    at: float = 0.0


class DirectiveJournal:
    """Directive ids the agent has handled, with their latest outcome, most recent last.

    Bounded to ``capacity`` entries (oldest dropped): the scheduler never resends a directive that
    old, and Hello only carries the most recent ones. ``path`` None keeps it in memory (tests)."""

    def __init__(self, path: pathlib.Path | None, capacity: int = 4096):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._path = path
        self._capacity = capacity
        self._entries: collections.OrderedDict[str, JournalEntry] = collections.OrderedDict()
        self._fencing_token = 0
        if path is not None and path.exists():
            self._load(path)

    def _load(self, path: pathlib.Path) -> None:
        try:
            data = json.loads(path.read_text())
            self._fencing_token = int(data.get("fencing_token", 0))
            for item in data.get("directives", []):
                entry = JournalEntry(item["id"], models.DirectiveOutcome(item["outcome"]),
                                     item.get("reason", ""), float(item.get("at", 0.0)))
                self._entries[entry.directive_id] = entry
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # A corrupt journal must not stop the agent; losing it only means a resent directive
            # may be refused (its replica id already in use) instead of acknowledged as duplicate.
            log.error("directive journal unreadable path=%s error=%s; starting empty", path, exc)
            self._entries.clear()

    def _save(self) -> None:
        if self._path is None:
            return
        data = {"fencing_token": self._fencing_token,
                "directives": [{"id": e.directive_id, "outcome": e.outcome.value, "reason": e.reason, "at": e.at}
                               for e in self._entries.values()]}
        write_json_atomic(self._path, data)

    def get(self, directive_id: str) -> JournalEntry | None:
        return self._entries.get(directive_id)

    def __contains__(self, directive_id: str) -> bool:
        return directive_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def record(self, directive_id: str, outcome: models.DirectiveOutcome, reason: str = "", at: float = 0.0) -> None:
        """Record (or update) a directive's outcome and persist the journal."""
        self._entries.pop(directive_id, None)
        self._entries[directive_id] = JournalEntry(directive_id, models.DirectiveOutcome(outcome), reason, at)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        self._save()

    def recent(self, limit: int) -> list[str]:
        """The ``limit`` most recently handled directive ids, oldest first."""
        ids = list(self._entries)
        return ids[-limit:] if limit > 0 else []

    @property
    def fencing_token(self) -> int:
        return self._fencing_token

    def observe_fencing_token(self, token: int) -> bool:
        """Accept ``token`` if it is not lower than the highest seen; raise the mark when higher.
        Returns False for a stale token (a deposed scheduler)."""
        if token < self._fencing_token:
            return False
        if token > self._fencing_token:
            self._fencing_token = token
            self._save()
        return True
