"""Which failed attempts are tried again, and after how long: pure functions, state in, decision
out (the clients carry them out).

A failure is retried only when a retry can fix it and cannot repeat what the caller already got:

- the connection was refused, or reset/closed by the server before any byte of a response;
- the connect timeout, or a stream's first-token timeout, fired before any byte of the body;
- the server answered 429 (after its ``Retry-After``), 502, 503 or 504.

Never: any other status (400, 401, 403, 404, 413, 422, 500, ...), DNS and TLS failures, malformed
answers, and nothing once a response body has delivered a byte (a stream that breaks mid-way
raises ``StreamError``: the caller has already seen its first tokens)."""

from __future__ import annotations

import dataclasses
import random

from meridian import backoff
from meridian.client import config, errors

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
RETRYABLE_KINDS = frozenset({"refused", "reset", "connect_timeout", "first_token_timeout"})


@dataclasses.dataclass(frozen=True)
class Failure:
    """One failed attempt. ``kind``: refused, reset, dns, tls, connect_error, connect_timeout,
    first_token_timeout, status, broken (after bytes), protocol. ``body_bytes``: response body
    bytes received before it failed."""

    kind: str
    error: errors.ClientError
    body_bytes: int = 0
    status: int = 0
    retry_after_s: float | None = None

    @property
    def reason(self) -> str:
        """A short label for logs and metrics: the kind, or ``status_<code>``."""
        return f"status_{self.status}" if self.kind == "status" else self.kind


@dataclasses.dataclass(frozen=True)
class Decision:
    """Try again after ``delay_s``, or stop (``gave_up`` says why, see ``errors``)."""

    retry: bool
    delay_s: float = 0.0
    gave_up: str = ""


def retryable(failure: Failure) -> bool:
    """Whether a retry could fix ``failure`` without repeating anything the caller received."""
    if failure.body_bytes:
        return False
    if failure.kind == "status":
        return failure.status in RETRYABLE_STATUS
    return failure.kind in RETRYABLE_KINDS


def decide(failure: Failure, *, attempts: int, policy: config.RetryPolicy, backoff_s: float,
           remaining_s: float | None) -> Decision:
    """After ``attempts`` attempts, the last of which failed with ``failure``: retry after the
    backoff (or the server's Retry-After when longer), or give up. ``remaining_s``: time left in the
    call's total timeout (None: no limit); a wait that would use it all is not started."""
    if not retryable(failure):
        return Decision(False, gave_up="not_retryable")
    if attempts >= policy.max_attempts:
        return Decision(False, gave_up="max_attempts")
    if failure.retry_after_s is not None and failure.retry_after_s > policy.max_retry_after_s:
        return Decision(False, gave_up="retry_after")
    delay = backoff.honour_retry_after(backoff_s, failure.retry_after_s)
    if remaining_s is not None and delay >= remaining_s:
        return Decision(False, gave_up="deadline")
    return Decision(True, delay)


def delay_s(failures: int, policy: config.RetryPolicy, rng: random.Random) -> float:
    """The jittered wait after the ``failures``-th failed round (``meridian.backoff``) under ``policy``."""
    return backoff.delay_s(failures, policy.backoff_initial_s, policy.backoff_max_s, policy.backoff_multiplier, rng)
