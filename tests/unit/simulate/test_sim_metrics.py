"""The simulator's request accounting."""

from __future__ import annotations

import numpy as np
import pytest

from meridian.simulate import metrics


def test_a_request_lost_mid_stream_is_one_failure_not_a_second_request():
    """100 requests served (80 within the SLO), then 10 of them cut mid-stream when their replica
    dies: still 100 requests, 10 failed, and the SLO credit of those 10 taken back."""
    col = metrics.Collector(["na-east"], ["chat"], ticks=2, tick_s=60.0)
    col.served(0, "chat", "na-east", 100.0, 80.0, np.array([100.0]), np.array([1.0]))
    col.lost(1, "chat", "na-east", 10.0, "replica_died")
    requests, met, failed = col.counts[0, 0]
    assert (requests, failed) == (100.0, 10.0)
    assert met == pytest.approx(72.0)
    assert col.failures == {"replica_died": 10.0}
    assert col.series["requests"].sum() == 100.0
    col.lost(1, "chat", "na-east", 500.0, "replica_died")  # never more failures than requests
    assert col.counts[0, 0][2] == 100.0


def test_requests_are_kept_per_window_with_every_miss_by_cause_and_failure_by_moment():
    """A request served beyond max_rtt_ms, or late, counts against steady state or its window by
    cause; failures carry their cause, window and hour; the region view explains a region under 99%."""
    from meridian.simulate import windows  # noqa: PLC0415

    lookup = windows.Lookup([windows.Window("outage us-east-1 1h", 60, 75)])
    col = metrics.Collector(["ap-south"], ["chat"], ticks=120, tick_s=60.0, lookup=lookup)
    col.served(0, "chat", "ap-south", 100.0, 0.0, np.array([100.0]), np.array([1.0]), {"max_rtt": 100.0})
    col.served(1, "chat", "ap-south", 100.0, 98.0, np.array([100.0]), np.array([1.0]), {"ttft": 2.0})
    col.failed(61, "chat", "ap-south", 50.0, "no_replica")
    col.served(70, "chat", "ap-south", 10.0, 10.0, np.array([100.0]), np.array([1.0]))
    result = col.result(policy="p", label="p", routing="latency", placement="solver", hours=2.0, stats={})
    cell = result.cells[("chat", "ap-south")]
    assert cell.steady == {"requests": 200.0, "met": 98.0, "failed": 0.0, "ttft": 2.0, "max_rtt": 100.0}
    assert cell.windows["outage us-east-1 1h"] == {"requests": 60.0, "met": 10.0, "failed": 50.0, "no_replica": 50.0}
    assert result.failures == (("no_replica", "outage us-east-1 1h", 1, 50.0),)
    (view,) = metrics.region_view(result)
    assert view.steady_attainment == pytest.approx(0.49) and view.window_attainment == pytest.approx(10 / 60)
    assert view.why == ("chat/ap-south: 51.00% of 200 steady-state requests missed the SLO: served beyond "
                        "max_rtt_ms 50.00%, TTFT over target 1.00%")


def test_windows_come_from_the_scenarios_faults_and_spikes_with_recovery(make_scenario):
    """An outage, a preemption wave and a spike narrowed to one deployment and region each make a
    window that lasts until RECOVERY_MIN after it ends; other streams stay in steady state."""
    from meridian.simulate import windows  # noqa: PLC0415

    sc = make_scenario(outages=[{"at_h": 0.5, "duration_h": 0.25, "region": "us-east-1"}],
                       spikes=[{"at_h": 1.5, "duration_min": 10, "multiplier": 3, "deployment": "chat-8b",
                                "client_region": "na-east"}],
                       spot={"waves": [{"at_h": 1.0, "region": "eu-west-1", "share": 0.5}]})
    found = {w.name: w for w in windows.from_scenario(sc)}
    assert (found["outage us-east-1 0.5h"].start, found["outage us-east-1 0.5h"].end) == (30, 45 + 15)
    assert (found["preemption wave eu-west-1 1h"].start, found["preemption wave eu-west-1 1h"].end) == (60, 76)
    lookup = windows.Lookup(list(found.values()))
    assert lookup.names[lookup.of(95, "chat-8b", "na-east")] == "spike chat-8b/na-east x3 1.5h"
    assert lookup.of(95, "chat-8b", "eu-west") == 0 and lookup.of(20, "embed", "na-east") == 0
