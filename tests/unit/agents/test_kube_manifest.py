"""The kubernetes backend's pure pod and Service builders: names, labels, annotations, pinning,
GPUs, probes, preStop, grace period, cache volume, environment; every built object validates
against the real Kubernetes schema (kubernetes-validate, strict)."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from meridian import spec
from meridian.fleet import models

from agents import backends
from agents.backends.kubernetes import adoption, manifest, tracked

K8S_VERSION = kubernetes_validate.latest_version()

CLUSTER = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: aks-eus}
spec:
  cloud: azure
  region: eastus
  provider: sim
  auth: {token_env: T}
  pools:
    - {name: a100-spot, instance_type: Standard_NC24ads_A100_v4, tier: spot}
  replicas:
    backend: kubernetes
    kubernetes: KUBE
"""


def _settings(**kube) -> spec.cluster.ClusterSpec:
    kube = {"image": "ghcr.io/acme/meridian-replica:0.1.0", **kube}
    text = CLUSTER.replace("KUBE", json.dumps(kube))
    return spec.load_text(text, "c.yaml").of_kind("Cluster")[0].spec


def _request(replica_id: str = "chat-7f3a", gpus: int = 1, **kube) -> manifest.PodRequest:
    s = _settings(**kube)
    placement = backends.Placement(replica_id, "chat", "rev-2", "a100-spot", "aks-spot-vmss000001", gpus, "A100-80GB")
    runtime = models.RuntimeSpec("meta-llama/Llama-3.1-8B-Instruct", "llama", tp_size=gpus, env={"X": "1"})
    return manifest.PodRequest("aks-eus", "azure", "spot", s.pools[0].node_pool_value, placement, "d-42", runtime,
                               ("python3", "-m", "sglang.launch_server"), {"MERIDIAN_EMULATOR_GPU_TYPE": "A100-80GB"},
                               s.replicas.kubernetes)


def _env(pod: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_the_pod_validates_against_the_kubernetes_schema():
    """A built pod (and its Service, and an Event) pass the strict Kubernetes schema."""
    pod = manifest.pod(_request(gpus=2))
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    settings = _settings(endpoint={"mode": "service", "service_type": "LoadBalancer"}).replicas.kubernetes
    created = {**pod, "metadata": {**pod["metadata"], "uid": "0d6c-uid"}}
    kubernetes_validate.validate(manifest.service(created, settings), K8S_VERSION, strict=True)
    ev = manifest.event(created, "Draining", "drain within 120s", now_iso="2026-12-01T10:00:00Z")
    kubernetes_validate.validate(ev, K8S_VERSION, strict=True)


def test_a_schema_violation_would_be_caught():
    """The schema check is real: a pod with a misspelt field fails it."""
    pod = manifest.pod(_request())
    pod["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_labels_annotations_and_pinning():
    """The pod carries the contract's labels and annotations and is pinned to the chosen node of
    the pool, with the pool's node selector and the GPU and spot tolerations."""
    pod = manifest.pod(_request())
    meta, spec_ = pod["metadata"], pod["spec"]
    assert meta["name"] == "mr-chat-7f3a" and meta["namespace"] == "meridian"
    assert meta["labels"] == {"app.kubernetes.io/managed-by": "meridian-agent", "app.kubernetes.io/name": "meridian-replica",
                              "meridian.dev/cluster": "aks-eus", "meridian.dev/replica-id": "chat-7f3a",
                              "meridian.dev/deployment": "chat", "meridian.dev/pool": "a100-spot",
                              "meridian.dev/revision": "rev-2"}
    assert meta["annotations"]["meridian.dev/directive-id"] == "d-42"
    assert json.loads(meta["annotations"]["meridian.dev/placement"])["node_id"] == "aks-spot-vmss000001"
    assert manifest.read_placement(pod) == _request().placement
    assert spec_["nodeSelector"] == {"kubernetes.azure.com/agentpool": "a100-spot"}
    term = spec_["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["aks-spot-vmss000001"]}]}
    keys = {t["key"] for t in spec_["tolerations"]}
    assert keys == {"nvidia.com/gpu", "kubernetes.azure.com/scalesetpriority"}
    assert spec_["restartPolicy"] == "Always"


def test_engine_container_resources_probes_and_drain():
    """GPUs as nvidia.com/gpu limits, readiness on SGLang's /health, preStop /drain on the adapter
    port, the grace period = drain deadline + stop grace, the cache volume at the cache dir."""
    pod = manifest.pod(_request(gpus=2, drain_deadline_s=90, stop_grace_s=10,
                                model_cache={"type": "pvc", "claim_name": "weights"}))
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2" and c["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["lifecycle"]["preStop"]["httpGet"] == {"path": "/drain", "port": "adapter"}
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"http": 30000, "adapter": 30001}
    assert pod["spec"]["terminationGracePeriodSeconds"] == 100
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "weights"}} in pod["spec"]["volumes"]
    assert {"name": "model-cache", "mountPath": "/var/lib/meridian/models"} in c["volumeMounts"]
    assert any(v.get("emptyDir", {}).get("medium") == "Memory" for v in pod["spec"]["volumes"])  # /dev/shm for tp 2
    host = manifest.pod(_request())["spec"]["volumes"]
    assert host == [{"name": "model-cache", "hostPath": {"path": "/var/lib/meridian/models", "type": "DirectoryOrCreate"}}]


