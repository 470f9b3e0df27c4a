"""A client's retry budget (Envoy's retry_budget, Finagle's RetryBudget): retries are allowed as a
share of recent calls, so when a service fails everywhere its clients add ``ratio`` more load
instead of multiplying it by ``max_attempts``.

Each call deposits ``ratio`` tokens and each retry or hedge withdraws one; both expire after
``window_s`` (kept in one-second slots). A reserve of ``min_per_s x window_s`` lets a quiet client
retry at ``min_per_s`` on average. The clock is injected (monotonic seconds)."""

from __future__ import annotations

import math
from collections.abc import Callable


class RetryBudget:
    def __init__(self, ratio: float, min_per_s: float, window_s: int, clock: Callable[[], float]) -> None:
        self.ratio = ratio
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
        """Record one call (its first attempt)."""
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
    """``budget_ratio: None``: only ``max_attempts`` limits retries."""

    balance = math.inf

    def on_call(self) -> None:
        """Nothing to record."""

    def try_withdraw(self) -> bool:
        return True
