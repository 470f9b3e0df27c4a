"""Pure builders of what the kubernetes backend asks the API server for: a replica's pod, its
optional Service, and Events. Plain dicts in the API's own JSON shape (camelCase), so tests can
validate them against the Kubernetes schemas and the client sends them as they are.

The pod contract (docs/kubernetes.md, "How replicas run as pods"): name ``mr-<replica id>``
(DNS-1123, truncated with a hash when long or not DNS-safe); labels naming the manager, cluster,
replica, deployment, pool and revision; annotations with the directive id and the placement record
(what a restarted agent re-adopts it from); ``restartPolicy: Always``; pinned to the chosen node by
``nodeAffinity`` on ``metadata.name`` plus the pool's node selector; ``nvidia.com/gpu`` limits;
readiness on SGLang's ``/health``; ``preStop`` draining through the adapter; the grace period from
the drain deadline; the weights cache on a volume; no secret in args or env (the API key comes
from a Secret volume the spec names)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence

from runtime_adapter import serve as adapter_serve

from meridian.fleet import models
from meridian.spec import replicas as replicas_spec

from agents.backends import base

MANAGED_BY = "meridian-agent"
APP_NAME = "meridian-replica"
L_MANAGED_BY = "app.kubernetes.io/managed-by"
L_NAME = "app.kubernetes.io/name"
L_CLUSTER = "meridian.dev/cluster"
L_REPLICA = "meridian.dev/replica-id"
L_DEPLOYMENT = "meridian.dev/deployment"
L_POOL = "meridian.dev/pool"
L_REVISION = "meridian.dev/revision"
A_DIRECTIVE = "meridian.dev/directive-id"
A_PLACEMENT = "meridian.dev/placement"
A_DRAIN = "meridian.dev/drain"  # JSON {began, deadline} (Unix s): a drain this agent began (finished on re-adoption)
GPU_RESOURCE = "nvidia.com/gpu"
CONTAINER = "engine"
CACHE_VOLUME = "model-cache"
API_KEY_VOLUME = "api-key"
API_KEY_DIR = "/var/run/secrets/meridian/api-key"  # the Secret's one key is mounted here, as file API_KEY_FILE
API_KEY_FILE = "api-key"
TLS_VOLUME = "tls"
TLS_DIR = "/var/run/secrets/meridian/tls"  # tls.crt and tls.key of the spec's kubernetes.io/tls Secret
NAME_PREFIX = "mr-"
MAX_NAME = 63  # a Service name (DNS-1035 label) and the pod's hostname are 63 characters at most
_DNS_SAFE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_SAFE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _digest(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def pod_name(replica_id: str) -> str:
    """``mr-<replica id>`` when that is a DNS label; otherwise a DNS-safe form of the id, cut to fit,
    with a hash of the full id so distinct ids never share a name. Deterministic: a resent start
    names the same pod, and the API server's 409 says it exists."""
    plain = NAME_PREFIX + replica_id
    if _DNS_SAFE.match(plain) and len(plain) <= MAX_NAME:
        return plain
    safe = re.sub(r"[^a-z0-9-]+", "-", replica_id.lower()).strip("-")
    room = MAX_NAME - len(NAME_PREFIX) - 9
    return f"{NAME_PREFIX}{safe[:room].rstrip('-') or 'r'}-{_digest(replica_id)}"


def label_value(text: str) -> str:
    """``text`` when it is a valid label value (<= 63, alphanumeric ends), else a safe form with a hash."""
    if text == "" or (_LABEL_SAFE.match(text) and len(text) <= 63):
        return text
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")
    return f"{safe[:54].rstrip('-_.') or 'x'}-{_digest(text)}"


@dataclasses.dataclass(frozen=True)
class PodRequest:
    """Everything a replica's pod is built from."""

    cluster_id: str
    cloud: str
    tier: str
    node_pool_value: str
    placement: base.Placement
    directive_id: str
    runtime: models.RuntimeSpec
    engine_command: tuple[str, ...]
    engine_env: Mapping[str, str]
    settings: replicas_spec.KubernetesReplicas


