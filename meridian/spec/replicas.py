"""Where a cluster's replicas run (``spec.replicas``): as local processes on the agent's host
(``local``, the default: one-box setups, the demo) or as pods of the cluster's Kubernetes
(``kubernetes``), with that backend's settings. The per-cloud defaults live here, beside the
fields, so the agent, the docs and the spec reference agree on them."""

from __future__ import annotations

import re
from typing import Literal

import pydantic

from meridian.spec import base, rules

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# A label/taint key: an optional DNS-subdomain prefix and "/", then a name of up to 63 characters.
LABEL_KEY = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
# The same, or "prefix/*": every key of that prefix (the taints a node termination handler sets).
TAINT_PATTERN = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?|\*)$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"  # a Secret data key (Kubernetes: alphanumerics, '-', '_', '.')
QUANTITY = r"^\d+(\.\d+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$"
IMAGE = r"^[a-z0-9]([a-z0-9._/:@-]*[A-Za-z0-9_])?$"

GPU_TAINT_KEY = "nvidia.com/gpu"
# The label that names a node's pool, by cloud (EKS managed node groups, GKE node pools, AKS agent
# pools; the sim cloud's nodes carry Meridian's own).
NODE_POOL_LABELS = {"aws": "eks.amazonaws.com/nodegroup", "gcp": "cloud.google.com/gke-nodepool",
                    "azure": "kubernetes.azure.com/agentpool", "local": "meridian.dev/pool"}
# Taints a spot node of the cloud carries from birth, which a replica of a spot pool tolerates.
SPOT_TAINTS = {"azure": [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
                          "effect": "NoSchedule"}],
               "gcp": [{"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true",
                        "effect": "NoSchedule"}]}
# The signs that the cloud is taking a node back (docs/kubernetes.md, "Reclaim signals"):
# - AWS Node Termination Handler taints (with TAINT_NODE) aws-node-termination-handler/spot-itn,
#   .../scheduled-maintenance, .../asg-lifecycle-termination (and .../rebalance-recommendation, a
#   recommendation, not a reclaim: left out), and in its default mode only cordons;
# - GKE taints cloud.google.com/impending-node-termination, and its graceful node shutdown turns the
#   node NotReady with the message "node is shutting down";
# - AKS node auto-drain taints remediator.kubernetes.azure.com/unschedulable (and cordons) on a
#   Preempt scheduled event.
RECLAIM_TAINTS = {
    "aws": ["aws-node-termination-handler/spot-itn", "aws-node-termination-handler/scheduled-maintenance",
            "aws-node-termination-handler/asg-lifecycle-termination"],
    "gcp": ["cloud.google.com/impending-node-termination"],
    "azure": ["remediator.kubernetes.azure.com/unschedulable"],
}
SHUTDOWN_CONDITION = {"type": "Ready", "status": "False", "message_contains": "node is shutting down"}
# Notice each cloud gives before a reclaimed node goes (AWS spot: 2 min; GCE preemption: 30 s;
# Azure Scheduled Events Preempt: at least 30 s). A reclaim sign carries no deadline: this is it.
RECLAIM_NOTICE_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0, "local": 120.0}


class Toleration(base.StrictModel):
    """A Kubernetes toleration (``key`` empty with ``Exists``: every taint)."""

    key: str | None = pydantic.Field(default=None, pattern=LABEL_KEY)
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = pydantic.Field(default=None, ge=0, description="NoExecute only.")

    def to_k8s(self) -> dict:
        out: dict = {"operator": self.operator}
        for name, value in (("key", self.key), ("value", self.value), ("effect", self.effect),
                            ("tolerationSeconds", self.toleration_seconds)):
            if value is not None:
                out[name] = value
        return out


class ModelCache(base.StrictModel):
    """The volume that holds downloaded weights, mounted at ``mount_path`` in every replica pod, so a
    restart on the same node does not download them again."""

    type: Literal["host_path", "pvc", "empty_dir"] = pydantic.Field(
        default="host_path", description="host_path: the node's disk (shared by the node's replicas, kept across pods); "
                                         "pvc: a PersistentVolumeClaim; empty_dir: the pod's own (lost with the pod).")
    host_path: str = pydantic.Field(default="/var/lib/meridian/models", pattern=r"^/", description="host_path only.")
    claim_name: str | None = pydantic.Field(default=None, pattern=DNS_LABEL, description="pvc only: the claim's name.")
    size_limit: str | None = pydantic.Field(default=None, pattern=QUANTITY, description="empty_dir only, e.g. 200Gi.")
    mount_path: str = pydantic.Field(default="/var/lib/meridian/models", pattern=r"^/")
    chown_host_path: bool = pydantic.Field(
        default=True, description="host_path only: before the engine, a step running as root with CAP_CHOWN alone "
                                  "gives the directory to the pods' run_as_user (the kubelet creates it root's). "
                                  "false where the node bootstrap creates it owned by that user: a namespace under "
                                  "the restricted Pod Security Standard refuses the step.")

    @pydantic.model_validator(mode="after")
    def _claim(self) -> ModelCache:
        problems = rules.Problems()
        if self.type == "pvc" and not self.claim_name:
            problems.add("claim_name", "type pvc needs the claim's name")
        problems.raise_if_any()
        return self


