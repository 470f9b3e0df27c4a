"""Parsing SGLang /metrics text into ReplicaLoad, with windowed histogram percentiles."""

from __future__ import annotations

import pytest

from runtime_adapter import scraper

LABELS = 'engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
TOK = 'engine_type="unified",model_name="m"'


def histogram(name: str, labels: str, counts: dict[str, float]) -> list[str]:
    """Exposition lines of one histogram from its cumulative bucket counts (the sum is made up)."""
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{{labels},le="{le}"}} {count}' for le, count in counts.items()]
    total = list(counts.values())[-1]
    return lines + [f"{name}_count{{{labels}}} {total}", f"{name}_sum{{{labels}}} 1.0"]


def metrics_text(*, running: int, queued: int, requests: float, ttft_counts: dict[str, float],
                 itl_counts: dict[str, float] | None = None, queue_counts: dict[str, float] | None = None) -> str:
    """SGLang-shaped exposition text with a TTFT histogram given as cumulative bucket counts."""
    lines = [
        "# HELP sglang:num_running_reqs The number of running requests.",
        "# TYPE sglang:num_running_reqs gauge",
        f"sglang:num_running_reqs{{{LABELS}}} {running}",
        "# TYPE sglang:num_queue_reqs gauge",
        f"sglang:num_queue_reqs{{{LABELS}}} {queued}",
        "# TYPE sglang:token_usage gauge",
        f"sglang:token_usage{{{LABELS}}} 0.25",
        "# TYPE sglang:cache_hit_rate gauge",
        f"sglang:cache_hit_rate{{{LABELS}}} 0.5",
        "# TYPE sglang:gen_throughput gauge",
        f"sglang:gen_throughput{{{LABELS}}} 1234.5",
        "# TYPE sglang:num_requests_total counter",
        f'sglang:num_requests_total{{{TOK},is_streaming="false"}} {requests}',
        "# TYPE sglang:time_to_first_token_seconds histogram",
    ]
    total = 0.0
    for le, count in ttft_counts.items():
        lines.append(f'sglang:time_to_first_token_seconds_bucket{{{TOK},is_streaming="false",le="{le}"}} {count}')
        total = count
    lines.append(f'sglang:time_to_first_token_seconds_count{{{TOK},is_streaming="false"}} {total}')
    lines.append(f'sglang:time_to_first_token_seconds_sum{{{TOK},is_streaming="false"}} {total * 0.3}')
    if itl_counts:
        lines += histogram("sglang:inter_token_latency_seconds", TOK, itl_counts)
    if queue_counts:
        lines += histogram("sglang:queue_time_seconds", LABELS, queue_counts)
    return "\n".join(lines) + "\n"


def test_gauges_map_to_replica_load():
    """Running/queued requests, token usage, cache hit rate and throughput come from the gauges."""
    window = scraper.LoadWindow(60)
    window.add(scraper.parse(metrics_text(running=7, queued=3, requests=10, ttft_counts={"0.1": 0, "+Inf": 0})), 0.0, 1000.0)
    load = window.load()
    assert (load.running_requests, load.queued_requests, load.outstanding) == (7, 3, 10)
    assert load.kv_cache_usage == 0.25 and load.prefix_cache_hit_rate == 0.5
    assert load.generation_tokens_per_s == 1234.5 and load.observed_at == 1000.0


def test_quantiles_interpolate_inside_buckets():
    """Quantiles follow PromQL's histogram_quantile (linear within the bucket)."""
    h = scraper.Histogram(buckets=((0.1, 0.0), (0.2, 50.0), (0.4, 100.0), (float("inf"), 100.0)), count=100, sum=20)
    assert h.quantile(0.5) == pytest.approx(0.2)
    assert h.quantile(0.25) == pytest.approx(0.15)
    assert h.quantile(0.99) == pytest.approx(0.2 + 0.2 * 49 / 50)
    assert scraper.Histogram(buckets=(), count=0, sum=0).quantile(0.5) == 0.0
    with pytest.raises(ValueError, match="q="):
        h.quantile(1.5)


