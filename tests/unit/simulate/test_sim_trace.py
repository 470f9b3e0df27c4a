"""The traffic trace: seeded, diurnal in each client region's local time, spikes where scripted."""

from __future__ import annotations

import numpy as np
import pytest

from meridian.simulate import trace


def test_same_seed_same_arrivals_other_seed_differs(make_scenario):
    """Two traces from one seed are identical; another seed draws other arrivals."""
    a, b = trace.build(make_scenario()), trace.build(make_scenario())
    assert np.array_equal(a.arrivals, b.arrivals)
    c = trace.build(make_scenario(seed=4))
    assert not np.array_equal(a.arrivals, c.arrivals)


def test_diurnal_peaks_at_the_local_peak_hour(make_scenario):
    """The rate is the peak at peak_local_hour local time and trough_share of it 12 hours away."""
    assert trace.diurnal(14.0, 14.0, 0.25) == pytest.approx(1.0)
    assert trace.diurnal(2.0, 14.0, 0.25) == pytest.approx(0.25)
    sc = make_scenario(start_utc_hour=0.0, hours=24.0)
    shape = sc.traffic[0]
    # na-east is UTC-5: its 14:00 local peak is 19:00 UTC.
    assert trace.rate_at(sc, shape, "na-east", 19 * 3600.0) == pytest.approx(shape.peak_rps["na-east"])
    assert trace.rate_at(sc, shape, "na-east", 7 * 3600.0) == pytest.approx(0.25 * shape.peak_rps["na-east"])


def test_spike_multiplies_only_its_stream_and_window(make_scenario):
    """A spike scales the named deployment and region during its window only."""
    spike = {"at_h": 1.0, "duration_min": 30.0, "multiplier": 3.0, "deployment": "chat-8b", "client_region": "na-east"}
    sc = make_scenario(spikes=[spike])
    chat, embed = sc.traffic[0], sc.traffic[2]
    base = make_scenario()
    inside, outside = 1.25 * 3600.0, 1.75 * 3600.0
    assert trace.rate_at(sc, chat, "na-east", inside) == pytest.approx(3 * trace.rate_at(base, chat, "na-east", inside))
    assert trace.rate_at(sc, chat, "na-east", outside) == pytest.approx(trace.rate_at(base, chat, "na-east", outside))
    assert trace.rate_at(sc, chat, "eu-west", inside) == pytest.approx(trace.rate_at(base, chat, "eu-west", inside))
    assert trace.rate_at(sc, embed, "na-east", inside) == pytest.approx(trace.rate_at(base, embed, "na-east", inside))


def test_arrivals_follow_the_rate(make_scenario):
    """Poisson arrivals over a day add up to the integrated rate within a few percent."""
    sc = make_scenario(hours=24.0)
    t = trace.build(sc)
    expected = t.rate_rps.sum() * sc.tick_s
    assert t.total_requests() == pytest.approx(expected, rel=0.02)
