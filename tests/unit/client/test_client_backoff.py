"""The client's jittered exponential backoff between attempts (meridian.backoff under its RetryPolicy)."""

from __future__ import annotations

import random

from meridian import backoff
from meridian.client import config, retry


def test_ceilings_double_up_to_the_cap():
    """The ceiling starts at backoff_initial_s, multiplies per failure and stops at backoff_max_s."""
    policy = config.RetryPolicy(backoff_initial_s=0.25, backoff_max_s=2.0, backoff_multiplier=2.0)
    assert [backoff.ceiling_s(n, policy.backoff_initial_s, policy.backoff_max_s, policy.backoff_multiplier) for n in range(1, 7)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert backoff.ceiling_s(10_000, policy.backoff_initial_s, policy.backoff_max_s, policy.backoff_multiplier) == 2.0  # no overflow after a long outage


def test_delays_are_jittered_within_the_ceiling():
    """Delays spread over [0.1, 1] x the ceiling (never 0), reproducibly for a seeded rng."""
    policy = config.RetryPolicy()
    draws = [retry.delay_s(3, policy, random.Random(seed)) for seed in range(200)]
    top = backoff.ceiling_s(3, policy.backoff_initial_s, policy.backoff_max_s, policy.backoff_multiplier)
    assert all(top * 0.1 <= d <= top for d in draws)
    assert max(draws) - min(draws) > top * 0.5
    assert retry.delay_s(2, policy, random.Random(7)) == retry.delay_s(2, policy, random.Random(7))
