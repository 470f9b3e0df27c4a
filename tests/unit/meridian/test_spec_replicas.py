"""The Cluster spec's ``replicas`` section: the backend choice, the kubernetes backend's settings,
their validation and the per-cloud defaults."""

from __future__ import annotations

import pytest
import yaml

from meridian import spec
from meridian.spec import replicas as replicas_spec

CLUSTER = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c1}
spec:
  cloud: azure
  region: eastus
  provider: sim
  auth: {token_env: TOKEN}
  pools:
    - {name: a100, instance_type: Standard_NC24ads_A100_v4}
    - {name: a100-spot, instance_type: Standard_NC24ads_A100_v4, tier: spot, resource: gpuspot, node_pool: spotpool}
"""


def _cluster(replicas: dict | None = None, cloud: str | None = None) -> str:
    doc = yaml.safe_load(CLUSTER)
    if replicas is not None:
        doc["spec"]["replicas"] = replicas
    if cloud is not None:
        doc["spec"]["cloud"] = cloud
    return yaml.safe_dump(doc)


def _load(text: str) -> spec.Cluster:
    return spec.load_text(text, "c.yaml").of_kind("Cluster")[0]


def _errors(text: str) -> list[str]:
    with pytest.raises(spec.SpecError) as info:
        spec.load_text(text, "c.yaml")
    return [f"{i.path}: {i.message}" for i in info.value.issues]


def test_the_default_backend_is_local():
    """A cluster without a replicas section runs its replicas as local processes."""
    c = _load(_cluster())
    assert c.spec.replicas.backend == "local" and c.spec.replicas.kubernetes is None


def test_kubernetes_needs_its_settings_and_misspellings_get_a_hint():
    """backend kubernetes without settings is an error on replicas.kubernetes; a misspelt backend
    name gets the closest valid one."""
    assert _errors(_cluster({"backend": "kubernetes"})) == [
        "spec.replicas.kubernetes: backend kubernetes needs its settings (at least image: the replica image)"]
    (err,) = _errors(_cluster({"backend": "kubernets", "kubernetes": {"image": "r:1"}}))
    assert err == "spec.replicas.backend: unknown value 'kubernets'; did you mean 'kubernetes'?"


def test_every_bad_kubernetes_field_is_reported_with_its_path():
    """Bad values are reported together, each at its own field path."""
    errors = _errors(_cluster({"backend": "kubernetes", "kubernetes": {
        "image": "r:1", "namespace": "Bad_NS", "cpu_request": "lots", "endpoint": {"service_type": "Ingress"},
        "reclaim": {"taints": ["no spaces allowed"]}, "model_cache": {"type": "pvc"}}}))
    paths = sorted(e.split(":")[0] for e in errors)
    assert paths == ["spec.replicas.kubernetes.cpu_request", "spec.replicas.kubernetes.endpoint.service_type",
                     "spec.replicas.kubernetes.model_cache.claim_name", "spec.replicas.kubernetes.namespace",
                     "spec.replicas.kubernetes.reclaim.taints"]
    assert _errors(_cluster({"backend": "kubernetes", "kubernetes": {"image": "r:1", "adapter_port": 30000}})) == [
        "spec.replicas.kubernetes.adapter_port: must differ from engine_port (30000)"]


def test_defaults_follow_the_cloud():
    """The node pool label, spot toleration, cordon rule and notice length default per cloud; the
    pool's label value is node_pool, then resource, then name."""
    c = _load(_cluster({"backend": "kubernetes", "kubernetes": {"image": "ghcr.io/acme/replica:1.0"}}))
    k = c.spec.replicas.kubernetes
    assert replicas_spec.node_pool_label("azure", k) == "kubernetes.azure.com/agentpool"
    assert replicas_spec.node_pool_label("aws", k) == "eks.amazonaws.com/nodegroup"
    assert [p.node_pool_value for p in c.spec.pools] == ["a100", "spotpool"]
    spot = replicas_spec.tolerations("azure", "spot", k)
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spot
    assert any(t["key"] == "kubernetes.azure.com/scalesetpriority" and t["value"] == "spot" for t in spot)
    assert replicas_spec.tolerations("azure", "on_demand", k) == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert replicas_spec.reclaim_cordon("aws", k) and not replicas_spec.reclaim_cordon("gcp", k)
    assert replicas_spec.reclaim_notice_s("gcp", k) == 30.0
    assert "aws-node-termination-handler/spot-itn" in replicas_spec.reclaim_taints(k)
    assert "cloud.google.com/impending-node-termination" in replicas_spec.reclaim_taints(k)


def test_explicit_settings_replace_the_defaults():
    """Tolerations and reclaim signals given in the spec are used as written."""
    c = _load(_cluster({"backend": "kubernetes", "kubernetes": {
        "image": "r:1", "tolerations": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
        "reclaim": {"taints": ["example.com/*"], "cordon": True, "notice_s": 45,
                    "conditions": [{"type": "PreemptScheduled"}]}}}))
    k = c.spec.replicas.kubernetes
    assert replicas_spec.tolerations("azure", "spot", k) == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
    assert replicas_spec.reclaim_taints(k) == ["example.com/*"]
    assert replicas_spec.reclaim_conditions(k) == [{"type": "PreemptScheduled", "status": "True", "message_contains": ""}]
    assert replicas_spec.reclaim_cordon("gcp", k) and replicas_spec.reclaim_notice_s("aws", k) == 45
