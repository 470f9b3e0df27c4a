"""Retry budget (Finagle's TokenRetryBudget, Envoy's retry_budget): retries are allowed as a share
of recent requests instead of a fixed count per request, so a failing fleet does not see its load
multiplied by the retry count.

Each original request deposits ``ratio`` tokens and each retry withdraws one; deposits and
withdrawals expire after ``window_s`` (kept in one-second slots). On top, a reserve of
``min_per_s x window_s`` lets a quiet router retry at ``min_per_s`` on average. The clock is
injected."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class RetryBudget:
    def __init__(self, ratio: float = 0.2, min_per_s: float = 3.0, window_s: int = 10,
                 clock: Callable[[], float] = time.monotonic):
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

    def on_request(self) -> None:
        """Record one original (non-retry) request."""
        self._slots[self._slot()] += self.ratio

    def try_withdraw(self) -> bool:
        """Take one retry from the budget; False when the budget is spent."""
        i = self._slot()
        if self._reserve + self._net() < 1.0 - 1e-9:  # float sums of ratio, e.g. 100 x 0.2
            return False
        self._slots[i] -= 1.0
        return True

    @property
    def balance(self) -> float:
        """Retries available now."""
        return self._reserve + self._net()
