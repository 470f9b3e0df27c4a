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