def labels(cluster_id: str, placement: base.Placement) -> dict[str, str]:
    return {L_MANAGED_BY: MANAGED_BY, L_NAME: APP_NAME, L_CLUSTER: label_value(cluster_id),
            L_REPLICA: label_value(placement.replica_id), L_DEPLOYMENT: label_value(placement.deployment),
            L_POOL: label_value(placement.pool_id), L_REVISION: label_value(placement.revision)}


def cluster_selector(cluster_id: str) -> str:
    """The label selector of every pod this cluster's agent manages."""
    return f"{L_MANAGED_BY}={MANAGED_BY},{L_CLUSTER}={label_value(cluster_id)}"


def placement_annotation(placement: base.Placement) -> str:
    return json.dumps(placement.to_json(), sort_keys=True, separators=(",", ":"))


def _volume(cache: replicas_spec.ModelCache) -> dict:
    if cache.type == "pvc":
        return {"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": cache.claim_name}}
    if cache.type == "empty_dir":
        return {"name": CACHE_VOLUME, "emptyDir": {"sizeLimit": cache.size_limit} if cache.size_limit else {}}
    return {"name": CACHE_VOLUME, "hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"}}


def _env(req: PodRequest) -> list[dict]:
    s = req.settings
    env: list[dict] = [
        {"name": "MERIDIAN_REPLICA_ID", "value": req.placement.replica_id},
        {"name": "MERIDIAN_RUNTIME_SPEC", "value": adapter_serve.runtime_spec_json(req.runtime)},
        # The engine binds the pod's own IP (downward API): on a node shared by several pods,
        # 0.0.0.0 would also do, but the pod IP is what probes and routers use.
        {"name": "MERIDIAN_BIND_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "MERIDIAN_ENGINE_PORT", "value": str(s.engine_port)},
        {"name": "MERIDIAN_ADAPTER_PORT", "value": str(s.adapter_port)},
        {"name": "MERIDIAN_ENGINE_COMMAND", "value": json.dumps(list(req.engine_command))},
        {"name": "MERIDIAN_CACHE_DIR", "value": s.model_cache.mount_path},
        {"name": "MERIDIAN_DRAIN_DEADLINE_S", "value": str(s.drain_deadline_s)},
        {"name": "MERIDIAN_STOP_GRACE_S", "value": str(s.stop_grace_s)},
    ]
    if s.api_key_secret is not None:  # the path of the mounted Secret file, never the key itself
        env.append({"name": adapter_serve.ENV["api_key_file"], "value": f"{API_KEY_DIR}/{API_KEY_FILE}"})
    if s.tls_secret:
        env += [{"name": adapter_serve.ENV["tls_cert_file"], "value": f"{TLS_DIR}/tls.crt"},
                {"name": adapter_serve.ENV["tls_key_file"], "value": f"{TLS_DIR}/tls.key"},
                {"name": adapter_serve.ENV["tls_port"], "value": str(s.tls_port)}]
    taken = {e["name"] for e in env}
    env += [{"name": k, "value": str(v)} for k, v in sorted(req.engine_env.items()) if k not in taken]
    return env


def _resources(req: PodRequest) -> dict:
    s = req.settings
    gpus = str(req.placement.gpu_count)
    limits = {GPU_RESOURCE: gpus}
    if s.cpu_limit:
        limits["cpu"] = s.cpu_limit
    if s.memory_limit:
        limits["memory"] = s.memory_limit
    return {"requests": {"cpu": s.cpu_request, "memory": s.memory_request, GPU_RESOURCE: gpus}, "limits": limits}


def pod(req: PodRequest) -> dict:
    """The replica's pod (a bare pod: the agent is its controller)."""
    s = req.settings
    p = req.placement
    container: dict = {
        "name": CONTAINER,
        "image": s.image,
        "imagePullPolicy": s.image_pull_policy,
        "command": list(s.command),
        "env": _env(req),
        "ports": [{"name": "http", "containerPort": s.engine_port, "protocol": "TCP"},
                  {"name": "adapter", "containerPort": s.adapter_port, "protocol": "TCP"}],
        "resources": _resources(req),
        # With TLS the engine listens on loopback: the kubelet probes through the relay (it does not
        # verify an HTTPS probe's certificate).
        "readinessProbe": {"httpGet": {"path": "/health", "port": "https" if s.tls_secret else "http",
                                       **({"scheme": "HTTPS"} if s.tls_secret else {})},
                           "periodSeconds": s.probe_period_s,
                           "timeoutSeconds": max(1, min(10, s.probe_period_s * 2)), "failureThreshold": 3,
                           "successThreshold": 1},
        # The adapter waits for in-flight requests (up to MERIDIAN_DRAIN_DEADLINE_S), then stops the engine.
        "lifecycle": {"preStop": {"httpGet": {"path": "/drain", "port": "adapter"}}},
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": s.model_cache.mount_path}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    volumes = [_volume(s.model_cache)]
    if p.gpu_count > 1:  # NCCL between the GPUs of a tensor-parallel replica needs a large /dev/shm
        container["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
    if s.tls_secret:
        container["ports"].append({"name": "https", "containerPort": s.tls_port, "protocol": "TCP"})
        # A Secret volume (no subPath) is updated in place when the Secret changes: the adapter
        # reloads the pair, so a rotation (cert-manager) reaches new connections without a restart.
        container["volumeMounts"].append({"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True})
        volumes.append({"name": TLS_VOLUME, "secret": {
            "secretName": s.tls_secret, "defaultMode": 0o400,
            "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}})
    if s.api_key_secret is not None:
        # The kubelet mounts the Secret's key as a file readable by the pod's user only; the adapter
        # reads it and hands it to SGLang in a private --config file.
        container["volumeMounts"].append({"name": API_KEY_VOLUME, "mountPath": API_KEY_DIR, "readOnly": True})
        volumes.append({"name": API_KEY_VOLUME, "secret": {
            "secretName": s.api_key_secret.name, "defaultMode": 0o400,
            "items": [{"key": s.api_key_secret.key, "path": API_KEY_FILE}]}})
    spec: dict = {
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": s.drain_deadline_s + s.stop_grace_s,
        "automountServiceAccountToken": False,  # the engine needs no API access
        "enableServiceLinks": False,
        "nodeSelector": {replicas_spec.node_pool_label(req.cloud, s): req.node_pool_value},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [p.node_id]}]}]}}},
        "tolerations": replicas_spec.tolerations(req.cloud, req.tier, s),
        "containers": [container],
        "volumes": volumes,
        # The image's user (10001) owns nothing the kubelet mounts: fsGroup makes a pvc cache
        # writable and the Secret files (mode 0400, root's) readable through the group; only when
        # the volume's root is not the group's already (a cache of weights is not walked at every start).
        "securityContext": ({"runAsNonRoot": True, "runAsUser": s.run_as_user, "runAsGroup": s.run_as_user,
                             "fsGroup": s.run_as_user, "fsGroupChangePolicy": "OnRootMismatch",
                             "seccompProfile": {"type": "RuntimeDefault"}}
                            if s.run_as_user is not None else {"seccompProfile": {"type": "RuntimeDefault"}}),
    }
    if s.run_as_user is not None and s.model_cache.type == "host_path" and s.model_cache.chown_host_path:
        # The kubelet creates a missing host_path directory owned by root (0755): the engine's user
        # could not write weights there. This step gives the directory (not its contents: files
        # already there were written by the same user) to that user, with CAP_CHOWN alone.
        path, uid = s.model_cache.mount_path, s.run_as_user
        spec["initContainers"] = [{
            "name": "model-cache-owner",
            "image": s.image,
            "imagePullPolicy": s.image_pull_policy,
            "command": ["python3", "-c", f"import os; os.chown({path!r}, {uid}, {uid})"],
            "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": path}],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
            "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}},
        }]
    if s.service_account:
        spec["serviceAccountName"] = s.service_account
    if s.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in s.image_pull_secrets]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name(p.replica_id), "namespace": s.namespace, "labels": labels(req.cluster_id, p),
                     "annotations": {A_DIRECTIVE: req.directive_id, A_PLACEMENT: placement_annotation(p)}},
        "spec": spec,
    }


