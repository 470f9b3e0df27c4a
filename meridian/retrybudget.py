"""The retry budget (Finagle's RetryBudget, Envoy's retry_budget), one for the router and the client
library: retries are allowed as a share of recent calls instead of a fixed count per call, so when
a service fails everywhere its callers add ``ratio`` more load instead of multiplying it by the
number of attempts.

Each call (its first attempt) deposits ``ratio`` tokens and each retry or hedge withdraws one; both
expire after ``window_s`` (kept in one-second slots). A reserve of ``min_per_s x window_s`` lets a
quiet caller retry at ``min_per_s`` on average. The clock is injected (monotonic seconds)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class RetryBudget:
    def __init__(self, ratio: float = 0.2, min_per_s: float = 3.0, window_s: int = 10,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 <= ratio <= 1:
            raise ValueError(f"retry budget ratio must be in [0, 1], got {ratio}")
        if min_per_s < 0 or window_s < 1:
            raise ValueError(f"retry budget needs min_per_s >= 0 and window_s >= 1 (got {min_per_s}, {window_s})")
        self.ratio = ratio
        self.min_per_s = min_per_s
        self.window_s = int(window_s)
        self._clock = clock
        self._reserve = min_per_s * window_s
        self._slots = [0.0] * self.window_s
        self._slot_second = [-1] * self.window_s

    def _slot(self) -> int:
        second = math.floor(self._clock())
        i = second % self.window_s
        if self._slot_second[i] != second:
            self._slot_second[i] = second
            self._slots[i] = 0.0
        return i

    def _net(self) -> float:
        oldest = math.floor(self._clock()) - self.window_s
        return sum(v for v, s in zip(self._slots, self._slot_second) if s > oldest)

    def on_call(self) -> None:
        """Record one call (its first attempt, not a retry)."""
        self._slots[self._slot()] += self.ratio

    def try_withdraw(self) -> bool:
        """Take one retry; False when the budget is spent."""
        i = self._slot()
        if self._reserve + self._net() < 1.0 - 1e-9:  # float sums of ratio, e.g. 100 x 0.2
            return False
        self._slots[i] -= 1.0
        return True

    @property
    def balance(self) -> float:
        """Retries available now."""
        return self._reserve + self._net()


class NoBudget:
    """No budget (the client's ``budget_ratio: None``): only the attempt limit bounds retries."""

    balance = math.inf

    def on_call(self) -> None:
        """Nothing to record."""

    def try_withdraw(self) -> bool:
        return True
