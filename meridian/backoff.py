"""The one backoff: jittered exponential delays with a cap, the randomness injected (tests and the
simulator are deterministic), and a server's ``Retry-After`` honoured.

"Full jitter" (a uniform draw below the exponential ceiling, with a floor of ``min_fraction`` of
it so a retry never comes at once) spreads the retries of many clients or agents that failed
together, for example after a scheduler restart or a lost region, instead of having them return in
lockstep. Used by the agents (stream reconnects, cloud API retries, Kubernetes watches), the
router's route watch, the client library and the runtime adapter's restarts (without jitter: one
process, nothing to spread)."""

from __future__ import annotations

import dataclasses
import email.utils
import math
import random

__all__ = ["Backoff", "ceiling_s", "delay_s", "honour_retry_after", "parse_retry_after", "MIN_FRACTION"]

# The lowest delay as a share of the ceiling: never retry at once, even on an unlucky draw.
MIN_FRACTION = 0.1


def ceiling_s(failures: int, initial_s: float, max_s: float, multiplier: float = 2.0) -> float:
    """The upper bound of the wait after the ``failures``-th consecutive failure (1-based):
    ``initial_s x multiplier^(failures-1)``, at most ``max_s``."""
    # Cap the exponent so a long outage cannot overflow the float.
    exponent = min(max(failures - 1, 0), 64)
    return min(max_s, initial_s * multiplier ** exponent)


def delay_s(failures: int, initial_s: float, max_s: float, multiplier: float, rng: random.Random,
            min_fraction: float = MIN_FRACTION) -> float:
    """The wait after the ``failures``-th failure: uniform(min_fraction, 1) x its ceiling."""
    top = ceiling_s(failures, initial_s, max_s, multiplier)
    return rng.uniform(top * min_fraction, top)


def honour_retry_after(delay: float, retry_after_s: float | None, cap_s: float = math.inf) -> float:
    """The wait when the server also said ``Retry-After``: the longer of the two, at most ``cap_s``."""
    if retry_after_s is None:
        return delay
    return min(max(delay, retry_after_s), cap_s)


def parse_retry_after(value: str | None, now_unix_s: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP-date, RFC 9110);
    None when absent or unreadable; never negative (an infinite ask stays infinite)."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP-date is GMT
            return None
        seconds = when.timestamp() - now_unix_s
    if math.isnan(seconds):
        return None
    return max(0.0, seconds)


@dataclasses.dataclass
class Backoff:
    """Delays for successive failed attempts, as state: attempt n (0-based) waits
    uniform(min_fraction, 1) x min(max_s, initial_s x multiplier^n). ``reset()`` after a success
    starts again from ``initial_s``."""

    initial_s: float = 0.5
    max_s: float = 30.0
    multiplier: float = 2.0
    min_fraction: float = MIN_FRACTION
    rng: random.Random = dataclasses.field(default_factory=random.Random)
    attempts: int = 0

    def __post_init__(self) -> None:
        if self.initial_s <= 0:
            raise ValueError(f"initial_s must be > 0, got {self.initial_s}")
        if self.max_s < self.initial_s:
            raise ValueError(f"max_s ({self.max_s}) must be >= initial_s ({self.initial_s})")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.min_fraction <= 1:
            raise ValueError(f"min_fraction must be in [0, 1], got {self.min_fraction}")

    def ceiling_s(self) -> float:
        """The upper bound of the next delay."""
        return ceiling_s(self.attempts + 1, self.initial_s, self.max_s, self.multiplier)

    def next_delay_s(self, retry_after_s: float | None = None) -> float:
        """The delay before the next attempt (the server's ``retry_after_s`` when longer, up to
        ``max_s``); counts one more failed attempt."""
        self.attempts += 1
        drawn = delay_s(self.attempts, self.initial_s, self.max_s, self.multiplier, self.rng, self.min_fraction)
        return honour_retry_after(drawn, retry_after_s, self.max_s)

    def reset(self) -> None:
        self.attempts = 0