def service(pod_object: Mapping, settings: replicas_spec.KubernetesReplicas) -> dict:
    """A per-replica Service selecting exactly this pod, owned by it (deleted with it), of the
    spec's type; its port is the engine port (the TLS port with ``tls_secret``)."""
    meta = pod_object["metadata"]
    lbl = meta.get("labels", {})
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta.get("uid", "")}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": meta["name"], "namespace": meta.get("namespace", settings.namespace),
                     "labels": {k: lbl[k] for k in (L_MANAGED_BY, L_CLUSTER, L_REPLICA) if k in lbl},
                     "ownerReferences": [owner] if owner["uid"] else []},
        "spec": {"type": settings.endpoint.service_type,
                 # NodePort/LoadBalancer: only the replica's own node forwards (its address is the
                 # endpoint), keeping the router's address, which the replicas' NetworkPolicy admits.
                 **({"externalTrafficPolicy": "Local"} if settings.endpoint.service_type != "ClusterIP" else {}),
                 "selector": {L_CLUSTER: lbl.get(L_CLUSTER, ""), L_REPLICA: lbl.get(L_REPLICA, "")},
                 "ports": [{"name": "https", "port": settings.tls_port, "targetPort": "https", "protocol": "TCP"}
                           if settings.tls_secret else
                           {"name": "http", "port": settings.engine_port, "targetPort": "http", "protocol": "TCP"}]},
    }


