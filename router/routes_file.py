"""Static routing table from a YAML file, for running the router without a scheduler.

Format (every field but ``served_model_name`` and the replicas' ``replica_id``/``endpoint`` optional)::

    models:
      - served_model_name: llama-3-8b
        deployment: llama-3-8b          # default: the served name
        policy: latency                 # default: the router's
        replicas:
          - {replica_id: r1, endpoint: "http://10.0.0.5:30000", cloud: aws, region: us-east-1,
             gpu_type: H100, weight: 1}
"""

from __future__ import annotations

import pathlib

import pydantic

from meridian import yamlread
from meridian.fleet import models as fm
from router import endpoints, policies


class _Frozen(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


class StaticReplica(_Frozen):
    replica_id: str = pydantic.Field(min_length=1)
    endpoint: str = pydantic.Field(min_length=1)
    cloud: fm.Cloud = fm.Cloud.LOCAL
    region: str = ""
    zone: str = ""
    state: fm.ReplicaState = fm.ReplicaState.READY
    weight: float = pydantic.Field(default=1.0, ge=0)
    gpu_type: str = ""

    @pydantic.field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        endpoints.parse_endpoint(value)
        return value


class StaticModel(_Frozen):
    served_model_name: str = pydantic.Field(min_length=1, pattern=r"^[^:\s]+$")
    deployment: str = ""
    policy: str = ""
    is_embedding: bool = False
    context_length: int = pydantic.Field(default=0, ge=0)
    max_rtt_ms: float = pydantic.Field(default=0.0, ge=0, description="0: none; else clients go farther only "
                                                                      "when no healthy replica is within it")
    ttft_p99_ms: float = pydantic.Field(default=0.0, ge=0, le=600_000,
                                        description="The deployment's TTFT target; 0: unknown (per-try limit = cap)")
    tpot_p99_ms: float = pydantic.Field(default=0.0, ge=0, le=10_000,
                                        description="The deployment's time per output token target; 0: unknown")
    replicas: list[StaticReplica] = pydantic.Field(default_factory=list)

    @pydantic.field_validator("policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        if value:
            policies.check(value)
        return value


class StaticRoutes(_Frozen):
    version: int = pydantic.Field(default=1, ge=0)
    models: list[StaticModel] = pydantic.Field(default_factory=list)

    @pydantic.model_validator(mode="after")
    def _unique(self) -> StaticRoutes:
        names = [m.served_model_name for m in self.models]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"models: served_model_name repeated: {', '.join(dup)}")
        ids = [r.replica_id for m in self.models for r in m.replicas]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"replicas: replica_id repeated: {', '.join(dup)}")
        return self

    def table(self) -> fm.RoutingTable:
        return fm.RoutingTable(
            version=self.version, scheduler_id="static",
            models=tuple(fm.ModelRoutes(
                served_model_name=m.served_model_name, deployment=m.deployment or m.served_model_name,
                policy=m.policy, is_embedding=m.is_embedding, context_length=m.context_length, max_rtt_ms=m.max_rtt_ms,
                ttft_p99_ms=m.ttft_p99_ms, tpot_p99_ms=m.tpot_p99_ms,
                replicas=tuple(fm.RouteReplica(
                    replica_id=r.replica_id, endpoint=r.endpoint, cloud=r.cloud, region=r.region, zone=r.zone,
                    state=r.state, weight=r.weight, gpu_type=r.gpu_type) for r in m.replicas))
                for m in self.models))


def load(path: str | pathlib.Path) -> fm.RoutingTable:
    """Read and validate a static routes file; raises pydantic.ValidationError naming the field."""
    data = yamlread.load_file(path) or {}
    return StaticRoutes.model_validate(data).table()
