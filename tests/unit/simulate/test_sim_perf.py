"""The replica model agrees with the shared capacity model and behaves like a queue."""

from __future__ import annotations

import numpy as np
import pytest

from meridian import spec
from meridian.simulate import attainable, defaults, perf
from scheduler.solver import throughput


@pytest.fixture(scope="module")
def deployments():
    specs = spec.load_files([defaults.examples_dir() / p for p in defaults.DEFAULT_SPECS])
    return {d.metadata.name: d.spec for d in specs.of_kind("ModelDeployment")}


def _model(dep, gpu_type):
    return perf.model_for(dep, gpu_type, prompt_cv=1.0, tpot_sigma=0.05)


@pytest.mark.parametrize(("name", "gpu_type"), [("chat-8b", "L4"), ("chat-8b", "H100"), ("chat-8b", "A10"),
                                                ("reasoning-70b", "H100")])
def test_at_the_solvers_capacity_the_sla_holds(deployments, name, gpu_type):
    """At the request rate the solver counts a replica for (capacity model), the replica is not
    saturated, its mean TPOT is within the SLA and the load costs at most 1% of requests their TTFT
    (against the same replica idle). Idle, at least 98% meet it: the capacity model sizes replicas
    for the mean prompt, so the longest ~1% of prompts (5x the mean and more, with CV 1) can miss on
    a small GPU however lightly it is loaded (``attainable`` reports that share)."""
    dep = deployments[name]
    rps = throughput.assess(dep, gpu_type).capacity_rps
    assert rps and rps > 0
    m = _model(dep, gpu_type)
    s = m.steady(rps, 0.0, 60.0)
    assert not s.saturated and s.backlog_next == 0
    assert s.tpot_ms <= dep.sla.tpot_p99_ms
    values, probs = m.server_ttft_points(s)
    within = sum(p for v, p in zip(values, probs, strict=True) if v <= dep.sla.ttft_p99_ms)
    idle, _ = attainable.idle_share(m, 0.0)
    assert idle >= 0.98
    assert within >= idle - 0.01
    assert m.tpot_ok(s) >= 0.8


def test_little_law_and_monotone_latency(deployments):
    """Concurrency = rate x time in system, and TTFT p99 and TPOT grow with the rate."""
    m = _model(deployments["chat-8b"], "H100")
    last_p99 = last_tpot = 0.0
    for rps in (0.5, 2.0, 5.0, 10.0, 15.0):
        s = m.steady(rps, 0.0, 60.0)
        assert s.running == pytest.approx(rps * m.per_request_s(s.running), rel=1e-6)
        p99 = m.server_ttft_p99_ms(s)
        assert p99 >= last_p99 and s.tpot_ms >= last_tpot
        last_p99, last_tpot = p99, s.tpot_ms


def test_overload_builds_a_backlog_and_drops_beyond_the_queue(deployments):
    """Beyond the most a replica can serve, a backlog builds tick after tick, waits grow, and what
    exceeds the engine's queue is dropped."""
    m = _model(deployments["chat-8b"], "L4")
    rate = 3.0 * m.mu_max
    s1 = m.steady(rate, 0.0, 60.0)
    assert s1.saturated and s1.backlog_next > 0
    s2 = m.steady(rate, s1.backlog_next, 60.0)
    assert s2.wait_ms > s1.wait_ms
    backlog, dropped = 0.0, 0.0
    for _ in range(20):
        s = m.steady(rate, backlog, 60.0)
        backlog, dropped = s.backlog_next, dropped + s.dropped
    assert backlog <= m.max_queued and dropped > 0
    assert m.steady(0.5 * m.mu_max, backlog, 60.0).backlog_next < backlog  # drains once load falls


def test_embedding_replica_is_a_prefill_queue(deployments):
    """An embedding replica has no TPOT; its wait grows with utilisation of the prefill."""
    m = _model(deployments["embed"], "L4")
    assert m.is_embedding and m.tpot_ok(m.steady(10.0, 0.0, 60.0)) == 1.0
    low, high = m.steady(0.1 * m.mu_max, 0.0, 60.0), m.steady(0.9 * m.mu_max, 0.0, 60.0)
    assert high.wait_ms > low.wait_ms


