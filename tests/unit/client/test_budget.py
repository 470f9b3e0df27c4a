"""The client's retry budget: a share of recent calls plus a reserve, expiring with the window."""

from __future__ import annotations

from meridian.client import budget


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_budget_is_a_share_of_calls_plus_a_reserve():
    """With ratio 0.2 and no reserve, 10 calls allow 2 retries and no third."""
    clock = Clock()
    b = budget.RetryBudget(0.2, 0.0, 10, clock)
    for _ in range(10):
        b.on_call()
    assert [b.try_withdraw() for _ in range(3)] == [True, True, False]


def test_reserve_and_expiry():
    """The reserve (min_per_s x window) allows retries without calls; deposits expire after the window."""
    clock = Clock()
    b = budget.RetryBudget(0.5, 0.1, 10, clock)  # reserve: 1 retry
    assert b.try_withdraw() and not b.try_withdraw()
    clock.now += 11  # the withdrawal has expired
    assert b.try_withdraw()
    for _ in range(4):
        b.on_call()
    assert b.balance == 2.0
    clock.now += 11
    assert b.balance == 1.0


def test_no_budget_never_refuses():
    """budget_ratio None: only max_attempts limits retries."""
    b = budget.NoBudget()
    assert all(b.try_withdraw() for _ in range(1000))
