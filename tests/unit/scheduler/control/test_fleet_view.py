"""The scheduler's view of the fleet (scheduler.control.fleet) across a change of term."""

from __future__ import annotations

from meridian.fleet import models as fm
from scheduler import testing
from scheduler.control import fleet


def test_reports_from_a_stream_of_an_ended_term_are_ignored_until_hello():
    """Leadership lost clears the view; a report or inventory already on its way from a stream of
    the ended term (before that stream closes) is ignored, not an error that kills the stream's
    reader. The cluster counts again from its next Hello."""
    view = fleet.FleetView(15.0)
    identity = fm.ClusterIdentity("c1", fm.Cloud.AWS, "us-east-1")
    pool = testing.gpu_pool("l4", nodes=2, nodes_max=2)
    replica = fm.ReplicaReport("r1", "chat", "v1", "http://127.0.0.1:9", fm.ReplicaState.READY, pool_id="l4",
                               gpu_count=1)
    view.connect(identity, 0.0)
    view.report("c1", [replica], True, 1.0)
    assert set(view.snapshot(1.0).clusters["c1"].replicas) == {"r1"}

    view.clear()
    view.inventory("c1", [pool], True, 2.0)
    view.report("c1", [replica], True, 2.0)
    assert "c1" not in view.snapshot(2.0).clusters

    view.connect(identity, 3.0)
    view.report("c1", [replica], True, 3.0)
    assert set(view.snapshot(3.0).clusters["c1"].replicas) == {"r1"}
