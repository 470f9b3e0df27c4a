"""Cluster: how one agent identifies itself, which cloud account and region it manages, and which
GPU pools it may scale within what bounds."""

from __future__ import annotations

import re
from typing import Literal

import pydantic

from meridian.spec import base, rules
from meridian.spec import replicas as replicas_spec


class Auth(base.StrictModel):
    """Where the agent's per-cluster token comes from (never inline in a committed file)."""

    token_env: str | None = pydantic.Field(default=None, pattern=r"^[A-Z_][A-Z0-9_]*$")
    token_file: str | None = None


class Tls(base.StrictModel):
    ca_file: str
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = pydantic.Field(
        default=None, max_length=253,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$",
        description="DNS name the scheduler's certificate is verified against (SNI and hostname check) instead of "
                    "the address dialed, the configured one or a standby's redirect (pod IPs a shared "
                    "certificate cannot name). Default: the address's host.")


class SchedulerEndpoint(base.StrictModel):
    address: str = pydantic.Field(default="127.0.0.1:7070", pattern=r"^[^\s:]+:\d{1,5}$",
                                  description="host:port of the scheduler's gRPC server.")
    tls: Tls | None = None


class PoolDecl(base.StrictModel):
    name: str = pydantic.Field(pattern=base.NAME_PATTERN, description="Pool id, unique in the cluster.")
    instance_type: str = pydantic.Field(min_length=1)
    tier: Literal["on_demand", "spot", "reserved"] = "on_demand"
    zone: str | None = None
    min_nodes: int = pydantic.Field(default=0, ge=0)
    max_nodes: int = pydantic.Field(default=4, ge=0)
    initial_nodes: int = pydantic.Field(default=0, ge=0, description="Nodes at start (sim provider).")
    resource: str | None = pydantic.Field(
        default=None, description="The cloud resource the pool maps to: an Auto Scaling group, a GKE node pool, "
                                  "an Azure scale set, an AKS agent pool; default: the pool's name.")
    node_pool: str | None = pydantic.Field(
        default=None, max_length=63, description="kubernetes backend: the node pool label's value for this pool "
                                                 "(default: resource, then name).")

    @property
    def node_pool_value(self) -> str:
        return self.node_pool or self.resource or self.name


class AwsAccount(base.StrictModel):
    account_id: str | None = pydantic.Field(default=None, pattern=r"^\d{12}$")
    profile: str | None = None
    endpoint_url: str | None = pydantic.Field(default=None, description="Only for tests (moto).")


class GcpAccount(base.StrictModel):
    project: str = pydantic.Field(min_length=1)
    location: str = pydantic.Field(min_length=1, description="GKE cluster location (region or zone).")
    gke_cluster: str = pydantic.Field(min_length=1)
    endpoint: str | None = pydantic.Field(default=None, description="Only for tests (local fake).")


# AKS's own naming rules (the ContainerService REST reference's path patterns).
AKS_CLUSTER_PATTERN = r"^[a-zA-Z0-9]$|^[a-zA-Z0-9][-_a-zA-Z0-9]{0,61}[a-zA-Z0-9]$"
AKS_AGENT_POOL_PATTERN = r"^[a-z][a-z0-9]{0,11}$"
# The cloud each cloud provider manages.
PROVIDER_CLOUD = {"aws": "aws", "gcp": "gcp", "azure": "azure", "aks": "azure"}


class AzureAccount(base.StrictModel):
    subscription_id: str = pydantic.Field(min_length=1)
    resource_group: str = pydantic.Field(
        min_length=1, description="azure provider: the scale sets' resource group; aks provider: the managed "
                                  "cluster's resource group (not its node resource group).")
    aks_cluster: str | None = pydantic.Field(
        default=None, pattern=AKS_CLUSTER_PATTERN,
        description="The AKS managed cluster whose agent pools the aks provider sizes (provider: aks only).")
    endpoint: str | None = pydantic.Field(default=None, description="Only for tests (local fake).")


class SimCloud(base.StrictModel):
    provisioning_delay_s: float = pydantic.Field(default=20, ge=0, le=3600)
    spot_preemptions_per_node_hour: float = pydantic.Field(default=0.02, ge=0, le=100)
    stock_out_pools: list[str] = pydantic.Field(default_factory=list,
                                                description="Pools that refuse to grow (fault injection).")
    seed: int | None = pydantic.Field(
        default=None, description="Seed of the simulated cloud's chance (which spot nodes are preempted, when): "
                                   "with the same seed and the same clock readings (the simulator and tests drive "
                                   "a fake clock) the same nodes are preempted; none: new draws each run.")


class AgentSettings(base.StrictModel):
    report_interval_s: float = pydantic.Field(default=5, gt=0, le=300,
                                              description="Most time between two load reports.")
    heartbeat_interval_s: float = pydantic.Field(default=5, gt=0, le=300)
    advertise_host: str = pydantic.Field(default="127.0.0.1", description="Host in replica endpoints.")
    replica_ports: str = pydantic.Field(default="31000-31999", pattern=r"^\d{2,5}-\d{2,5}$")
    cache_dir: str = pydantic.Field(default="~/.cache/meridian/weights",
                                    description="Weights cache shared by replicas on a node.")
    state_dir: str = pydantic.Field(default="~/.local/state/meridian/agent",
                                    description="Where the agent records replicas, to re-adopt them.")
    engine_command: list[str] = pydantic.Field(
        default_factory=lambda: ["python", "-m", "sglang.launch_server"],
        description="Engine command; the demo uses the emulator.")
    metrics_port: int = pydantic.Field(default=0, ge=0, le=65535, description="0 picks a free port.")

    @pydantic.field_validator("replica_ports")
    @classmethod
    def _range(cls, value: str) -> str:
        lo, hi = (int(x) for x in value.split("-"))
        if not 1024 <= lo <= hi <= 65535:
            raise ValueError(f"port range must be within 1024-65535 and low <= high, got {value}")
        return value


