"""Jittered exponential backoff between a call's attempts, as a pure function of the attempt
number and an injected random source (tests and simulations are deterministic).

"Full jitter" (a uniform draw below the exponential ceiling, with a floor of a tenth of it) spreads
the retries of many clients that failed together, for example when a region went down, instead of
having them return in lockstep."""

from __future__ import annotations

import random

from meridian.client import config

# The lowest delay as a share of the ceiling: never retry at once, even on an unlucky draw.
MIN_FRACTION = 0.1


def ceiling_s(failures: int, policy: config.RetryPolicy) -> float:
    """The upper bound of the wait after the ``failures``-th failed attempt (1-based)."""
    # Cap the exponent so a long run of failures cannot overflow the float.
    exponent = min(max(failures - 1, 0), 64)
    return min(policy.backoff_max_s, policy.backoff_initial_s * policy.backoff_multiplier ** exponent)


def delay_s(failures: int, policy: config.RetryPolicy, rng: random.Random) -> float:
    """The wait after the ``failures``-th failed attempt: uniform(0.1, 1) x its ceiling."""
    top = ceiling_s(failures, policy)
    return rng.uniform(top * MIN_FRACTION, top)