def test_percentiles_cover_only_the_window():
    """Percentiles come from bucket deltas since the window's start, not the engine's lifetime."""
    window = scraper.LoadWindow(window_s=10)
    # Early: 100 fast requests (all under 0.1 s).
    window.add(scraper.parse(metrics_text(running=0, queued=0, requests=100,
                                          ttft_counts={"0.1": 100, "1": 100, "10": 100, "+Inf": 100})), 0.0, 0.0)
    window.add(scraper.parse(metrics_text(running=0, queued=0, requests=100,
                                          ttft_counts={"0.1": 100, "1": 100, "10": 100, "+Inf": 100})), 10.0, 10.0)
    # Then 10 slow requests (1..10 s) within the last 10 s.
    window.add(scraper.parse(metrics_text(running=2, queued=0, requests=110,
                                          ttft_counts={"0.1": 100, "1": 100, "10": 110, "+Inf": 110})), 20.0, 20.0)
    load = window.load()
    assert load.ttft.p50_ms == pytest.approx(5500.0)
    assert load.ttft.p99_ms > 9000.0
    assert load.requests_per_s == pytest.approx(1.0)


def test_counter_reset_restarts_the_window():
    """After an engine restart (counters went down) the old scrapes are dropped."""
    window = scraper.LoadWindow(60)
    window.add(scraper.parse(metrics_text(running=0, queued=0, requests=500,
                                          ttft_counts={"1": 500, "+Inf": 500})), 0.0, 0.0)
    window.add(scraper.parse(metrics_text(running=0, queued=0, requests=4,
                                          ttft_counts={"1": 0, "2": 4, "+Inf": 4})), 5.0, 5.0)
    load = window.load()
    assert 1000.0 < load.ttft.p50_ms <= 2000.0
    assert load.requests_per_s == 0.0


def test_inter_token_latency_percentiles():
    """The ITL histogram feeds inter_token_latency percentiles."""
    window = scraper.LoadWindow(60)
    window.add(scraper.parse(metrics_text(running=1, queued=0, requests=1, ttft_counts={"+Inf": 0},
                                          itl_counts={"0.01": 90, "0.02": 100, "+Inf": 100})), 0.0, 0.0)
    assert 10.0 < window.load().inter_token_latency.p99_ms <= 20.0


def test_garbage_is_a_scrape_error():
    """Text that is not Prometheus exposition raises ScrapeError."""
    with pytest.raises(scraper.ScrapeError):
        scraper.parse("sglang:num_running_reqs{ not valid\n")


def test_empty_window_is_zero_load():
    """No scrape yet: an all-zero load."""
    assert scraper.LoadWindow(5).load().outstanding == 0
    with pytest.raises(ValueError, match="window_s"):
        scraper.LoadWindow(0)


def test_young_history_covers_the_engine_life():
    """Before the scrapes span a full window, percentiles include what the first scrape already saw."""
    window = scraper.LoadWindow(window_s=60)
    counts = {"0.1": 0, "1": 10, "+Inf": 10}
    window.add(scraper.parse(metrics_text(running=0, queued=0, requests=10, ttft_counts=counts)), 0.0, 0.0)
    window.add(scraper.parse(metrics_text(running=0, queued=0, requests=10, ttft_counts=counts)), 2.0, 2.0)
    assert 100.0 < window.load().ttft.p50_ms <= 1000.0


def test_queue_time_comes_from_its_histogram_and_is_none_when_not_exported():
    """sglang:queue_time_seconds gives the queue time percentiles; an engine without the
    histogram reports none (the scheduler then cannot tell queueing from prefill)."""
    window = scraper.LoadWindow(60)
    window.add(scraper.parse(metrics_text(running=1, queued=0, requests=10, ttft_counts={"1": 10, "+Inf": 10},
                                          queue_counts={"0.01": 5, "0.1": 10, "+Inf": 10})), 0.0, 0.0)
    queue = window.load().queue_time
    assert queue is not None
    assert queue.p50_ms == pytest.approx(10.0)
    assert queue.p99_ms == pytest.approx(10.0 + 90.0 * 4.9 / 5)
    window = scraper.LoadWindow(60)
    window.add(scraper.parse(metrics_text(running=1, queued=0, requests=10, ttft_counts={"1": 10, "+Inf": 10})), 0.0, 0.0)
    assert window.load().queue_time is None
