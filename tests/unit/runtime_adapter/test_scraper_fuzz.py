"""Fuzzing the /metrics parser and the load it yields: any text parses or raises ScrapeError, and
any parsed scrape turns into a ReplicaLoad of finite, non-negative figures; well-formed expositions
read back exactly, with percentiles inside the histogram's range and ordered."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime_adapter import scraper

NAMES = [scraper.RUNNING, scraper.QUEUED, scraper.TOKEN_USAGE, scraper.CACHE_HIT_RATE, scraper.GEN_THROUGHPUT,
         scraper.REQUESTS_TOTAL]
VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**20), 10**20),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "abc", ""]))


def line(name: str, value, labels: str = "") -> str:
    return f"{name}{labels} {value}\n"


@st.composite
def expositions(draw) -> str:
    """Text that looks like SGLang's /metrics, with hostile values, labels and families mixed in."""
    out = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["gauge", "histogram", "junk", "counter"]))
        if kind == "junk":
            out.append(draw(st.text(max_size=40)) + "\n")
            continue
        name = draw(st.sampled_from(NAMES + [scraper.TTFT, scraper.ITL, "other_metric"]))
        out.append(f"# TYPE {name} {kind}\n")
        if kind == "histogram":
            for le in draw(st.lists(st.sampled_from(["0.1", "1", "+Inf", "abc", "-1", "NaN"]), max_size=4)):
                out.append(line(f"{name}_bucket", draw(VALUES), f'{{le="{le}"}}'))
            if draw(st.booleans()):
                out.append(line(f"{name}_bucket", draw(VALUES)))  # a bucket without its le label
            out.append(line(f"{name}_count", draw(VALUES)))
            out.append(line(f"{name}_sum", draw(VALUES)))
        else:
            out.append(line(name, draw(VALUES), draw(st.sampled_from(["", '{tp_rank="0"}', '{a="b"}']))))
    return "".join(out)


def assert_sane(load) -> None:
    numbers = [load.running_requests, load.queued_requests, load.kv_cache_usage, load.prefix_cache_hit_rate,
               load.generation_tokens_per_s, load.requests_per_s, *vars(load.ttft).values(),
               *vars(load.inter_token_latency).values()]
    assert all(math.isfinite(n) and n >= 0 for n in numbers), load


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(st.text(max_size=200), expositions()))
def test_any_text_parses_or_raises_scrape_error_and_loads_are_sane(text):
    """No input makes the parser or the load computation raise anything but ScrapeError, and every
    load it yields is finite and non-negative (what the scheduler plans with)."""
    try:
        snap = scraper.parse(text)
    except scraper.ScrapeError:
        return
    window = scraper.LoadWindow(60.0)
    window.add(snap, 0.0, 1000.0)
    window.add(snap, 61.0, 1061.0)
    assert_sane(window.load())


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(0, 1000), min_size=1, max_size=6), running=st.integers(0, 500),
       usage=st.floats(0, 1))
def test_well_formed_expositions_read_back_exactly(counts, running, usage):
    """Gauges read back as written; histogram percentiles lie within the bucket bounds and grow with q."""
    bounds = [0.01 * 2 ** i for i in range(len(counts))]
    cumulative = [sum(counts[: i + 1]) for i in range(len(counts))]
    text = (f"# TYPE {scraper.RUNNING} gauge\n{scraper.RUNNING} {running}\n"
            f"# TYPE {scraper.TOKEN_USAGE} gauge\n{scraper.TOKEN_USAGE} {usage!r}\n"
            f"# TYPE {scraper.TTFT} histogram\n"
            + "".join(f'{scraper.TTFT}_bucket{{le="{b}"}} {c}\n' for b, c in zip(bounds, cumulative, strict=True))
            + f'{scraper.TTFT}_bucket{{le="+Inf"}} {cumulative[-1]}\n{scraper.TTFT}_count {cumulative[-1]}\n'
            f"{scraper.TTFT}_sum 1.0\n")
    snap = scraper.parse(text)
    assert snap.total(scraper.RUNNING) == running and snap.mean(scraper.TOKEN_USAGE) == usage
    hist = snap.histograms[scraper.TTFT]
    qs = [hist.quantile(q) for q in (0.0, 0.5, 0.9, 0.99, 1.0)]
    assert qs == sorted(qs) and all(0.0 <= v <= bounds[-1] * (1 + 1e-9) for v in qs)  # float rounding


def test_regressions_found_by_fuzzing():
    """A negative gauge read as a negative request count, a NaN gauge raised ValueError (int of NaN)
    and a histogram bucket without `le` raised KeyError, each out of the replica's supervision loop."""
    cases = [f"{scraper.RUNNING} -1\n", f"{scraper.RUNNING} NaN\n", f"{scraper.QUEUED} +Inf\n",
             f"# TYPE {scraper.TTFT} histogram\n{scraper.TTFT}_bucket 3\n{scraper.TTFT}_count 3\n"]
    for text in cases:
        window = scraper.LoadWindow(60.0)
        window.add(scraper.parse(text), 0.0, 1000.0)
        load = window.load()
        assert_sane(load)
        assert (load.running_requests, load.queued_requests) == (0, 0)