def test_cold_start_grows_with_weights(deployments):
    """A 70B replica takes longer to become ready than an 8B one."""
    small = perf.cold_start_s(_model(deployments["chat-8b"], "H100"), 60.0, 1.5)
    big = perf.cold_start_s(_model(deployments["reasoning-70b"], "H100"), 60.0, 1.5)
    assert 60.0 < small < big



def test_prompt_points_keep_the_mean_and_resolve_the_tail():
    """The lognormal's points average to the mean, rise with the slice, spread as its CV asks (the
    points' CV is a little under the curve's: each is a slice's mean) and reach far into the tail,
    where a p99 target is decided; recorded lengths give each slice's own mean."""
    f = perf._lognormal_factors(1.0)
    assert float(f @ perf.PROMPT_PROBS) == pytest.approx(1.0)
    assert list(f) == sorted(f)
    cv = float(np.sqrt(((f - 1.0) ** 2) @ perf.PROMPT_PROBS))
    assert 0.8 < cv <= 1.0
    assert f[-1] > 8.0  # the longest thousandth: more than 8x the mean with CV 1
    lengths = list(range(1, 10_001))
    g = perf.recorded_factors(lengths)
    assert g[-1] * 5000.5 == pytest.approx(np.mean(lengths[9990:]), rel=1e-6)
    assert g[0] * 5000.5 == pytest.approx(np.mean(lengths[:2500]), rel=1e-6)
    with pytest.raises(ValueError, match="at least"):
        perf.recorded_factors([100.0] * 10)


def test_no_prompt_is_longer_than_the_context_length():
    """An embedding model with a 512-token context and 512-token prompts on average has no spread
    left (every prompt is 512 tokens); a cap above the mean cuts the tail to it and keeps the mean."""
    f = perf._lognormal_factors(1.0)
    assert perf.capped(f, 1.0) == (1.0,) * len(f)
    g = np.asarray(perf.capped(f, 4.0))
    assert g.max() == pytest.approx(4.0) and float(g @ perf.PROMPT_PROBS) == pytest.approx(1.0)
    assert list(g) == sorted(g)
    assert perf.capped(f, 100.0) == tuple(f)
    dep = spec.load_files([defaults.examples_dir() / p for p in defaults.DEFAULT_SPECS]).of_kind("ModelDeployment")
    embed = next(d.spec for d in dep if d.spec.runtime.is_embedding and d.spec.runtime.context_length)
    m = perf.model_for(embed, "L4", prompt_cv=1.0, tpot_sigma=0.05)
    assert m.prompt_factors.max() * embed.workload.prompt_tokens_mean <= embed.runtime.context_length + 1e-6


def test_queue_time_is_the_wait_before_prefill_and_grows_with_load(deployments):
    """The queue time a simulated replica reports (its sglang:queue_time_seconds) is the wait part
    of its TTFT: at most the TTFT at every quantile, growing with the rate, and under saturation
    (a backlog) near the whole TTFT but the prefill."""
    m = _model(deployments["chat-8b"], "L4")
    last = (0.0, 0.0, 0.0)
    for share in (0.05, 0.3, 0.6, 0.9):
        s = m.steady(share * m.mu_max, 0.0, 60.0)
        queue = m.queue_time_ms(s, (0.5, 0.9, 0.99))
        assert queue[0] <= queue[1] <= queue[2]
        assert queue[2] <= m.server_ttft_p99_ms(s)
        assert all(q >= prev for q, prev in zip(queue, last, strict=True))
        last = queue
    s = m.steady(3.0 * m.mu_max, 0.0, 60.0)
    s = m.steady(3.0 * m.mu_max, s.backlog_next, 60.0)
    assert s.saturated
    q50, = m.queue_time_ms(s, (0.5,))
    assert q50 > 0.5 * s.wait_ms and q50 > last[2]
