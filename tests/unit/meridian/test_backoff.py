"""The one backoff (meridian.backoff): jittered exponential delays with a cap, an injected rng, and
Retry-After honoured; agents, router, client and runtime adapter all wait by it."""

from __future__ import annotations

import email.utils
import random

import pytest

from meridian import backoff
from runtime_adapter import config as adapter_config


def test_backoff_grows_to_its_ceiling_with_jitter():
    """Successive delays stay within [min_fraction x ceiling, ceiling], the ceiling doubling up to max_s."""
    b = backoff.Backoff(initial_s=0.5, max_s=8.0, rng=random.Random(1))
    ceilings = []
    for _ in range(8):
        ceiling = b.ceiling_s()
        delay = b.next_delay_s()
        assert 0.1 * ceiling <= delay <= ceiling
        ceilings.append(ceiling)
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]


def test_backoff_reset_and_determinism():
    """Equal seeds give equal delays, and reset() starts again from initial_s."""
    a = backoff.Backoff(rng=random.Random(7))
    b = backoff.Backoff(rng=random.Random(7))
    assert [a.next_delay_s() for _ in range(5)] == [b.next_delay_s() for _ in range(5)]
    a.reset()
    assert a.ceiling_s() == a.initial_s


@pytest.mark.parametrize("kwargs, field", [({"initial_s": 0}, "initial_s"), ({"max_s": 0.1}, "max_s"),
                                           ({"multiplier": 0.5}, "multiplier"), ({"min_fraction": 2}, "min_fraction")])
def test_backoff_rejects_bad_settings(kwargs, field):
    """A bad setting is refused with its name in the message."""
    with pytest.raises(ValueError, match=field):
        backoff.Backoff(**kwargs)


def test_retry_after_is_honoured_up_to_the_cap():
    """A server's Retry-After lengthens the wait (never shortens it), up to the backoff's max_s."""
    b = backoff.Backoff(initial_s=0.5, max_s=8.0, rng=random.Random(3))
    assert b.next_delay_s(retry_after_s=4.0) == 4.0
    assert b.next_delay_s(retry_after_s=60.0) == 8.0
    assert b.next_delay_s(retry_after_s=0.0) <= b.ceiling_s()
    assert backoff.honour_retry_after(2.0, None) == 2.0 and backoff.honour_retry_after(2.0, 5.0) == 5.0


def test_parse_retry_after():
    """Retry-After is read as seconds or as an HTTP-date; unreadable values are ignored; never negative."""
    now = 1_700_000_000.0
    assert backoff.parse_retry_after("3", now) == 3.0
    assert backoff.parse_retry_after(" 1.5 ", now) == 1.5
    assert backoff.parse_retry_after("-4", now) == 0.0
    assert backoff.parse_retry_after(email.utils.formatdate(now + 7, usegmt=True), now) == pytest.approx(7.0)
    assert backoff.parse_retry_after(email.utils.formatdate(now - 7, usegmt=True), now) == 0.0
    assert backoff.parse_retry_after("soon", now) is None
    assert backoff.parse_retry_after(None, now) is None
    assert backoff.parse_retry_after("1e400", now) == float("inf")  # longer than any limit: gives up


def test_the_adapters_restart_delays_are_the_ceilings_without_jitter():
    """The runtime adapter waits the kernel's ceiling before each restart (one process: no jitter)."""
    cfg = adapter_config.SupervisorConfig(restart_backoff_initial_s=1.0, restart_backoff_max_s=10.0,
                                          restart_backoff_multiplier=3.0)
    assert [cfg.backoff_s(n) for n in range(1, 5)] == [1.0, 3.0, 9.0, 10.0]
