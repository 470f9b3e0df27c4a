"""The shared capacity model (roofline) for emulator, autoscaler, solver and simulator."""

from meridian.capacity.model import (
    KNOWN_ARCHITECTURES,
    MAX_QUEUE_UTILISATION,
    Architecture,
    DoesNotFit,
    ReplicaPerf,
    Workload,
    architecture_for,
    fits,
    min_gpus_to_fit,
    queue_wait_p99_s,
    queue_wait_tail_s,
    replica_perf,
)

__all__ = [
    "KNOWN_ARCHITECTURES",
    "MAX_QUEUE_UTILISATION",
    "Architecture",
    "DoesNotFit",
    "ReplicaPerf",
    "Workload",
    "architecture_for",
    "fits",
    "min_gpus_to_fit",
    "queue_wait_p99_s",
    "queue_wait_tail_s",
    "replica_perf",
]