def test_environment_carries_the_runtime_spec_and_no_secret_in_args():
    """The RuntimeSpec travels as JSON in the environment, the bind host from the pod IP (downward
    API), the engine command and emulator settings as variables; the container args hold none."""
    pod = manifest.pod(_request())
    env = _env(pod)
    runtime = json.loads(env["MERIDIAN_RUNTIME_SPEC"])
    assert runtime["model_path"] == "meta-llama/Llama-3.1-8B-Instruct" and runtime["env"] == {"X": "1"}
    assert env["MERIDIAN_BIND_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert json.loads(env["MERIDIAN_ENGINE_COMMAND"]) == ["python3", "-m", "sglang.launch_server"]
    assert env["MERIDIAN_EMULATOR_GPU_TYPE"] == "A100-80GB" and env["MERIDIAN_DRAIN_DEADLINE_S"] == "120"
    c = pod["spec"]["containers"][0]
    assert c["command"] == ["python3", "-m", "runtime_adapter", "serve"] and "args" not in c
    assert pod["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize("replica_id", ["Chat_Replica.7", "x" * 128, "chat-" + "a" * 70])
def test_names_and_labels_stay_within_kubernetes_limits(replica_id):
    """Any valid replica id gives a DNS-1035 pod name of <= 63 characters and valid label values;
    distinct ids give distinct names; the record still reads back."""
    pod = manifest.pod(_request(replica_id))
    name = pod["metadata"]["name"]
    assert len(name) <= 63 and name.startswith("mr-") and name == name.lower()
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert manifest.pod_name(replica_id) != manifest.pod_name(replica_id + "x")
    assert all(len(v) <= 63 for v in pod["metadata"]["labels"].values())
    assert manifest.read_placement(pod).replica_id == replica_id


def test_a_record_that_does_not_match_its_pod_is_not_trusted():
    """A placement annotation naming another replica than the pod's labels, or unreadable, is no record."""
    pod = manifest.pod(_request())
    pod["metadata"]["annotations"]["meridian.dev/placement"] = json.dumps({"replica_id": "other"})
    assert manifest.read_placement(pod) is None
    pod["metadata"]["annotations"]["meridian.dev/placement"] = "{not json"
    assert manifest.read_placement(pod) is None


def test_service_selects_only_its_replica_and_is_owned_by_the_pod():
    """The per-replica Service selects the replica's labels, targets the engine port and is owned by the pod."""
    settings = _settings(endpoint={"mode": "service", "service_type": "NodePort"}).replicas.kubernetes
    pod = manifest.pod(_request())
    pod["metadata"]["uid"] = "uid-1"
    svc = manifest.service(pod, settings)
    assert svc["spec"]["type"] == "NodePort" and svc["metadata"]["name"] == pod["metadata"]["name"]
    assert svc["spec"]["selector"] == {"meridian.dev/cluster": "aks-eus", "meridian.dev/replica-id": "chat-7f3a"}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 30000, "targetPort": "http", "protocol": "TCP"}]
    assert svc["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    # The endpoint is the replica's own node: only it forwards, keeping the router's address for
    # the NetworkPolicy's ipBlocks (a ClusterIP Service has no external traffic).
    assert svc["spec"]["externalTrafficPolicy"] == "Local"
    inside = _settings(endpoint={"mode": "service", "service_type": "ClusterIP"}).replicas.kubernetes
    assert "externalTrafficPolicy" not in manifest.service(pod, inside)["spec"]


def test_tolerations_follow_the_schedulers_rule():
    """A taint is tolerated by Exists on its key, by Equal with its value, by an empty key with Exists."""
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert manifest.tolerated(taint, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert manifest.tolerated(taint, [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}])
    assert not manifest.tolerated(taint, [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "true"}])
    assert not manifest.tolerated(taint, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}])
    assert manifest.tolerated(taint, [{"operator": "Exists"}])


