"""The shared capacity model (roofline) for emulator, autoscaler, solver and simulator."""

from meridian.capacity.model import (
    KNOWN_ARCHITECTURES,
    Architecture,
    DoesNotFit,
    ReplicaPerf,
    Workload,
    architecture_for,
    fits,
    min_gpus_to_fit,
    replica_perf,
)

__all__ = [
    "KNOWN_ARCHITECTURES",
    "Architecture",
    "DoesNotFit",
    "ReplicaPerf",
    "Workload",
    "architecture_for",
    "fits",
    "min_gpus_to_fit",
    "replica_perf",
]