class ClusterSpec(base.StrictModel):
    cloud: base.CloudName
    region: rules.CloudRegion
    zone: str | None = None
    provider: Literal["sim", "aws", "gcp", "azure", "aks"] | None = pydantic.Field(
        default=None, description="Provider implementation; default: the cloud's own (sim for local). On Azure, "
                                  "azure drives plain scale sets, aks the agent pools of an AKS cluster.")
    auth: Auth
    scheduler: SchedulerEndpoint = SchedulerEndpoint()
    pools: list[PoolDecl] = pydantic.Field(min_length=1)
    aws: AwsAccount | None = None
    gcp: GcpAccount | None = None
    azure: AzureAccount | None = None
    sim: SimCloud = SimCloud()
    agent: AgentSettings = AgentSettings()
    replicas: replicas_spec.Replicas = replicas_spec.Replicas()

    @property
    def provider_name(self) -> str:
        return self.provider or ("sim" if self.cloud == "local" else self.cloud)

    @pydantic.model_validator(mode="after")
    def _cross_field(self, info: pydantic.ValidationInfo) -> ClusterSpec:
        ctx = base.context_of(info)
        problems = rules.Problems()
        known = ctx.latency_map.regions.get(self.region)
        if known is not None and self.cloud != "local" and known.cloud != self.cloud:
            problems.add("region", f"{self.region!r} is in {known.cloud}, not {self.cloud}")
        if (self.auth.token_env is None) == (self.auth.token_file is None):
            problems.add("auth", "give exactly one of token_env or token_file")
        tls = self.scheduler.tls
        if tls is not None and bool(tls.cert_file) != bool(tls.key_file):
            given, missing = ("cert_file", "key_file") if tls.cert_file else ("key_file", "cert_file")
            problems.add(f"scheduler.tls.{missing}", f"{given} is set: mutual TLS needs both cert_file and key_file")
        rules.unique([p.name for p in self.pools], "pools", problems, "pool name")
        provider = self.provider_name
        if provider in PROVIDER_CLOUD and PROVIDER_CLOUD[provider] != self.cloud:
            problems.add("provider", f"provider {provider!r} cannot manage a {self.cloud} cluster")
        if provider == "gcp" and self.gcp is None:
            problems.add("gcp", "the gcp provider needs gcp.project, gcp.location and gcp.gke_cluster")
        if provider == "azure" and self.azure is None:
            problems.add("azure", "the azure provider needs azure.subscription_id and azure.resource_group")
        if provider == "azure" and self.azure is not None and self.azure.aks_cluster is not None:
            problems.add("azure.aks_cluster", "the azure provider resizes plain scale sets, which AKS does not "
                                              "allow for its node pools: set provider: aks to size the agent pools "
                                              f"of {self.azure.aks_cluster!r}, or remove aks_cluster")
        if provider == "aks" and self.cloud == "azure":
            if self.azure is None or self.azure.aks_cluster is None:
                problems.add("azure.aks_cluster" if self.azure else "azure",
                             "the aks provider needs azure.subscription_id, azure.resource_group (the managed "
                             "cluster's) and azure.aks_cluster (its name)")
            for i, pool in enumerate(self.pools):
                name = pool.resource or pool.name
                if not re.match(AKS_AGENT_POOL_PATTERN, name):
                    field = "resource" if pool.resource else "name"
                    problems.add(f"pools.{i}.{field}",
                                 f"{name!r} is not an AKS agent pool name (1-12 lowercase letters and digits, "
                                 f"starting with a letter): set pools[{i}].resource to the agent pool's name")
        if self.replicas.backend == "kubernetes" and self.replicas.kubernetes is None:
            problems.add("replicas.kubernetes", "backend kubernetes needs its settings (at least image: the replica image)")
        catalog_cloud = self.cloud if self.cloud != "local" else None
        types = ctx.catalog.instance_types(catalog_cloud)
        for i, pool in enumerate(self.pools):
            if pool.min_nodes > pool.max_nodes:
                problems.add(f"pools.{i}.min_nodes",
                             f"min_nodes ({pool.min_nodes}) must be <= max_nodes ({pool.max_nodes})")
            elif not pool.min_nodes <= pool.initial_nodes <= pool.max_nodes:
                problems.add(f"pools.{i}.initial_nodes",
                             f"initial_nodes ({pool.initial_nodes}) must lie in [min_nodes, max_nodes]")
            if pool.instance_type not in types:
                problems.add(f"pools.{i}.instance_type",
                             base.unknown_name(f"{self.cloud} instance type", pool.instance_type, types))
            elif catalog_cloud and ctx.catalog.lookup(self.cloud, pool.instance_type, self.region) is None:
                where = sorted(o.region for o in ctx.catalog.by_instance_type(self.cloud, pool.instance_type))
                problems.add(f"pools.{i}.instance_type",
                             f"{pool.instance_type} is not offered in {self.region}; it is in: {', '.join(where)}")
        problems.raise_if_any()
        return self


class Cluster(base.StrictModel):
    """One GPU cluster and its agent. Kind ``Cluster``; metadata.name is the cluster id."""

    apiVersion: Literal["meridian/v1"]
    kind: Literal["Cluster"]
    metadata: base.Metadata
    spec: ClusterSpec
