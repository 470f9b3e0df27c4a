"""Event tracking: stock-out backoff doubles per failure and resets when the pool grows; spot notices."""

from __future__ import annotations

from meridian.fleet import models as fm
from scheduler.control import events


def test_stock_out_backoff_doubles_and_resets():
    """Each new stock-out after the backoff lapsed doubles the wait (capped); the same stock-out reported
    again during the backoff changes nothing; growth resets it."""
    tracker = events.EventTracker(base_s=60, max_s=200)
    ev = fm.Event(fm.EventKind.STOCK_OUT, "l4", message="InsufficientInstanceCapacity")
    assert tracker.on_event("c1", ev, 0.0) is True
    assert tracker.backoff["c1/l4"].until_s == 60
    tracker.on_event("c1", ev, 30.0)
    assert tracker.backoff["c1/l4"].until_s == 60
    assert "c1/l4" not in tracker.no_growth(61.0)
    tracker.on_event("c1", ev, 61.0)
    assert tracker.backoff["c1/l4"].until_s == 181
    tracker.on_event("c1", ev, 200.0)
    assert tracker.backoff["c1/l4"].until_s == 400  # capped at max_s
    assert "InsufficientInstanceCapacity" in tracker.no_growth(200.0)["c1/l4"]
    tracker.pool_grew("c1/l4")
    assert tracker.no_growth(200.0) == {}


def test_spot_notice_dooms_the_replica_until_it_is_gone():
    """A spot notice marks its replica doomed (default deadline two minutes) until it stops being
    reported; a notice without a replica id only asks for a new plan."""
    tracker = events.EventTracker(base_s=60, max_s=600)
    assert tracker.on_event("c1", fm.Event(fm.EventKind.SPOT_INTERRUPTION, "spot", "r1"), 100.0)
    assert tracker.doomed_at("r1") == 220.0
    assert tracker.on_event("c1", fm.Event(fm.EventKind.SPOT_INTERRUPTION, "spot"), 100.0)
    assert set(tracker.doomed) == {"r1"}
    tracker.prune({"r2"})
    assert tracker.doomed_at("r1") is None


def test_other_events_are_logged_and_crashes_wake_the_loop():
    """A replica crash asks for a round; throttling alone does not."""
    tracker = events.EventTracker(base_s=60, max_s=600)
    assert tracker.on_event("c1", fm.Event(fm.EventKind.REPLICA_CRASH, replica_id="r1"), 0.0) is True
    assert tracker.on_event("c1", fm.Event(fm.EventKind.THROTTLED, message="slow down"), 0.0) is False