class ReclaimCondition(base.StrictModel):
    """A node condition that means the node is being taken back."""

    type: str = pydantic.Field(min_length=1)
    status: Literal["True", "False", "Unknown"] = "True"
    message_contains: str = pydantic.Field(default="", description="Only when the condition's message holds this.")


class ReclaimSignals(base.StrictModel):
    """Which signs on a Node mean "the cloud is taking this node": each becomes an interruption
    notice (the replicas on it drain, the scheduler re-places them). Unset fields: the defaults of
    every cloud (their keys do not collide), a cordon only on AWS."""

    taints: list[str] | None = pydantic.Field(
        default=None, description="Taint keys; `prefix/*` matches every key of the prefix. Default: the AWS Node "
                                  "Termination Handler's, GKE's and AKS node auto-drain's reclaim taints.")
    conditions: list[ReclaimCondition] | None = pydantic.Field(
        default=None, description="Default: Ready=False with \"node is shutting down\" (graceful node shutdown).")
    cordon: bool | None = pydantic.Field(
        default=None, description="Whether a cordon alone is a reclaim sign (default: on AWS, where the Node "
                                  "Termination Handler's default mode only cordons and drains).")
    notice_s: float | None = pydantic.Field(
        default=None, gt=0, le=3600, description="Assumed notice ahead of the node going (default by cloud: aws 120, "
                                                 "gcp 30, azure 30, local 120).")

    @pydantic.field_validator("taints")
    @classmethod
    def _taint_keys(cls, value: list[str] | None) -> list[str] | None:
        for key in value or []:
            if not re.match(TAINT_PATTERN, key):
                raise ValueError(f"taint key {key!r} is not a valid key (prefix/name, or prefix/*)")
        return value


class SecretKeyRef(base.StrictModel):
    """One key of a Kubernetes Secret in the replicas' namespace, mounted into the pod by the kubelet."""

    name: str = pydantic.Field(pattern=DNS_SUBDOMAIN, max_length=253, description="The Secret's name.")
    key: str = pydantic.Field(pattern=SECRET_KEY, max_length=253, description="The key within the Secret's data.")


class Endpoint(base.StrictModel):
    """How routers reach a replica: its pod IP (inside the cluster network or a peered one), or a
    per-replica Service."""

    mode: Literal["pod_ip", "service"] = "pod_ip"
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = pydantic.Field(
        default="ClusterIP", description="service mode: ClusterIP (in the cluster), NodePort (a port on every node), "
                                         "LoadBalancer (the cloud's load balancer address).")
    node_address: Literal["ExternalIP", "InternalIP"] = pydantic.Field(
        default="ExternalIP", description="NodePort: which node address endpoints use (falls back to the other).")


