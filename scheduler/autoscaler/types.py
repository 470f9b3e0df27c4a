"""What an autoscaling policy reads and returns: frozen values, no I/O.

A policy sees one deployment at one instant (``AutoscaleContext``, with the clock injected as
``now_s``), plus the state it returned last time (``AutoscaleState``), and returns a ``Decision`` and
the next state. The service keeps the state between calls; the simulator and the tests drive the
same function with a simulated clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from meridian import fleet
from meridian.spec import deployment as deployment_spec


@dataclasses.dataclass(frozen=True)
class RegionTraffic:
    """Router-side demand from one client region over the last report window.

    ``in_flight`` counts requests the routers hold (sent to a replica or waiting for one): it is the
    only signal when a deployment has no replica (scale from zero)."""

    client_region: str
    requests_per_s: float = 0.0
    in_flight: int = 0
    ttft_p99_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.requests_per_s < 0:
            raise ValueError(f"requests_per_s must be >= 0, got {self.requests_per_s}")
        if self.in_flight < 0:
            raise ValueError(f"in_flight must be >= 0, got {self.in_flight}")


def traffic_by_region(samples: Iterable[fleet.TrafficSample], window_s: float,
                      model: str | None = None) -> tuple[RegionTraffic, ...]:
    """Aggregate router traffic samples of one report window into per-region demand.

    ``window_s`` is the length of the window the samples' request counts cover (> 0); ``model``
    keeps only samples of that served model name. Requests add up, in-flight adds up (several
    routers), TTFT p99 takes the worst router's figure. Regions come out sorted by name."""
    if window_s <= 0:
        raise ValueError(f"window_s must be > 0 seconds, got {window_s}")
    requests: dict[str, int] = {}
    in_flight: dict[str, int] = {}
    ttft: dict[str, float] = {}
    for s in samples:
        if model is not None and s.model != model:
            continue
        requests[s.client_region] = requests.get(s.client_region, 0) + s.requests
        in_flight[s.client_region] = in_flight.get(s.client_region, 0) + s.in_flight
        ttft[s.client_region] = max(ttft.get(s.client_region, 0.0), s.ttft_p99_ms)
    return tuple(
        RegionTraffic(region, requests[region] / window_s, in_flight[region], ttft[region])
        for region in sorted(requests)
    )


@dataclasses.dataclass(frozen=True)
class AutoscaleContext:
    """One deployment's view at ``now_s`` (Unix seconds, injected).

    ``current_replicas`` is the replica count last decided (ready + starting); ``loads`` has one
    entry per *ready* replica; ``traffic`` has one entry per client region the routers saw.
    ``replica_capacity_rps`` is what one replica of the deployment's reference GPU type serves
    within the SLA (``scheduler.solver.throughput.capacity_rps``); when given, request rate is a
    second demand signal beside concurrency. ``max_reference_replicas``: the most reference replicas
    ``scaling.max_replicas`` replicas can be, max_replicas x what one replica on the deployment's
    largest allowed GPU type counts for (``throughput.units_by_type``); the decision is capped there,
    not at max_replicas, since it counts reference replicas while max_replicas counts replicas
    (the solver holds that one). None: max_replicas."""

    deployment: str
    spec: deployment_spec.ModelDeploymentSpec
    now_s: float
    current_replicas: int
    loads: tuple[fleet.ReplicaLoad, ...] = ()
    traffic: tuple[RegionTraffic, ...] = ()
    replica_capacity_rps: float | None = None
    max_reference_replicas: int | None = None

    def __post_init__(self) -> None:
        if self.current_replicas < 0:
            raise ValueError(f"current_replicas must be >= 0, got {self.current_replicas}")
        if self.replica_capacity_rps is not None and self.replica_capacity_rps <= 0:
            raise ValueError(f"replica_capacity_rps must be > 0 when given, got {self.replica_capacity_rps}")
        if self.max_reference_replicas is not None and self.max_reference_replicas < 1:
            raise ValueError(f"max_reference_replicas must be >= 1 when given, got {self.max_reference_replicas}")


@dataclasses.dataclass(frozen=True)
class Sample:
    """One observation kept in the policy's windows."""

    at_s: float
    concurrency: float
    requests_per_s: float
    region_weight: Mapping[str, float]


@dataclasses.dataclass(frozen=True)
class AutoscaleState:
    """What a policy remembers between calls. Start with ``AutoscaleState()``.

    ``samples``: observations within the stable window. ``recommendations``: (time, replicas) the
    policy recommended, kept as long as the longer scale delay, so a change is applied only when it
    held for the whole delay (the HPA stabilisation rule: no flapping). ``last_traffic_s``: the last
    time any request was seen (scale to zero). ``panic_until_s``: end of panic mode."""

    samples: tuple[Sample, ...] = ()
    recommendations: tuple[tuple[float, int], ...] = ()
    last_traffic_s: float | None = None
    panic_until_s: float = 0.0
    last_change_s: float | None = None
    # client region (of the SLA's) -> the last time it sent traffic: coverage holds that long.
    region_seen_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # client region -> its share of the demand over the last stable window that had any: how the
    # replicas are split while a window has no traffic (a quiet spell keeps them where they were).
    region_split: Mapping[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Decision:
    """Desired capacity of one deployment.

    ``replicas`` = ``demand_replicas`` + the warm pool (within min/max); ``replicas_by_region`` splits
    ``replicas`` over client regions by their share of the request rate (values add up to
    ``replicas``): the capacity each region needs, in replicas of the reference GPU type, for the
    placement solver. ``covered_regions``: the SLA's client regions that sent traffic within the
    coverage hold (``max(stable window, scale_down_delay_s)``): each needs a replica within its
    SLA's reach, whatever the count (``DeploymentDemand.covered_regions``); empty at zero replicas."""

    replicas: int
    replicas_by_region: Mapping[str, int]
    reason: str
    demand_replicas: int = 0
    observed_concurrency: float = 0.0
    panic: bool = False
    slo_breach: bool = False
    covered_regions: tuple[str, ...] = ()

    def view(self) -> dict:
        """What operators read (``/v1/status`` "autoscaling", ``meridian get deployment``)."""
        return {"replicas": self.replicas, "by_region": dict(self.replicas_by_region), "slo_breach": self.slo_breach,
                "reason": self.reason}

    def __post_init__(self) -> None:
        if sum(self.replicas_by_region.values()) != self.replicas:
            raise ValueError(f"replicas_by_region {dict(self.replicas_by_region)} must add up to replicas "
                             f"({self.replicas})")
