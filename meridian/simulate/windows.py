"""Which stretches of a simulated day are not steady state: the scenario's faults (a region
outage, a spot preemption wave) and its traffic spikes, each from its start until ``RECOVERY_MIN``
after it ends (the fleet's own recovery: a node joins in ``provisioning_delay_s``, a 70B replica
loads in about 4 minutes, the scheduler's round comes every ``control_interval_s``). A request
counts in the first window that holds its tick (and its deployment and client region, for a spike
that names them); the rest is steady state. The warm-up before the day is not measured at all, so
a simulated day has no cold start. Pure: the scenario in, a lookup out."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from meridian.simulate import scenario as scenario_mod

STEADY = "steady"
RECOVERY_MIN = 15.0


@dataclasses.dataclass(frozen=True)
class Window:
    """Ticks [start, end) of one fault or spike; ``deployment``/``client_region`` narrow it (None: all)."""

    name: str
    start: int
    end: int
    deployment: str | None = None
    client_region: str | None = None

    def holds(self, tick: int, deployment: str, region: str) -> bool:
        return (self.start <= tick < self.end and self.deployment in (None, deployment)
                and self.client_region in (None, region))


def from_scenario(sc: scenario_mod.Scenario) -> list[Window]:
    """The scenario's outages, preemption waves and spikes as windows, in time order."""
    tick = sc.tick_at
    extra = int(math.ceil(RECOVERY_MIN * 60.0 / sc.tick_s))
    out = [Window(f"outage {o.region} {o.at_h:g}h", tick(o.at_h), tick(o.at_h + o.duration_h) + extra)
           for o in sc.outages]
    out += [Window(f"preemption wave {w.region or w.cluster} {w.at_h:g}h", tick(w.at_h), tick(w.at_h) + 1 + extra)
            for w in sc.spot.waves]
    for s in sc.spikes:
        who = "/".join(x for x in (s.deployment, s.client_region) if x) or "all"
        out.append(Window(f"spike {who} x{s.multiplier:g} {s.at_h:g}h", tick(s.at_h),
                          tick(s.at_h + s.duration_min / 60.0) + extra, s.deployment, s.client_region))
    return sorted(out, key=lambda w: (w.start, w.name))


class Lookup:
    """Window index of a (tick, deployment, region): 0 is steady state, i + 1 the i-th window."""

    def __init__(self, windows: Sequence[Window]):
        self.windows = list(windows)
        self.names = [STEADY] + [w.name for w in self.windows]

    def of(self, tick: int, deployment: str, region: str) -> int:
        for i, w in enumerate(self.windows):
            if w.holds(tick, deployment, region):
                return i + 1
        return 0
