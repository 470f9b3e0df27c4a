"""Domain types of the fleet, shared by agents, scheduler, router and simulator.

These are what code inside the components handles; protobuf messages exist only at the gRPC edge
(``meridian.fleet.wire`` converts). Times are Unix seconds (float) unless a name says otherwise."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping


class Cloud(str, enum.Enum):
    AWS = "aws"
    GCP = "gcp"
    AZURE = "azure"
    LOCAL = "local"


class Tier(str, enum.Enum):
    ON_DEMAND = "on_demand"
    SPOT = "spot"
    RESERVED = "reserved"


class ReplicaState(str, enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    FAILED = "failed"
    STOPPED = "stopped"


class ProvisioningState(str, enum.Enum):
    STEADY = "steady"
    SCALING_UP = "scaling_up"
    SCALING_DOWN = "scaling_down"
    STOCKED_OUT = "stocked_out"
    ERROR = "error"


class DirectiveOutcome(str, enum.Enum):
    ACCEPTED = "accepted"
    SUCCEEDED = "succeeded"
    REFUSED = "refused"
    FAILED = "failed"
    DUPLICATE = "duplicate"


class EventKind(str, enum.Enum):
    SPOT_INTERRUPTION = "spot_interruption"
    STOCK_OUT = "stock_out"
    REPLICA_CRASH = "replica_crash"
    QUOTA_EXCEEDED = "quota_exceeded"
    AUTH_FAILURE = "auth_failure"
    THROTTLED = "throttled"


@dataclasses.dataclass(frozen=True)
class LatencyPercentiles:
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class ReplicaLoad:
    running_requests: int = 0
    queued_requests: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_hit_rate: float = 0.0
    ttft: LatencyPercentiles = LatencyPercentiles()
    inter_token_latency: LatencyPercentiles = LatencyPercentiles()
    generation_tokens_per_s: float = 0.0
    requests_per_s: float = 0.0
    observed_at: float = 0.0
    # Time waited in the engine's queue before prefill (sglang:queue_time_seconds); None when the
    # engine does not report it.
    queue_time: LatencyPercentiles | None = None

    @property
    def outstanding(self) -> int:
        return self.running_requests + self.queued_requests


@dataclasses.dataclass(frozen=True)
class ClusterIdentity:
    cluster_id: str
    cloud: Cloud
    region: str
    zone: str = ""
    agent_version: str = ""


@dataclasses.dataclass(frozen=True)
class GpuPool:
    pool_id: str
    gpu_type: str
    gpu_memory_gib: int
    gpus_per_node: int
    instance_type: str
    nodes_current: int
    nodes_min: int
    nodes_max: int
    gpus_free: int
    tier: Tier
    price_per_node_hour_usd: float
    quota_headroom_gpus: int
    provisioning_state: ProvisioningState = ProvisioningState.STEADY
    zone: str = ""
    nodes_pending: int = 0

    @property
    def gpus_total(self) -> int:
        return self.nodes_current * self.gpus_per_node

    @property
    def price_per_gpu_hour_usd(self) -> float:
        return self.price_per_node_hour_usd / self.gpus_per_node if self.gpus_per_node else 0.0


@dataclasses.dataclass(frozen=True)
class ReplicaReport:
    replica_id: str
    deployment: str
    revision: str
    endpoint: str
    state: ReplicaState
    load: ReplicaLoad = ReplicaLoad()
    pool_id: str = ""
    gpu_count: int = 0
    time_to_ready_s: float = 0.0
    restarts: int = 0
    message: str = ""
    served_model_name: str = ""
    started_at: float = 0.0
    node_id: str = ""  # the node its GPUs are on, within its pool ("" when unknown)


@dataclasses.dataclass(frozen=True)
class RuntimeSpec:
    """What the runtime adapter needs to launch one engine process."""

    model_path: str
    served_model_name: str
    engine: str = "sglang"
    model_revision: str = ""
    tp_size: int = 1
    context_length: int = 0  # 0: the model's own
    mem_fraction_static: float = 0.88
    quantization: str = ""  # "": none
    extra_args: tuple[str, ...] = ()
    max_running_requests: int = 0  # 0: engine default
    max_queued_requests: int = 0
    is_embedding: bool = False
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class StartReplica:
    replica_id: str
    deployment: str
    revision: str
    runtime: RuntimeSpec
    pool_id: str
    gpu_count: int
    deployment_spec_json: str = ""
    avoid_nodes: tuple[str, ...] = ()  # nodes of the pool not to place it on (being emptied)


@dataclasses.dataclass(frozen=True)
class DrainReplica:
    replica_id: str
    deadline_s: int = 120


@dataclasses.dataclass(frozen=True)
class ResizePool:
    pool_id: str
    target_nodes: int


Action = StartReplica | DrainReplica | ResizePool


@dataclasses.dataclass(frozen=True)
class Directive:
    directive_id: str
    action: Action
    fencing_token: int = 0


@dataclasses.dataclass(frozen=True)
class DirectiveAck:
    directive_id: str
    outcome: DirectiveOutcome
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class Event:
    kind: EventKind
    pool_id: str = ""
    replica_id: str = ""
    message: str = ""
    deadline: float | None = None
    directive_id: str = ""


@dataclasses.dataclass(frozen=True)
class RouteReplica:
    replica_id: str
    endpoint: str
    cloud: Cloud
    region: str
    zone: str = ""
    state: ReplicaState = ReplicaState.READY
    weight: float = 1.0
    load: ReplicaLoad = ReplicaLoad()
    gpu_type: str = ""
    cluster_id: str = ""
    revision: str = ""
    tier: Tier = Tier.ON_DEMAND


@dataclasses.dataclass(frozen=True)
class ModelRoutes:
    served_model_name: str
    deployment: str
    replicas: tuple[RouteReplica, ...] = ()
    policy: str = ""
    is_embedding: bool = False
    context_length: int = 0
    max_rtt_ms: float = 0.0  # the SLA's max_rtt_ms; 0: none
    ttft_p99_ms: float = 0.0  # the SLA's targets (routers derive per-try timeouts); 0: not known
    tpot_p99_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class RoutingTable:
    version: int
    models: tuple[ModelRoutes, ...] = ()
    generated_at: float = 0.0
    scheduler_id: str = ""

    def model(self, served_model_name: str) -> ModelRoutes | None:
        for m in self.models:
            if m.served_model_name == served_model_name:
                return m
        return None


@dataclasses.dataclass(frozen=True)
class TrafficSample:
    model: str
    client_region: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    in_flight: int = 0
    ttft_p99_ms: float = 0.0
    revision: str = ""  # the replica revision that served them; "" when not told apart


@dataclasses.dataclass(frozen=True)
class TrafficReport:
    router_id: str
    router_region: str
    window_start: float
    window_end: float
    samples: tuple[TrafficSample, ...] = ()
