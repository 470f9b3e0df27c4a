"""The spec language: YAML documents (``apiVersion: meridian/v1``) validated by pydantic models
in one place. Kinds: ModelDeployment, CapacityPolicy, Cluster, LatencyMap."""

from meridian.spec import base, cluster, deployment, latencymap, loader, policy
from meridian.spec.base import API_VERSION, Context, default_context
from meridian.spec.cluster import Cluster
from meridian.spec.deployment import ModelDeployment
from meridian.spec.errors import SpecError, SpecIssue
from meridian.spec.latencymap import LatencyMap
from meridian.spec.loader import (
    KINDS,
    Document,
    Loaded,
    SpecSet,
    expand_paths,
    json_schema,
    load_files,
    load_text,
    load_texts,
)
from meridian.spec.policy import CapacityPolicy

__all__ = [
    "API_VERSION", "KINDS", "CapacityPolicy", "Cluster", "Context", "Document", "LatencyMap", "Loaded",
    "ModelDeployment", "SpecError", "SpecIssue", "SpecSet", "base", "cluster", "default_context", "deployment",
    "expand_paths", "json_schema", "latencymap", "load_files", "load_text", "load_texts", "loader", "policy",
]
