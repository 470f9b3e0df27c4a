"""The router's traffic tally per replica revision: one sample per (model, client region, revision),
in-flight demand counted once per (model, client region), and an unsent window merged back."""

from __future__ import annotations

from router import traffic


def test_samples_are_kept_per_revision_and_in_flight_is_counted_once():
    """Requests answered by two revisions give two samples with their own errors; the pair's requests
    in flight ride on one of them only, so demand summed over samples is unchanged."""
    acc = traffic.TrafficAccumulator(clock=lambda: 100.0)
    acc.in_flight[("m", "na-east")] = 3
    acc.record("m", "na-east", 10, 5, False, 20.0, "rev-a")
    acc.record("m", "na-east", 10, 5, True, 90.0, "rev-b")
    acc.record("m", "na-east", 10, 5, True, 80.0, "rev-b")
    report = acc.take("r", "na-east")
    by_rev = {s.revision: s for s in report.samples}
    assert set(by_rev) == {"rev-a", "rev-b"}
    assert (by_rev["rev-a"].requests, by_rev["rev-a"].errors) == (1, 0)
    assert (by_rev["rev-b"].requests, by_rev["rev-b"].errors, by_rev["rev-b"].ttft_p99_ms) == (2, 2, 90.0)
    assert sum(s.in_flight for s in report.samples) == 3


def test_in_flight_alone_is_reported_without_a_revision_and_restore_keeps_revisions():
    """Waiting demand with no finished request is one revision-less sample; a restored window adds
    back to the revision it came from."""
    acc = traffic.TrafficAccumulator(clock=lambda: 100.0)
    acc.in_flight[("m", "eu-west")] = 2
    (sample,) = acc.take("r", "na-east").samples
    assert (sample.revision, sample.in_flight, sample.requests) == ("", 2, 0)
    acc.in_flight[("m", "eu-west")] = 0
    acc.record("m", "eu-west", 1, 1, True, None, "rev-a")
    acc.restore(acc.take("r", "na-east"))
    acc.record("m", "eu-west", 1, 1, False, None, "rev-a")
    (sample,) = acc.take("r", "na-east").samples
    assert (sample.revision, sample.requests, sample.errors) == ("rev-a", 2, 1)
