"""The cost above the demand-following bound, split into a steady part and bursts: the parts add
up to the excess, a fault's hour is named first, and the reports print the same figures."""

from __future__ import annotations

import pytest

from meridian.simulate import excess

TICK_S, BUCKET_S = 60.0, 300.0


def _day(bound_usd_h: float, above_usd_h: float, burst: dict[int, float]) -> tuple[list[float], list[float]]:
    """Two hours of 1-minute ticks at a bound of ``bound_usd_h`` and a cost ``above_usd_h`` above it,
    plus ``burst`` ($/h more in the given 5-minute buckets), as (cost per bucket, bound per tick)."""
    ticks, buckets = 120, 24
    bound = [bound_usd_h * TICK_S / 3600.0] * ticks
    cost = [(bound_usd_h + above_usd_h + burst.get(b, 0.0)) * BUCKET_S / 3600.0 for b in range(buckets)]
    return cost, bound


def test_steady_and_bursts_add_up_to_the_excess_and_name_the_fault_hour():
    """$2/h above a $50/h bound all along, and one bucket at 23:35 UTC (a start at 22:00) $60/h above
    that: $4 steady over two hours, $5 of burst, and 23:00 UTC named before 22:00."""
    cost, bound = _day(50.0, 2.0, {19: 60.0})
    a = excess.split(cost, bound, TICK_S, BUCKET_S, start_utc_hour=22.0)
    assert a.median_usd_per_hour == pytest.approx(2.0)
    assert a.steady_usd == pytest.approx(4.0)
    assert a.burst_usd == pytest.approx(5.0)
    assert a.usd == pytest.approx(sum(cost) - sum(bound))
    assert a.steady_usd + a.burst_usd == pytest.approx(a.usd)
    assert [h for h, _ in a.hours] == [23, 22]
    assert a.hours[0][1] == pytest.approx(2.0 + 5.0)
    assert a.burst_share == pytest.approx(5.0 / 9.0)


def test_buckets_below_the_bound_count_as_steady_and_the_hours_wrap_past_midnight():
    """A bucket under the bound (a policy that served less) lowers the steady part, never makes a
    negative burst; hours run 23:00 then 00:00 UTC."""
    cost, bound = _day(10.0, 1.0, {0: -3.0})
    a = excess.split(cost, bound, TICK_S, BUCKET_S, start_utc_hour=23.0)
    assert a.burst_usd == pytest.approx(0.0)
    assert a.steady_usd == pytest.approx(a.usd) == pytest.approx(2.0 - 3.0 * BUCKET_S / 3600.0)
    assert {h for h, _ in a.hours} == {23, 0}


def test_a_run_at_the_bound_has_no_excess_and_says_so():
    cost, bound = _day(10.0, 0.0, {})
    a = excess.split(cost, bound, TICK_S, BUCKET_S)
    assert a.usd == pytest.approx(0.0, abs=1e-9) and a.hours == ()
    assert excess.text(a) == "It does not run above it over the run."


def test_a_partial_last_bucket_is_weighed_by_its_own_length():
    """Seven 1-minute ticks fill one 5-minute bucket and two minutes of the next: both run $1/h
    above the bound, so the median rate is $1/h, all of it steady."""
    bound = [0.5] * 7
    cost = [5 * 0.5 + 5 / 60.0, 2 * 0.5 + 2 / 60.0]
    a = excess.split(cost, bound, TICK_S, BUCKET_S)
    assert a.median_usd_per_hour == pytest.approx(1.0)
    assert a.usd == pytest.approx(7 / 60.0)
    assert a.burst_usd == pytest.approx(0.0)


def test_bad_units_are_refused_naming_them():
    with pytest.raises(ValueError, match="tick_s and bucket_s"):
        excess.split([1.0], [1.0], 0.0, BUCKET_S)
