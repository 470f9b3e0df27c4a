"""Autoscaling: per deployment, a pure policy turns replica load and router traffic into the
capacity each client region needs (``decide(ctx, state) -> (Decision, state)``, clock injected).

Policies are registered by name (``get("concurrency")`` is the default)."""

from scheduler.autoscaler import concurrency, registry, types
from scheduler.autoscaler.concurrency import ConcurrencyPolicy, ConcurrencySettings
from scheduler.autoscaler.registry import DEFAULT_POLICY, Policy, UnknownPolicy, get, names, register
from scheduler.autoscaler.types import (
    AutoscaleContext,
    AutoscaleState,
    Decision,
    RegionTraffic,
    Sample,
    traffic_by_region,
)

__all__ = [
    "DEFAULT_POLICY", "AutoscaleContext", "AutoscaleState", "ConcurrencyPolicy", "ConcurrencySettings", "Decision",
    "Policy", "RegionTraffic", "Sample", "UnknownPolicy", "concurrency", "get", "names", "register", "registry",
    "traffic_by_region", "types",
]
