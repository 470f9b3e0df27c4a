"""Fleet domain types (pools, replicas, directives, routes, traffic), shared by the components.
Protobuf conversion lives in ``meridian.fleet.wire`` and is used only at gRPC edges."""

from meridian.fleet import models, runtime, wire
from meridian.fleet.models import (
    Action,
    ClusterIdentity,
    Cloud,
    Directive,
    DirectiveAck,
    DirectiveOutcome,
    DrainReplica,
    Event,
    EventKind,
    GpuPool,
    LatencyPercentiles,
    ModelRoutes,
    ProvisioningState,
    ReplicaLoad,
    ReplicaReport,
    ReplicaState,
    ResizePool,
    RouteReplica,
    RoutingTable,
    RuntimeSpec,
    StartReplica,
    Tier,
    TrafficReport,
    TrafficSample,
)

__all__ = [
    "Action", "ClusterIdentity", "Cloud", "Directive", "DirectiveAck", "DirectiveOutcome", "DrainReplica", "Event",
    "EventKind", "GpuPool", "LatencyPercentiles", "ModelRoutes", "ProvisioningState", "ReplicaLoad", "ReplicaReport",
    "ReplicaState", "ResizePool", "RouteReplica", "RoutingTable", "RuntimeSpec", "StartReplica", "Tier",
    "TrafficReport", "TrafficSample", "models", "runtime", "wire",
]