def test_the_built_pod_is_plain_json_data():
    """The pod holds only JSON types (no tuples or objects), so the client sends exactly this."""
    pod = manifest.pod(_request(gpus=2))
    assert json.loads(json.dumps(pod)) == pod


def test_adoption_decisions_follow_the_pods_own_records():
    """A restarted agent keeps a pod with a valid record, deletes one without, finishes a recorded
    drain with what is left of its deadline, and only tracks a pod already ending."""
    now = 1_800_000_000.0
    pod = manifest.pod(_request())
    assert adoption.decide(pod, now=now, stop_grace_s=15, default_grace_s=135).kind == "adopt"
    orphan = json.loads(json.dumps(pod))
    del orphan["metadata"]["annotations"]["meridian.dev/placement"]
    d = adoption.decide(orphan, now=now, stop_grace_s=15, default_grace_s=135)
    assert (d.kind, d.grace_s) == ("orphan", 135)
    draining = json.loads(json.dumps(pod))
    draining["metadata"]["annotations"]["meridian.dev/drain"] = manifest.drain_annotation(now - 10, now + 50)
    d = adoption.decide(draining, now=now, stop_grace_s=15, default_grace_s=135)
    assert (d.kind, d.grace_s, d.draining) == ("finish_drain", 65, True)
    draining["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    assert adoption.decide(draining, now=now, stop_grace_s=15, default_grace_s=135).kind == "ending"


def test_the_api_key_comes_from_the_named_secret_as_a_file_never_as_a_value():
    """With ``api_key_secret`` the pod mounts that Secret key read-only (0400) and tells the adapter
    the file's path; no arg or env value of the pod holds anything but that path, and the pod still
    passes the strict schema."""
    pod = manifest.pod(_request(api_key_secret={"name": "llama-api-key", "key": "token"}))
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    container = pod["spec"]["containers"][0]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == manifest.API_KEY_VOLUME)
    assert volume["secret"] == {"secretName": "llama-api-key", "defaultMode": 0o400,
                                "items": [{"key": "token", "path": manifest.API_KEY_FILE}]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == manifest.API_KEY_VOLUME)
    assert mount == {"name": manifest.API_KEY_VOLUME, "mountPath": manifest.API_KEY_DIR, "readOnly": True}
    assert _env(pod)["MERIDIAN_API_KEY_FILE"] == f"{manifest.API_KEY_DIR}/{manifest.API_KEY_FILE}"
    assert all("api-key" not in a.lower() for a in container["command"])
    plain = manifest.pod(_request())
    assert "MERIDIAN_API_KEY_FILE" not in _env(plain)
    assert all(v["name"] != manifest.API_KEY_VOLUME for v in plain["spec"]["volumes"])


def test_the_api_key_settings_are_validated_with_their_field_path():
    """A Secret reference must name a valid Secret and key, and the agent-read key settings are
    refused on the kubernetes backend (its pods read a Secret) naming the field."""
    with pytest.raises(spec.SpecError) as bad_ref:
        _settings(api_key_secret={"name": "Not_A_Name", "key": "token"})
    assert "api_key_secret.name" in str(bad_ref.value)
    text = CLUSTER.replace("KUBE", json.dumps({"image": "ghcr.io/acme/meridian-replica:0.1.0"}))
    text = text.replace("    backend: kubernetes\n", "    backend: kubernetes\n    api_key_file: /etc/key\n")
    with pytest.raises(spec.SpecError) as wrong_backend:
        spec.load_text(text, "c.yaml")
    assert "replicas.api_key_file" in str(wrong_backend.value) and "api_key_secret" in str(wrong_backend.value)