class KubernetesReplicas(base.StrictModel):
    """The kubernetes backend: every replica is a bare pod the agent owns, pinned to the node the
    agent's allocator chose."""

    namespace: str = pydantic.Field(default="meridian", pattern=DNS_LABEL)
    image: str = pydantic.Field(pattern=IMAGE, description="The replica image (SGLang + the runtime adapter), pinned.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[str] = pydantic.Field(default_factory=list)
    service_account: str | None = pydantic.Field(default=None, pattern=DNS_LABEL,
                                                 description="The replica pods' service account (they need no API access).")
    command: list[str] = pydantic.Field(
        default_factory=lambda: ["python3", "-m", "runtime_adapter", "serve"], min_length=1,
        description="The container's entry point: the runtime adapter's pod-side supervisor.")
    run_as_user: int | None = pydantic.Field(
        default=10001, ge=1, le=2_147_483_647,
        description="The pod's user, group and fsGroup (the replica image's user, 10001): the kubelet makes a pvc "
                    "model cache and the mounted Secrets (API key, TLS pair) readable by it. null: the image's "
                    "own user, no fsGroup (an image that must run as root; the Secrets are then readable by root "
                    "only).")
    node_pool_label: str | None = pydantic.Field(
        default=None, pattern=LABEL_KEY, description="Node label naming the pool (default by cloud: "
                                                     "eks.amazonaws.com/nodegroup, cloud.google.com/gke-nodepool, "
                                                     "kubernetes.azure.com/agentpool, meridian.dev/pool).")
    tolerations: list[Toleration] | None = pydantic.Field(
        default=None, description="Default: the GPU taint (nvidia.com/gpu, Exists, NoSchedule), plus on spot pools the "
                                  "cloud's spot taint (AKS scalesetpriority=spot, GKE gke-spot=true).")
    model_cache: ModelCache = ModelCache()
    endpoint: Endpoint = Endpoint()
    engine_port: int = pydantic.Field(default=30000, ge=1024, le=65535, description="SGLang's port in the pod.")
    adapter_port: int = pydantic.Field(default=30001, ge=1024, le=65535,
                                       description="The adapter's port in the pod (/drain, /healthz, /metrics).")
    kubeconfig: str | None = pydantic.Field(
        default=None, description="Default: the in-cluster service account, then ~/.kube/config.")
    context: str | None = None
    cpu_request: str = pydantic.Field(default="1", pattern=QUANTITY)
    memory_request: str = pydantic.Field(default="8Gi", pattern=QUANTITY)
    cpu_limit: str | None = pydantic.Field(default=None, pattern=QUANTITY)
    memory_limit: str | None = pydantic.Field(default=None, pattern=QUANTITY)
    reclaim: ReclaimSignals = ReclaimSignals()
    pod_start_timeout_s: float = pydantic.Field(
        default=1800, gt=0, le=86_400, description="A pod not running and ready this long after creation (image pull, "
                                                   "weights download, unschedulable) is FAILED and deleted.")
    max_restarts: int = pydantic.Field(default=5, ge=1, le=1000,
                                       description="Container restarts in CrashLoopBackOff after which the replica is "
                                                   "FAILED and its pod deleted.")
    drain_deadline_s: int = pydantic.Field(
        default=120, ge=0, le=86_400, description="In-flight requests get this long when a pod is deleted by someone "
                                                  "else (eviction, node drain); a drain directive brings its own.")
    stop_grace_s: int = pydantic.Field(default=15, ge=1, le=600,
                                       description="After the drain, how long the engine gets to exit before SIGKILL.")
    probe_period_s: int = pydantic.Field(default=5, ge=1, le=300, description="Readiness probe period (SGLang /health).")
    post_events: bool = pydantic.Field(default=True, description="Post Kubernetes Events for replica lifecycle steps.")
    api_key_secret: SecretKeyRef | None = pydantic.Field(
        default=None, description="The Secret key holding the API key the engines require (SGLang --api-key): mounted "
                                  "read-only into each pod, read there by the runtime adapter; never in the pod's "
                                  "args or env. Default: no key (engines serve anyone who reaches them).")

    tls_secret: str | None = pydantic.Field(
        default=None, pattern=DNS_SUBDOMAIN, max_length=253,
        description="A kubernetes.io/tls Secret (keys tls.crt, tls.key): each pod serves HTTPS on tls_port with it, "
                    "terminated by the runtime adapter and relayed to the engine, which then listens on the pod's "
                    "loopback only; endpoints are https://. Rotations reach new connections without a restart. "
                    "Default: plain HTTP on engine_port.")
    tls_port: int = pydantic.Field(default=30443, ge=1024, le=65535,
                                   description="The pod's HTTPS port (with tls_secret).")

    @pydantic.model_validator(mode="after")
    def _ports(self) -> KubernetesReplicas:
        problems = rules.Problems()
        if self.engine_port == self.adapter_port:
            problems.add("adapter_port", f"must differ from engine_port ({self.engine_port})")
        if self.tls_secret and self.tls_port in (self.engine_port, self.adapter_port):
            problems.add("tls_port", f"must differ from engine_port and adapter_port ({self.tls_port})")
        problems.raise_if_any()
        return self


class LocalTls(base.StrictModel):
    """HTTPS in front of each local replica: a TLS relay process on the replica's port, the engine
    on loopback behind it."""

    cert_file: str = pydantic.Field(
        min_length=1, description="PEM certificate chain (leaf first) every replica serves; routers verify it with "
                                  "--upstream-tls-ca-file against the endpoint's address (agent.advertise_host: "
                                  "put it in the certificate, as an IP SAN for an address) or against the one name "
                                  "--upstream-tls-server-name gives.")
    key_file: str = pydantic.Field(
        min_length=1, description="Its unencrypted PEM private key. The relay is given the path, never the key.")
    reload_interval_s: float = pydantic.Field(
        default=5.0, gt=0, le=3600, description="How often the relay checks the files: a rotated pair reaches new "
                                                "connections without a restart.")


class LocalReplicas(base.StrictModel):
    """The local backend's settings (ports and the advertised host are agent settings: spec.agent)."""

    tls: LocalTls | None = pydantic.Field(
        default=None, description="Serve each replica over HTTPS: the engine binds 127.0.0.1 only, a relay process on "
                                  "the replica's port terminates TLS and forwards to it; endpoints are https://. "
                                  "Each TLS replica takes two ports of agent.replica_ports. Default: plain HTTP.")


class Replicas(base.StrictModel):
    """Where the cluster's replicas run."""

    backend: Literal["local", "kubernetes"] = pydantic.Field(
        default="local", description="local: runtime-adapter processes on the agent's host; kubernetes: a pod per replica.")
    kubernetes: KubernetesReplicas | None = pydantic.Field(default=None, description="The kubernetes backend's settings.")
    local: LocalReplicas | None = pydantic.Field(default=None, description="The local backend's settings.")
    api_key_file: str | None = pydantic.Field(
        default=None, min_length=1,
        description="local backend: a file holding the API key the engines require (SGLang --api-key), read by the "
                    "agent at start and given to each engine in a private 0600 --config file, never on a command "
                    "line. Routers send it with --upstream-api-key-file. Default: no key.")
    api_key_env: str | None = pydantic.Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="local backend: the environment variable holding that key instead (one of the two).")

    @pydantic.model_validator(mode="after")
    def _api_key(self) -> Replicas:
        problems = rules.Problems()
        if self.api_key_file and self.api_key_env:
            problems.add("api_key_env", "give api_key_file or api_key_env, not both")
        if self.backend == "kubernetes":
            for name in ("api_key_file", "api_key_env"):
                if getattr(self, name):
                    problems.add(name, "the kubernetes backend's pods read the key from a Secret: set "
                                       "kubernetes.api_key_secret: {name, key} instead (the agent never holds it)")
            if self.local is not None:
                problems.add("local", "applies to the local backend only; with kubernetes, TLS comes from "
                                      "kubernetes.tls_secret")
        problems.raise_if_any()
        return self


