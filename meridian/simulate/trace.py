"""The traffic trace: request arrivals per tick and stream (deployment, client region), drawn once
from the scenario's seed so every compared policy replays exactly the same requests."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from meridian.simulate import scenario as scenario_mod


@dataclasses.dataclass(frozen=True)
class Stream:
    deployment: str
    client_region: str


@dataclasses.dataclass(frozen=True)
class Trace:
    """``arrivals[tick, stream]``: requests that arrive in that tick; ``rate_rps`` the mean rate."""

    streams: tuple[Stream, ...]
    arrivals: np.ndarray
    rate_rps: np.ndarray
    tick_s: float

    @property
    def ticks(self) -> int:
        return int(self.arrivals.shape[0])

    def total_requests(self) -> int:
        return int(self.arrivals.sum())

    def mean_rps(self, deployment: str) -> dict[str, float]:
        """Mean requests/s per client region of ``deployment`` over the whole trace."""
        return {s.client_region: float(self.rate_rps[:, i].mean())
                for i, s in enumerate(self.streams) if s.deployment == deployment}


def diurnal(local_hour: float, peak_local_hour: float, trough_share: float) -> float:
    """Share of the peak rate at ``local_hour``: 1 at the peak, ``trough_share`` 12 h away."""
    phase = 2.0 * math.pi * (local_hour - peak_local_hour) / 24.0
    return trough_share + (1.0 - trough_share) * 0.5 * (1.0 + math.cos(phase))


def rate_at(sc: scenario_mod.Scenario, shape: scenario_mod.TrafficShape, region: str, t_s: float) -> float:
    """Mean requests/s of (shape's deployment, region) at ``t_s`` seconds into the run."""
    utc_h = sc.start_utc_hour + t_s / 3600.0
    local = (utc_h + sc.client_utc_offsets_h[region]) % 24.0
    rate = shape.peak_rps[region] * diurnal(local, shape.peak_local_hour, shape.trough_share)
    at_h = t_s / 3600.0
    for spike in sc.spikes:
        if spike.deployment not in (None, shape.deployment) or spike.client_region not in (None, region):
            continue
        if spike.at_h <= at_h < spike.at_h + spike.duration_min / 60.0:
            rate *= spike.multiplier
    return rate


def build(sc: scenario_mod.Scenario) -> Trace:
    """Poisson arrivals at the mid-tick rate of every stream, from ``sc.seed``."""
    streams = tuple(Stream(shape.deployment, region) for shape in sc.traffic for region in sorted(shape.peak_rps))
    shapes = [shape for shape in sc.traffic for _ in sorted(shape.peak_rps)]
    ticks = sc.ticks
    rate = np.zeros((ticks, len(streams)))
    for k in range(ticks):
        mid = (k + 0.5) * sc.tick_s
        for i, (s, shape) in enumerate(zip(streams, shapes, strict=True)):
            rate[k, i] = rate_at(sc, shape, s.client_region, mid)
    rng = np.random.default_rng(sc.seed)
    arrivals = rng.poisson(rate * sc.tick_s).astype(np.int64)
    return Trace(streams, arrivals, rate, sc.tick_s)
