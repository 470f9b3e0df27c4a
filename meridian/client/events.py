"""What a client reports about its attempts: one structured log line per retry, hedge and
give-up (``event=client_retry ...``; never the API key or the request body), and the same facts as
``ClientEvent`` values for an optional hook (count them in your own Prometheus metrics)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

log = logging.getLogger("meridian.client")

KINDS = ("attempt", "retry", "hedge", "give_up")


@dataclasses.dataclass(frozen=True)
class ClientEvent:
    """``kind``: ``attempt`` (an attempt ended: ``reason`` is ``ok``, the failure, or
    ``cancelled`` for a hedge that lost or a try cut off by the total timeout),
    ``retry`` (another attempt follows after ``delay_s``), ``hedge`` (a second try was sent
    while the first was still out), ``give_up`` (the call failed; ``reason`` says why no more tries
    were made, ``failure`` what the last one was). ``attempt`` is the 1-based number of the attempt concerned; ``elapsed_s`` counts
    from the call's start."""

    kind: str
    request_id: str
    method: str
    path: str
    attempt: int
    reason: str
    elapsed_s: float
    status: int = 0
    delay_s: float = 0.0
    failure: str = ""


Hook = Callable[[ClientEvent], None]


class Reporter:
    """Logs an event and hands it to the hook; a hook that raises is logged, never breaks a call."""

    def __init__(self, hook: Hook | None) -> None:
        self._hook = hook

    def emit(self, event: ClientEvent) -> None:
        if event.kind == "retry":
            log.info("event=client_retry request_id=%s method=%s path=%s attempt=%d reason=%s status=%d "
                     "delay_s=%.3f elapsed_s=%.3f", event.request_id, event.method, event.path, event.attempt,
                     event.reason, event.status, event.delay_s, event.elapsed_s)
        elif event.kind == "hedge":
            log.info("event=client_hedge request_id=%s method=%s path=%s attempt=%d elapsed_s=%.3f",
                     event.request_id, event.method, event.path, event.attempt, event.elapsed_s)
        elif event.kind == "give_up":
            level = logging.DEBUG if event.reason == "not_retryable" else logging.WARNING
            log.log(level, "event=client_give_up request_id=%s method=%s path=%s attempts=%d reason=%s failure=%s "
                    "status=%d elapsed_s=%.3f", event.request_id, event.method, event.path, event.attempt, event.reason,
                    event.failure, event.status, event.elapsed_s)
        if self._hook is not None:
            try:
                self._hook(event)
            except Exception:  # the caller's hook: report it, keep the call going
                log.exception("event=client_hook_failed kind=%s request_id=%s", event.kind, event.request_id)