def event(pod_object: Mapping, reason: str, message: str, *, type_: str = "Normal", now_iso: str,
          component: str = MANAGED_BY) -> dict:
    """A core/v1 Event about the pod (``reason``: Created, Adopted, Draining, Failed, ...)."""
    meta = pod_object["metadata"]
    name = f"{meta['name']}.{_digest(reason + message + now_iso, 10)}"
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": meta.get("namespace", "default")},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                           "namespace": meta.get("namespace", "default"), "uid": meta.get("uid", "")},
        "reason": reason, "message": message[:1024], "type": type_, "count": 1,
        "firstTimestamp": now_iso, "lastTimestamp": now_iso, "source": {"component": component},
        "reportingComponent": component, "reportingInstance": component,
    }


def read_placement(pod_object: Mapping) -> base.Placement | None:
    """The placement record a pod carries, or None when it has none or it does not match the pod's
    labels (a pod without a valid record is not re-adopted)."""
    meta = pod_object.get("metadata", {})
    raw = (meta.get("annotations") or {}).get(A_PLACEMENT)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        placement = base.Placement.from_json(data)
    except (ValueError, TypeError, KeyError):
        return None
    if not placement.replica_id or label_value(placement.replica_id) != (meta.get("labels") or {}).get(L_REPLICA):
        return None
    if pod_name(placement.replica_id) != meta.get("name"):
        return None
    return placement


def read_drain(pod_object: Mapping) -> dict | None:
    raw = ((pod_object.get("metadata") or {}).get("annotations") or {}).get(A_DRAIN)
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def drain_annotation(began: float, deadline: float) -> str:
    return json.dumps({"began": round(began, 3), "deadline": round(deadline, 3)}, sort_keys=True)


def tolerated(taint: Mapping, tolerations: Sequence[Mapping]) -> bool:
    """Whether a taint is tolerated (the scheduler's rule: key match or empty key with Exists;
    Equal compares values; an empty toleration effect matches every effect)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        key = t.get("key")
        if key and key != taint.get("key"):
            continue
        if not key and t.get("operator") != "Exists":
            continue
        if t.get("operator", "Equal") == "Exists" or (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


__all__ = ["A_DIRECTIVE", "A_DRAIN", "A_PLACEMENT", "GPU_RESOURCE", "L_CLUSTER", "L_REPLICA", "PodRequest",
           "cluster_selector", "drain_annotation", "event", "label_value", "labels", "placement_annotation", "pod",
           "pod_name", "read_drain", "read_placement", "service", "tolerated"]
