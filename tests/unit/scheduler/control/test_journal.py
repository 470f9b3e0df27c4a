"""The recent-events ring (scheduler.control.journal): bounded, ordered, readable from a sequence
number, and fed by the event tracker and the fleet view as they handle what happens."""

from __future__ import annotations

import pytest

from meridian.fleet import models as fm
from scheduler.control import events, fleet, journal


def test_ring_keeps_the_newest_entries_and_says_what_a_late_reader_missed():
    """Past its capacity the ring drops the oldest; ``after`` reads from a sequence number and
    ``dropped`` counts what a reader that fell behind can no longer get."""
    ring = journal.Journal(capacity=3)
    for i in range(5):
        ring.record(float(i), "replica_crash", subject=f"r{i}")
    assert [e.seq for e in ring.after()] == [3, 4, 5]
    assert [e.subject for e in ring.after(4)] == ["r4"]
    assert [e.seq for e in ring.after(0, limit=2)] == [4, 5]
    assert ring.dropped(0) == 2 and ring.dropped(1) == 1 and ring.dropped(2) == 0 and ring.dropped(5) == 0
    assert ring.last_seq == 5
    ring.clear()
    assert ring.after() == [] and ring.dropped(5) == 0
    assert ring.record(9.0, "cluster_lost").seq == 6


def test_unknown_kind_and_bad_capacity_are_refused_by_name():
    """A kind outside KINDS is an error naming the valid ones; a capacity below one is refused."""
    with pytest.raises(ValueError, match="unknown journal kind 'oops'.*stock_out"):
        journal.Journal().record(0.0, "oops")
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        journal.Journal(capacity=0)


def test_event_tracker_journals_agent_events_and_one_stock_out_per_backoff():
    """Spot notices, crashes and throttling are journalled as they come; a stock-out once when its
    backoff starts (not again while it lasts), a quota refusal under its own kind."""
    ring = journal.Journal()
    tracker = events.EventTracker(base_s=60, max_s=600, journal=ring)
    tracker.on_event("c1", fm.Event(fm.EventKind.SPOT_INTERRUPTION, "spot", "r1", "reclaimed"), 10.0)
    tracker.on_event("c1", fm.Event(fm.EventKind.STOCK_OUT, "l4", message="InsufficientInstanceCapacity"), 11.0)
    tracker.on_event("c1", fm.Event(fm.EventKind.STOCK_OUT, "l4", message="InsufficientInstanceCapacity"), 12.0)
    tracker.on_event("c2", fm.Event(fm.EventKind.QUOTA_EXCEEDED, "a100", message="quota"), 13.0)
    tracker.on_event("c2", fm.Event(fm.EventKind.REPLICA_CRASH, "a100", "r7", "exit code -9"), 14.0)
    got = [(e.kind, e.cluster_id, e.subject, e.at_s) for e in ring.after()]
    assert got == [("spot_interruption", "c1", "r1", 10.0), ("stock_out", "c1", "c1/l4", 11.0),
                   ("quota_exceeded", "c2", "c2/a100", 13.0), ("replica_crash", "c2", "r7", 14.0)]
    assert "not grown for 60s" in ring.after()[1].message
    assert ring.after()[3].message == "exit code -9"


def test_fleet_view_journals_a_lost_cluster_and_its_return():
    """An agent silent past lost_after_s is journalled as lost (its replicas are re-placed), and
    again when it connects back."""
    ring = journal.Journal()
    view = fleet.FleetView(10.0, journal=ring)
    ident = fm.ClusterIdentity("c1", fm.Cloud.AWS, "us-east-1")
    view.connect(ident, 0.0)
    assert view.sweep(5.0) == [] and ring.after() == []
    assert view.sweep(12.0) == ["c1"]
    view.connect(ident, 20.0)
    assert [(e.kind, e.cluster_id, e.at_s) for e in ring.after()] == [("cluster_lost", "c1", 12.0),
                                                                       ("cluster_back", "c1", 20.0)]
    assert "silent for 12s" in ring.after()[0].message
