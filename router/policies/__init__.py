"""Routing policies behind one small interface, registered by name.

``latency`` (default), ``least_request``, ``round_robin``, ``random``, ``prefix_cache``."""

from router.policies import latency, prefix_cache, simple
from router.policies.base import REGISTRY, Policy, RouteRequest, UnknownPolicy, check, create, names

DEFAULT = latency.Latency.name

__all__ = ["DEFAULT", "REGISTRY", "Policy", "RouteRequest", "UnknownPolicy", "check", "create", "latency",
           "names", "prefix_cache", "simple"]
