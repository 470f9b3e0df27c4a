"""Where a policy's cost above the demand-following bound goes: a steady part and bursts.

The bound (``bound.py``) is per tick; the run's cost is per 5-minute bucket (``metrics.SERIES_BUCKET_S``).
Per bucket, the excess is the policy's cost minus the bound's. Its median rate ($/h) over the run's
buckets is the **steady** distance: what the policy pays above the bound most of the time (headroom
for its utilisation target and spot credit, whole replicas and nodes, hysteresis). What a bucket
pays above that rate is a **burst** (a fault and the re-placement after it, a scale-up ahead of a
spike, a node held while its replicas move). Per bucket, steady = min(excess, median rate x bucket
hours) and burst = the rest, so steady + bursts = the excess over the run exactly. ``hours`` names
the clock hours (UTC) with the largest excess, where to look first."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from meridian.simulate import metrics

TOP_HOURS = 3
CENT = 0.005  # $: less than half a cent above the bound is at the bound (float sums)


@dataclasses.dataclass(frozen=True)
class AboveBound:
    """``usd``: the cost above the bound over the run (= ``steady_usd`` + ``burst_usd``);
    ``median_usd_per_hour``: the median 5-minute excess, per hour (the steady part is at most that
    rate in every bucket); ``hours``: (UTC hour, $ above the bound in that hour), largest first."""

    usd: float
    steady_usd: float
    burst_usd: float
    median_usd_per_hour: float
    hours: tuple[tuple[int, float], ...]

    @property
    def burst_share(self) -> float:
        """Bursts' share of the excess (nan when the run is not above the bound)."""
        return self.burst_usd / self.usd if self.usd > CENT else math.nan

    def to_dict(self) -> dict:
        return {"usd": round(self.usd, 4), "steady_usd": round(self.steady_usd, 4),
                "burst_usd": round(self.burst_usd, 4), "median_usd_per_hour": round(self.median_usd_per_hour, 4),
                "hours": [{"utc_hour": h, "usd": round(u, 4)} for h, u in self.hours]}


def split(cost_by_bucket: Sequence[float], bound_by_tick: Sequence[float], tick_s: float, bucket_s: float,
          start_utc_hour: float = 0.0) -> AboveBound:
    """The excess of a run whose cost per ``bucket_s`` bucket is ``cost_by_bucket`` ($ in each) over
    a bound of ``bound_by_tick`` ($ in each ``tick_s`` tick, from the same start)."""
    if tick_s <= 0 or bucket_s <= 0:
        raise ValueError(f"tick_s and bucket_s must be > 0 seconds, got {tick_s} and {bucket_s}")
    ticks = len(bound_by_tick)
    buckets = len(cost_by_bucket)
    if buckets == 0 or ticks == 0:
        return AboveBound(0.0, 0.0, 0.0, 0.0, ())
    of = np.minimum(buckets - 1, metrics.bucket_of(ticks, tick_s, bucket_s))
    bound = np.bincount(of, weights=np.asarray(bound_by_tick, dtype=float), minlength=buckets)
    hours = np.bincount(of, minlength=buckets) * tick_s / 3600.0
    excess = np.asarray(cost_by_bucket, dtype=float) - bound
    timed = hours > 0
    rate = float(np.median(excess[timed] / hours[timed])) if timed.any() else 0.0
    steady = np.minimum(excess, rate * hours)
    burst = excess - steady
    hour = np.floor(start_utc_hour + np.arange(buckets) * bucket_s / 3600.0 + 1e-9).astype(int) % 24
    by_hour = np.bincount(hour, weights=excess, minlength=24)
    top = sorted(((h, float(e)) for h, e in enumerate(by_hour) if e > CENT), key=lambda he: (-he[1], he[0]))[:TOP_HOURS]
    return AboveBound(float(excess.sum()), float(steady.sum()), float(burst.sum()), rate, tuple(top))


def text(a: AboveBound) -> str:
    """One line for the reports."""
    if a.usd <= CENT:
        return "It does not run above it over the run."
    hours = ", ".join(f"{h:02d}:00 UTC ${u:,.0f}" for h, u in a.hours)
    return (f"Of that, ${a.steady_usd:,.0f} is steady (up to the median 5-minute distance, "
            f"${a.median_usd_per_hour:,.2f}/h: headroom, whole replicas and nodes) and ${a.burst_usd:,.0f} "
            f"({100.0 * a.burst_share:.0f}%) comes in bursts above it (faults and re-placements, scale-ups, nodes "
            f"held while replicas move); costliest hours: {hours or '-'}.")
