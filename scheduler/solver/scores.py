"""Score plugins: extra USD/h per replica on a candidate, added to the objective beside the price.

Weights are small against prices on purpose: they break ties and nudge, while hard limits (SLA,
quotas) are filters and constraints."""

from __future__ import annotations

import pydantic

from meridian import fleet
from scheduler.solver import framework


class _LatencyArgs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    usd_per_ms_hour: float = pydantic.Field(default=0.002, ge=0, le=10)


@framework.register_score("latency")
class LatencyPenalty:
    """Prefer replicas near the clients they serve: usd_per_ms_hour x RTT per replica."""

    name = "latency"

    def __init__(self, **args: float) -> None:
        self.args = _LatencyArgs(**args)

    def key(self, view: framework.DeploymentView) -> object:
        return ()

    def score(self, c: framework.Candidate) -> float:
        return self.args.usd_per_ms_hour * c.cycle.latency_map.rtt_ms(c.client_region, c.pool.region)


class _SpotArgs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    usd_per_replica_hour: float = pydantic.Field(default=0.01, ge=0, le=100)


@framework.register_score("spot_risk")
class SpotRisk:
    """Expected cost of a spot interruption (restart, lost cache), per spot replica."""

    name = "spot_risk"

    def __init__(self, **args: float) -> None:
        self.args = _SpotArgs(**args)

    def key(self, view: framework.DeploymentView) -> object:
        return ()

    def score(self, c: framework.Candidate) -> float:
        return self.args.usd_per_replica_hour if c.pool.tier is fleet.Tier.SPOT else 0.0
