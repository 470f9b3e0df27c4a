"""Outlier ejection, return, panic mode and active-check thresholds (clock passed in)."""

from __future__ import annotations

from router import endpoints, health, testing


def ep(rid: str) -> endpoints.Endpoint:
    return endpoints.Endpoint(testing.replica(rid, 1000), "m", ewma_decay_s=10.0, default_cost_ms=10.0, now=0.0)


def test_consecutive_failures_eject_then_return_with_growing_time():
    """5 failures in a row eject for 30 s, the second ejection lasts 60 s; the replica returns by itself."""
    det = health.OutlierDetector(health.OutlierSettings(consecutive_failures=5, base_ejection_s=30, max_ejection_s=300))
    a, b, c = ep("a"), ep("b"), ep("c")
    peers = [a, b, c]
    for _ in range(4):
        assert not det.on_failure(a, peers, 100.0)
    assert det.on_failure(a, peers, 100.0)
    assert a.ejected(100.0) and a.ejected(129.0) and not a.ejected(130.0)
    for _ in range(5):
        det.on_failure(a, peers, 200.0)
    assert a.ejected(259.0) and not a.ejected(260.0)


def test_success_resets_the_failure_streak():
    """Failures must be consecutive: a success in between restarts the count."""
    det = health.OutlierDetector(health.OutlierSettings(consecutive_failures=3))
    a = ep("a")
    det.on_failure(a, [a, ep("b")], 0.0)
    det.on_failure(a, [a, ep("b")], 0.0)
    det.on_success(a, 0.0)
    assert not det.on_failure(a, [a, ep("b")], 0.0)
    assert not a.ejected(0.0)


def test_max_ejected_share_is_respected():
    """With 50% max ejection, only 2 of 4 replicas can be ejected at once (at least one always may)."""
    det = health.OutlierDetector(health.OutlierSettings(consecutive_failures=1, max_ejected_percent=50))
    peers = [ep(str(i)) for i in range(4)]
    assert [det.on_failure(e, peers, 0.0) for e in peers] == [True, True, False, False]
    lone = [ep("x")]
    assert health.OutlierDetector(health.OutlierSettings(consecutive_failures=1, max_ejected_percent=10)).on_failure(
        lone[0], lone, 0.0)


def test_candidates_panic_mode_and_exclusions():
    """Below the panic threshold all routable replicas are candidates; tried ones are excluded."""
    a, b, c = ep("a"), ep("b"), ep("c")
    a.ejected_until = b.ejected_until = 50.0
    pool, panic = health.candidates([a, b, c], 10.0, 50.0)
    assert panic and pool == [a, b, c]
    pool, panic = health.candidates([a, b, c], 60.0, 50.0)
    assert not panic and pool == [a, b, c]
    c.active_up = False
    pool, panic = health.candidates([a, b, c], 60.0, 50.0, exclude=(a,))
    assert pool == [b]
    pool, _ = health.candidates([a, b, c], 60.0, 50.0, exclude=(a, b))
    assert pool == [c]  # everything healthy was tried: an unhealthy-marked replica is the last resort


def test_active_check_thresholds():
    """3 failed checks mark a replica down; 2 successes mark it up again."""
    changes = []
    checker = health.ActiveChecker(health.ActiveSettings(), session=None, endpoints_fn=list,
                                   on_change=lambda e, up: changes.append(up))
    a = ep("a")
    checker.record(a, False)
    checker.record(a, False)
    assert a.active_up
    checker.record(a, False)
    assert not a.active_up
    checker.record(a, True)
    assert not a.active_up
    checker.record(a, True)
    assert a.active_up and changes == [False, True]


def test_a_retry_leaves_the_regions_already_tried_and_the_sla_reach_only_when_it_must():
    """After a failure in ap-south-1 a retry goes to another region; with nothing elsewhere it may
    go back to the same region. The first attempt stays within max_rtt_ms while any replica is."""
    near = [endpoints.Endpoint(testing.replica(f"m{i}", 1000 + i, "ap-south-1"), "m", ewma_decay_s=10.0,
                               default_cost_ms=10.0, now=0.0) for i in range(3)]
    far = endpoints.Endpoint(testing.replica("irl", 2000, "eu-west-1"), "m", ewma_decay_s=10.0,
                             default_cost_ms=10.0, now=0.0)
    assert health.elsewhere(near[1:] + [far], (near[0],)) == [far]
    assert health.elsewhere(near[1:], (near[0],)) == near[1:]
    rtt = {"ap-south-1": 5.0, "eu-west-1": 110.0}
    assert health.within_reach(near + [far], "ap-south", 90.0, lambda c, r: rtt[r]) == near
    assert health.within_reach([far], "ap-south", 90.0, lambda c, r: rtt[r]) == [far]
    assert health.within_reach(near + [far], "ap-south", 0.0, lambda c, r: rtt[r]) == near + [far]
