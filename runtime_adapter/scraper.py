"""SGLang ``/metrics`` -> ``meridian.fleet.ReplicaLoad``.

Parsing uses prometheus_client's own text parser. Gauges (running/queued requests, token usage,
cache hit rate, generation throughput) are read as they are; the TTFT and inter-token-latency
percentiles and the request rate come from the *difference* between the newest scrape and the one
at the start of a sliding window, so they describe the last ``window_s`` seconds rather than the
engine's whole life. Until the scrapes span a full window the percentiles cover everything since
the engine started. A counter that went backwards (the engine restarted) restarts the window.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math

import aiohttp
from prometheus_client import parser as prom_parser

from meridian import fleet
from runtime_adapter import clock as clock_mod

log = logging.getLogger(__name__)

RUNNING = "sglang:num_running_reqs"
QUEUED = "sglang:num_queue_reqs"
TOKEN_USAGE = "sglang:token_usage"
CACHE_HIT_RATE = "sglang:cache_hit_rate"
GEN_THROUGHPUT = "sglang:gen_throughput"
REQUESTS_TOTAL = "sglang:num_requests_total"
TTFT = "sglang:time_to_first_token_seconds"
ITL = "sglang:inter_token_latency_seconds"
QUEUE_TIME = "sglang:queue_time_seconds"


class ScrapeError(RuntimeError):
    """/metrics could not be fetched or parsed; the message says which and why."""


@dataclasses.dataclass(frozen=True)
class Histogram:
    """One histogram summed over its label sets: cumulative counts by upper bound (ascending,
    the last bound +Inf), total count and sum."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        """Observations since ``earlier``; all of them when ``earlier`` is None or later (reset)."""
        if earlier is None or earlier.count > self.count:
            return self
        before = dict(earlier.buckets)
        return Histogram(
            buckets=tuple((le, c - before.get(le, 0.0)) for le, c in self.buckets),
            count=self.count - earlier.count,
            sum=self.sum - earlier.sum,
        )

    def quantile(self, q: float) -> float:
        """The ``q`` quantile by linear interpolation inside the bucket, as PromQL's
        histogram_quantile does; 0.0 with no observations."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile q={q} must be in [0, 1]")
        if self.count <= 0 or not self.buckets:
            return 0.0
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):
                    return lower_bound
                in_bucket = cumulative - lower_count
                if in_bucket <= 0:
                    return le
                return lower_bound + (le - lower_bound) * (rank - lower_count) / in_bucket
            lower_bound, lower_count = le, cumulative
        return lower_bound


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One scrape: scalar samples by sample name (every label set's value, in order) and
    histograms by family name."""

    samples: dict[str, tuple[float, ...]]
    histograms: dict[str, Histogram]

    def total(self, name: str) -> float:
        return float(sum(self.samples.get(name, ())))

    def mean(self, name: str) -> float:
        values = self.samples.get(name, ())
        return float(sum(values) / len(values)) if values else 0.0


def parse(text: str) -> Snapshot:
    """Parse Prometheus text exposition (SGLang's /metrics) into a Snapshot."""
    samples: dict[str, list[float]] = collections.defaultdict(list)
    bucket_acc: dict[str, dict[float, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    count_acc: dict[str, float] = collections.defaultdict(float)
    sum_acc: dict[str, float] = collections.defaultdict(float)
    try:
        families = list(prom_parser.text_string_to_metric_families(text))
    except ValueError as exc:
        raise ScrapeError(f"/metrics is not Prometheus text format: {exc}") from exc
    for family in families:
        if family.type == "histogram":
            for s in family.samples:
                value = float(s.value)
                if not math.isfinite(value):
                    continue  # an engine's NaN must not poison the sums
                if s.name.endswith("_bucket"):
                    le = _bound(s.labels.get("le"))
                    if le is not None:
                        bucket_acc[family.name][le] += value
                elif s.name.endswith("_count"):
                    count_acc[family.name] += value
                elif s.name.endswith("_sum"):
                    sum_acc[family.name] += value
            continue
        for s in family.samples:
            if math.isfinite(float(s.value)):
                samples[s.name].append(float(s.value))
    histograms = {
        name: Histogram(buckets=tuple(sorted(b.items())), count=count_acc.get(name, 0.0), sum=sum_acc.get(name, 0.0))
        for name, b in bucket_acc.items()
    }
    return Snapshot(samples={k: tuple(v) for k, v in samples.items()}, histograms=histograms)


def _bound(le: str | None) -> float | None:
    """A bucket's upper bound, or None for a bucket without a usable one (skipped)."""
    try:
        bound = float(le) if le is not None else math.nan
    except ValueError:
        return None
    return bound if not math.isnan(bound) and bound >= 0 else None


def _count(value: float) -> int:
    """A gauge of things (requests) as a count: finite and >= 0 (an odd engine gauge reads 0)."""
    return int(round(value)) if math.isfinite(value) and value > 0 else 0


def _amount(value: float) -> float:
    return value if math.isfinite(value) and value > 0 else 0.0


class LoadWindow:
    """Scrapes over a sliding window; ``load()`` turns them into a ReplicaLoad."""

    def __init__(self, window_s: float = 60.0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s={window_s} must be > 0 seconds")
        self.window_s = window_s
        self._history: collections.deque[tuple[float, float, Snapshot]] = collections.deque()

    def add(self, snapshot: Snapshot, monotonic_s: float, wall_s: float) -> None:
        if self._history and snapshot.total(REQUESTS_TOTAL) < self._history[-1][2].total(REQUESTS_TOTAL):
            self._history.clear()  # the engine restarted: its counters began again
        self._history.append((monotonic_s, wall_s, snapshot))
        # Keep the newest scrape at or before the window's start as the baseline.
        while len(self._history) >= 2 and self._history[1][0] <= monotonic_s - self.window_s:
            self._history.popleft()

    def clear(self) -> None:
        self._history.clear()

    def load(self) -> fleet.ReplicaLoad:
        if not self._history:
            return fleet.ReplicaLoad()
        t_new, wall_new, new = self._history[-1]
        t_first, _wall, first = self._history[0]
        # Until the scrapes span a whole window, count everything since the engine started (its
        # counters begin at zero), so the first minute after start-up is not blind.
        base_snap = first if len(self._history) >= 2 and t_first <= t_new - self.window_s else None
        requests_per_s = 0.0
        if len(self._history) >= 2 and t_new > t_first:
            requests_per_s = max(0.0, new.total(REQUESTS_TOTAL) - first.total(REQUESTS_TOTAL)) / (t_new - t_first)
        return fleet.ReplicaLoad(
            running_requests=_count(new.total(RUNNING)),
            queued_requests=_count(new.total(QUEUED)),
            kv_cache_usage=_amount(new.mean(TOKEN_USAGE)),
            prefix_cache_hit_rate=_amount(new.mean(CACHE_HIT_RATE)),
            ttft=_percentiles(new, base_snap, TTFT),
            inter_token_latency=_percentiles(new, base_snap, ITL),
            generation_tokens_per_s=_amount(new.total(GEN_THROUGHPUT)),
            requests_per_s=_amount(requests_per_s),
            observed_at=wall_new,
            queue_time=_percentiles(new, base_snap, QUEUE_TIME) if QUEUE_TIME in new.histograms else None,
        )


def _percentiles(new: Snapshot, base: Snapshot | None, name: str) -> fleet.LatencyPercentiles:
    hist = new.histograms.get(name)
    if hist is None:
        return fleet.LatencyPercentiles()
    delta = hist.minus(base.histograms.get(name) if base else None)
    return fleet.LatencyPercentiles(
        p50_ms=_amount(delta.quantile(0.5) * 1000.0),
        p90_ms=_amount(delta.quantile(0.9) * 1000.0),
        p99_ms=_amount(delta.quantile(0.99) * 1000.0),
    )


class Scraper:
    """Fetches ``<endpoint>/metrics`` with a shared aiohttp session and keeps the window."""

    def __init__(self, session: aiohttp.ClientSession, endpoint: str, *, window_s: float = 60.0,
                 timeout_s: float = 5.0, clock: clock_mod.Clock | None = None) -> None:
        self._session = session
        self._url = endpoint.rstrip("/") + "/metrics"
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._clock = clock or clock_mod.SystemClock()
        self.window = LoadWindow(window_s)
        self.last_error = ""

    async def scrape(self) -> fleet.ReplicaLoad:
        """One scrape; raises ScrapeError (also kept in ``last_error``) when it fails."""
        try:
            async with self._session.get(self._url, timeout=self._timeout) as resp:
                body = await resp.text()
                if resp.status != 200:
                    raise ScrapeError(f"GET {self._url} returned {resp.status}: {body[:200]!r}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.last_error = f"GET {self._url} failed: {exc!r}"
            raise ScrapeError(self.last_error) from exc
        except ScrapeError as exc:
            self.last_error = str(exc)
            raise
        self.window.add(parse(body), self._clock.monotonic(), self._clock.time())
        self.last_error = ""
        return self.window.load()

    def load(self) -> fleet.ReplicaLoad:
        return self.window.load()