def node_pool_label(cloud: str, settings: KubernetesReplicas) -> str:
    return settings.node_pool_label or NODE_POOL_LABELS.get(cloud, NODE_POOL_LABELS["local"])


def tolerations(cloud: str, tier: str, settings: KubernetesReplicas) -> list[dict]:
    """The pod's tolerations: the spec's, or the GPU taint plus the cloud's spot taint on spot pools."""
    if settings.tolerations is not None:
        return [t.to_k8s() for t in settings.tolerations]
    out = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    if tier == "spot":
        out += [dict(t) for t in SPOT_TAINTS.get(cloud, [])]
    return out


def reclaim_taints(settings: KubernetesReplicas) -> list[str]:
    if settings.reclaim.taints is not None:
        return list(settings.reclaim.taints)
    return [key for keys in RECLAIM_TAINTS.values() for key in keys]


def reclaim_conditions(settings: KubernetesReplicas) -> list[dict]:
    if settings.reclaim.conditions is not None:
        return [c.model_dump() for c in settings.reclaim.conditions]
    return [dict(SHUTDOWN_CONDITION)]


def reclaim_cordon(cloud: str, settings: KubernetesReplicas) -> bool:
    return settings.reclaim.cordon if settings.reclaim.cordon is not None else cloud == "aws"


def reclaim_notice_s(cloud: str, settings: KubernetesReplicas) -> float:
    return settings.reclaim.notice_s or RECLAIM_NOTICE_S.get(cloud, 120.0)


__all__ = ["Endpoint", "KubernetesReplicas", "ModelCache", "NODE_POOL_LABELS", "RECLAIM_NOTICE_S", "RECLAIM_TAINTS",
           "ReclaimCondition", "ReclaimSignals", "Replicas", "SecretKeyRef", "Toleration", "node_pool_label", "reclaim_conditions",
           "reclaim_cordon", "reclaim_notice_s", "reclaim_taints", "tolerations"]
