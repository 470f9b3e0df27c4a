"""What a simulation run measures, and its result as plain data (JSON-ready).

Attainment is the share of requests that met the SLO (TTFT within ``ttft_p99_ms`` and TPOT within
``tpot_p99_ms``); failed requests count as misses. TTFT percentiles come from a log-binned
histogram per client region (40 bins per decade, so a percentile is exact to about 6%) over the
requests that got an answer."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

BINS_PER_DECADE = 40
_MIN_LOG, _MAX_LOG = 0.0, 7.0  # 1 ms .. 10^7 ms
_NBINS = int((_MAX_LOG - _MIN_LOG) * BINS_PER_DECADE)
SERIES_BUCKET_S = 300.0


def bin_of(values_ms: np.ndarray) -> np.ndarray:
    logs = np.log10(np.maximum(values_ms, 10 ** _MIN_LOG))
    return np.minimum(((logs - _MIN_LOG) * BINS_PER_DECADE).astype(np.int64), _NBINS - 1)


def percentile_ms(hist: np.ndarray, q: float) -> float:
    """The q-quantile (0..1) of a histogram, at the geometric middle of its bin; nan when empty."""
    total = float(hist.sum())
    if total <= 0:
        return math.nan
    idx = int(np.searchsorted(np.cumsum(hist), q * total))
    idx = min(idx, _NBINS - 1)
    return 10 ** (_MIN_LOG + (idx + 0.5) / BINS_PER_DECADE)


@dataclasses.dataclass(frozen=True)
class GroupResult:
    requests: float
    met_slo: float
    failed: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float

    @property
    def attainment(self) -> float:
        return self.met_slo / self.requests if self.requests > 0 else math.nan

    def to_dict(self) -> dict:
        return {"requests": round(self.requests), "met_slo": round(self.met_slo), "failed": round(self.failed),
                "attainment": _round(self.attainment, 5), "ttft_p50_ms": _round(self.ttft_p50_ms, 1),
                "ttft_p90_ms": _round(self.ttft_p90_ms, 1), "ttft_p99_ms": _round(self.ttft_p99_ms, 1)}


@dataclasses.dataclass(frozen=True)
class RunResult:
    policy: str
    label: str
    routing: str
    placement: str
    hours: float
    cost_usd: float
    total: GroupResult
    regions: dict[str, GroupResult]
    deployments: dict[str, GroupResult]
    series: dict[str, list[float]]
    stats: dict[str, float]
    notes: tuple[str, ...] = ()
    usage: dict[str, float] = dataclasses.field(default_factory=dict)  # READY replica-hours by USAGE_KEY
    bill: dict = dataclasses.field(default_factory=dict)  # the run's bill (meridian.cost.document.of_window)

    USAGE_KEY = ("deployment", "cloud", "region", "tier", "gpu_type")

    def replica_hours(self) -> list[dict]:
        """Where READY replicas ran: one row per (deployment, cloud, region, tier, GPU type)."""
        return [dict(zip(self.USAGE_KEY, key.split("|"), strict=True), replica_hours=round(h, 3))
                for key, h in sorted(self.usage.items())]

    @property
    def cost_per_hour_usd(self) -> float:
        return self.cost_usd / self.hours if self.hours > 0 else math.nan

    def to_dict(self) -> dict:
        return {"policy": self.policy, "label": self.label, "routing": self.routing, "placement": self.placement,
                "hours": self.hours, "cost_usd": round(self.cost_usd, 2),
                "cost_per_hour_usd": round(self.cost_per_hour_usd, 3), "total": self.total.to_dict(),
                "regions": {k: v.to_dict() for k, v in self.regions.items()},
                "deployments": {k: v.to_dict() for k, v in self.deployments.items()},
                "stats": {k: _round(v, 4) for k, v in self.stats.items()}, "notes": list(self.notes),
                "replica_hours": self.replica_hours(), "bill": self.bill, "series": self.series}


def _round(x: float, digits: int) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, digits)


class Collector:
    """Accumulates one run: per client region and deployment, and 5-minute series."""

    def __init__(self, regions: Sequence[str], deployments: Sequence[str], ticks: int, tick_s: float):
        self.regions = list(regions)
        self.deployments = list(deployments)
        self.r_index = {r: i for i, r in enumerate(self.regions)}
        self.d_index = {d: i for i, d in enumerate(self.deployments)}
        self.tick_s = tick_s
        self.hist = np.zeros((len(self.regions), _NBINS))
        self.counts = np.zeros((len(self.deployments), len(self.regions), 3))  # requests, met, failed
        buckets = max(1, int(math.ceil(ticks * tick_s / SERIES_BUCKET_S)))
        self.bucket_of = [min(buckets - 1, int(k * tick_s // SERIES_BUCKET_S)) for k in range(ticks)]
        self.series = {name: np.zeros(buckets) for name in
                       ("cost_usd", "requests", "met_slo", "failed", "replicas", "gpus", "spot_gpus", "samples")}
        self._rows: list[int] = []
        self._bins: list[np.ndarray] = []
        self._weights: list[np.ndarray] = []
        self.cost_usd = 0.0
        self.failures: dict[str, float] = {}

    def served(self, tick: int, deployment: str, region: str, requests: float, met: float,
               ttft_ms: np.ndarray, probs: np.ndarray) -> None:
        r = self.r_index[region]
        c = self.counts[self.d_index[deployment], r]
        c[0] += requests
        c[1] += met
        b = self.bucket_of[tick]
        self.series["requests"][b] += requests
        self.series["met_slo"][b] += met
        self._rows.append(r)
        self._bins.append(ttft_ms)
        self._weights.append(probs * requests)

    def failed(self, tick: int, deployment: str, region: str, requests: float, cause: str) -> None:
        if requests <= 0:
            return
        c = self.counts[self.d_index[deployment], self.r_index[region]]
        c[0] += requests
        c[2] += requests
        b = self.bucket_of[tick]
        self.series["requests"][b] += requests
        self.series["failed"][b] += requests
        self.failures[cause] = self.failures.get(cause, 0.0) + requests

    def lost(self, tick: int, deployment: str, region: str, requests: float, cause: str) -> None:
        """Requests already counted (when they arrived) that fail later, mid-stream: they become
        failures without being counted twice; the SLO they were credited with, at the stream's
        attainment so far, is taken back."""
        if requests <= 0:
            return
        c = self.counts[self.d_index[deployment], self.r_index[region]]
        requests = min(requests, c[0] - c[2])
        if requests <= 0:
            return
        met = requests * (c[1] / c[0]) if c[0] > 0 else 0.0
        c[1] -= met
        c[2] += requests
        b = self.bucket_of[tick]
        self.series["met_slo"][b] -= met
        self.series["failed"][b] += requests
        self.failures[cause] = self.failures.get(cause, 0.0) + requests

    def fleet(self, tick: int, cost_per_hour_usd: float, replicas: int, gpus: int, spot_gpus: int) -> None:
        cost = cost_per_hour_usd * self.tick_s / 3600.0
        self.cost_usd += cost
        b = self.bucket_of[tick]
        self.series["cost_usd"][b] += cost
        self.series["replicas"][b] += replicas
        self.series["gpus"][b] += gpus
        self.series["spot_gpus"][b] += spot_gpus
        self.series["samples"][b] += 1

    def flush(self) -> None:
        """Move this tick's TTFT points into the histograms (one vectorised add)."""
        if not self._rows:
            return
        rows = np.repeat(np.array(self._rows), [len(b) for b in self._bins])
        np.add.at(self.hist, (rows, bin_of(np.concatenate(self._bins))), np.concatenate(self._weights))
        self._rows.clear()
        self._bins.clear()
        self._weights.clear()

    def _group(self, counts: np.ndarray, hist: np.ndarray) -> GroupResult:
        return GroupResult(float(counts[0]), float(counts[1]), float(counts[2]), percentile_ms(hist, 0.5),
                           percentile_ms(hist, 0.9), percentile_ms(hist, 0.99))

    def result(self, *, policy: str, label: str, routing: str, placement: str, hours: float,
               stats: dict[str, float], notes: Sequence[str] = (), usage: dict[str, float] | None = None,
               bill: dict | None = None) -> RunResult:
        self.flush()
        by_region = self.counts.sum(axis=0)
        regions = {r: self._group(by_region[i], self.hist[i]) for i, r in enumerate(self.regions)
                   if by_region[i][0] > 0}
        empty = np.zeros(_NBINS)
        deployments = {d: self._group(self.counts[i].sum(axis=0), empty) for i, d in enumerate(self.deployments)}
        total = self._group(self.counts.sum(axis=(0, 1)), self.hist.sum(axis=0))
        s = self.series
        samples = np.maximum(s["samples"], 1)
        series = {
            "t_h": [round((i + 0.5) * SERIES_BUCKET_S / 3600.0, 4) for i in range(len(samples))],
            "cost_per_hour_usd": [round(x, 3) for x in (s["cost_usd"] / (samples * self.tick_s / 3600.0))],
            "attainment": [round(m / q, 5) if q > 0 else None for m, q in zip(s["met_slo"], s["requests"], strict=True)],
            "requests": [round(x) for x in s["requests"]],
            "failed": [round(x, 1) for x in s["failed"]],
            "replicas": [round(x, 2) for x in s["replicas"] / samples],
            "gpus": [round(x, 2) for x in s["gpus"] / samples],
            "spot_gpus": [round(x, 2) for x in s["spot_gpus"] / samples],
        }
        stats = dict(stats)
        total_samples = float(s["samples"].sum())
        if total_samples > 0:
            stats["gpus_mean"] = float(s["gpus"].sum()) / total_samples
            stats["spot_gpus_mean"] = float(s["spot_gpus"].sum()) / total_samples
        for cause, n in sorted(self.failures.items()):
            stats[f"failed_{cause}"] = n
        return RunResult(policy, label, routing, placement, hours, self.cost_usd, total, regions, deployments,
                         series, stats, tuple(notes), dict(usage or {}), dict(bill or {}))