def test_a_tls_secret_makes_the_pod_serve_https_from_the_mounted_pair():
    """With ``tls_secret`` the pod mounts the Secret's tls.crt/tls.key read-only, gives the adapter
    their paths and the TLS port, probes readiness over HTTPS on it, and its Service exposes that
    port; the pod and Service pass the strict schema."""
    pod = manifest.pod(_request(tls_secret="replica-tls", tls_port=30443))
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    c = pod["spec"]["containers"][0]
    env = _env(pod)
    assert env["MERIDIAN_TLS_CERT_FILE"] == f"{manifest.TLS_DIR}/tls.crt"
    assert env["MERIDIAN_TLS_KEY_FILE"] == f"{manifest.TLS_DIR}/tls.key" and env["MERIDIAN_TLS_PORT"] == "30443"
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == manifest.TLS_VOLUME)
    assert volume["secret"]["secretName"] == "replica-tls" and volume["secret"]["defaultMode"] == 0o400
    assert {"name": "https", "containerPort": 30443, "protocol": "TCP"} in c["ports"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "https", "scheme": "HTTPS"}
    settings = _settings(tls_secret="replica-tls", endpoint={"mode": "service", "service_type": "NodePort"})
    created = {**pod, "metadata": {**pod["metadata"], "uid": "0d6c-uid"}}
    svc = manifest.service(created, settings.replicas.kubernetes)
    kubernetes_validate.validate(svc, K8S_VERSION, strict=True)
    assert svc["spec"]["ports"] == [{"name": "https", "port": 30443, "targetPort": "https", "protocol": "TCP"}]
    plain = manifest.pod(_request())
    assert plain["spec"]["containers"][0]["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    with pytest.raises(spec.SpecError, match="tls_port"):
        _settings(tls_secret="replica-tls", tls_port=30000)


def test_endpoints_are_https_on_the_tls_port_when_the_pod_serves_tls():
    """The reported endpoint carries the scheme the pod serves, for the pod IP and a Service."""
    assert tracked.endpoint("10.0.0.7", None, mode="pod_ip", port=30443, scheme="https") == "https://10.0.0.7:30443"
    svc = {"spec": {"type": "NodePort", "ports": [{"nodePort": 31443}]}}
    assert tracked.endpoint("", svc, mode="service", port=30443, node_address="203.0.113.9",
                            scheme="https") == "https://203.0.113.9:31443"
    assert tracked.endpoint("10.0.0.7", None, mode="pod_ip", port=30000) == "http://10.0.0.7:30000"


def test_the_engine_runs_as_the_images_user_and_can_write_its_cache_and_read_its_secrets():
    """The replica image runs as 10001, and the kubelet mounts what it creates as root: fsGroup
    makes a pvc cache writable and the Secret files (0400) readable through the group, and for a
    host_path cache (the default; the kubelet creates the directory root-owned, 0755) a step with
    CAP_CHOWN alone gives the directory to that user before the engine starts. run_as_user null
    leaves the image's own user."""
    pod = manifest.pod(_request(api_key_secret={"name": "replica-key", "key": "key"}))
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    ctx = pod["spec"]["securityContext"]
    assert (ctx["runAsUser"], ctx["runAsGroup"], ctx["fsGroup"], ctx["runAsNonRoot"]) == (10001, 10001, 10001, True)
    assert ctx["fsGroupChangePolicy"] == "OnRootMismatch"  # a cache of weights is not re-owned at every start
    [init] = pod["spec"]["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert init["command"][-1] == "import os; os.chown('/var/lib/meridian/models', 10001, 10001)"
    assert init["volumeMounts"] == [{"name": manifest.CACHE_VOLUME, "mountPath": "/var/lib/meridian/models"}]
    assert pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False

    pvc = manifest.pod(_request(model_cache={"type": "pvc", "claim_name": "weights"}))
    assert "initContainers" not in pvc["spec"] and pvc["spec"]["securityContext"]["fsGroup"] == 10001
    bootstrapped = manifest.pod(_request(model_cache={"type": "host_path", "chown_host_path": False}))
    assert "initContainers" not in bootstrapped["spec"] and bootstrapped["spec"]["securityContext"]["runAsUser"] == 10001
    own = manifest.pod(_request(run_as_user=None))
    kubernetes_validate.validate(own, K8S_VERSION, strict=True)
    assert "initContainers" not in own["spec"] and "runAsUser" not in own["spec"]["securityContext"]
