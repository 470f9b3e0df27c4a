"""The retry budget (router and client library) allows about ratio x calls retries, plus a small
reserve, within a window."""

from __future__ import annotations

import pytest

from meridian import retrybudget as retry


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_budget_is_a_share_of_requests():
    """With ratio 0.2 and no reserve, 100 requests allow 20 retries, not more."""
    clock = Clock()
    budget = retry.RetryBudget(ratio=0.2, min_per_s=0, window_s=10, clock=clock)
    assert not budget.try_withdraw()
    for _ in range(100):
        budget.on_call()
    granted = sum(budget.try_withdraw() for _ in range(50))
    assert granted == 20


def test_reserve_allows_a_few_retries_when_quiet():
    """min_per_s x window retries are available without traffic, and they come back after the window."""
    clock = Clock()
    budget = retry.RetryBudget(ratio=0.2, min_per_s=1, window_s=5, clock=clock)
    assert sum(budget.try_withdraw() for _ in range(10)) == 5
    clock.now += 6
    assert budget.try_withdraw()


def test_deposits_expire_after_the_window():
    """Deposits older than the window no longer pay for retries."""
    clock = Clock()
    budget = retry.RetryBudget(ratio=0.5, min_per_s=0, window_s=3, clock=clock)
    for _ in range(10):
        budget.on_call()
    clock.now += 4
    assert not budget.try_withdraw()


def test_bad_settings_are_refused():
    """Ratios outside [0, 1] name the problem."""
    with pytest.raises(ValueError, match="ratio"):
        retry.RetryBudget(ratio=2)


def test_reserve_and_expiry():
    """The reserve (min_per_s x window) allows retries without calls; deposits expire after the window."""
    clock = Clock()
    b = retry.RetryBudget(0.5, 0.1, 10, clock)  # reserve: 1 retry
    assert b.try_withdraw() and not b.try_withdraw()
    clock.now += 11  # the withdrawal has expired
    assert b.try_withdraw()
    for _ in range(4):
        b.on_call()
    assert b.balance == 2.0
    clock.now += 11
    assert b.balance == 1.0


def test_no_budget_never_refuses():
    """No budget (the client's budget_ratio None): only the attempt limit bounds retries."""
    b = retry.NoBudget()
    assert all(b.try_withdraw() for _ in range(1000))
