"""terraform/examples/three-clouds declares the fleet of examples/clusters.yaml: one GPU cluster
module per Cluster spec, with the same cloud, region, zone and pools (name, instance type, tier,
min and max nodes)."""

from __future__ import annotations

import yaml

from meridian import spec as meridian_spec

from tests.terraform import hcl

EXAMPLE = hcl.TERRAFORM / "examples" / "three-clouds"
SOURCE_OF_CLOUD = {"aws": "../../modules/eks-gpu-cluster", "gcp": "../../modules/gke-gpu-cluster",
                   "azure": "../../modules/aks-gpu-cluster"}


def _clusters() -> dict[str, dict]:
    with (hcl.ROOT / "examples" / "clusters.yaml").open() as fh:
        return {d["metadata"]["name"]: d["spec"] for d in yaml.safe_load_all(fh) if d and d.get("kind") == "Cluster"}


def _calls() -> dict[str, dict]:
    module = hcl.load(EXAMPLE)
    return {args["cluster_id"]: args for args in module.calls.values() if "cluster_id" in args}


def test_every_cluster_spec_has_its_gpu_cluster_module():
    """Each Cluster of examples/clusters.yaml is one module call of its cloud's module, and no more."""
    clusters, calls = _clusters(), _calls()
    assert sorted(calls) == sorted(clusters)
    for name, spec in clusters.items():
        assert calls[name]["source"] == SOURCE_OF_CLOUD[spec["cloud"]], name


def test_regions_zones_and_pools_match():
    """Region, zone and every pool's instance type, tier and node bounds are the spec's."""
    clusters, calls = _clusters(), _calls()
    for name, spec in clusters.items():
        call = calls[name]
        assert call.get("region", call.get("location")) == spec["region"], name
        assert str(call.get("zone", "")) == str(spec.get("zone", "")), name
        want = [(p["name"], p["instance_type"], p.get("tier", "on_demand"), p.get("min_nodes", 0), p["max_nodes"])
                for p in spec["pools"]]
        got = [(p["name"], p["instance_type"], p.get("tier", "on_demand"), p.get("min_nodes", 0), p["max_nodes"])
               for p in call["pools"]]
        assert got == want, name


def test_the_control_plane_and_a_router_per_client_region():
    """One control plane, and a router region for each client region the example deployments name
    first (na-east, eu-west, ap-northeast)."""
    module = hcl.load(EXAMPLE)
    sources = [args["source"] for args in module.calls.values()]
    assert sources.count("../../modules/meridian-control-plane") == 1
    regions = sorted(args["client_region"] for args in module.calls.values() if "client_region" in args)
    assert regions == ["ap-northeast", "eu-west", "na-east"]


def _aks_cluster_spec() -> dict:
    module = hcl.load(hcl.TERRAFORM / "modules" / "aks-gpu-cluster")
    for path in hcl.tf_files(module.path):
        for block in hcl.parse(path).get("locals", []):
            if "cluster_spec" in block:
                return block["cluster_spec"]
    raise AssertionError("aks-gpu-cluster has no local.cluster_spec")


def test_the_azure_clusters_agents_size_agent_pools():
    """The AKS module gives its agent the aks provider, the managed cluster's name and resource group,
    and each pool's AKS agent pool as its resource; the example's Azure clusters, so rendered (agent
    pool = pool name without '-', as nodes.tf names them), are valid Cluster specs."""
    generated = _aks_cluster_spec()["spec"]
    assert generated["provider"] == "aks"
    assert generated["azure"]["aks_cluster"] == "${azurerm_kubernetes_cluster.this.name}"
    assert generated["azure"]["resource_group"] == "${var.resource_group_name}"
    assert "resource = azurerm_kubernetes_cluster_node_pool.gpu[p.name].name" in generated["pools"]
    nodes = hcl.parse(hcl.TERRAFORM / "modules" / "aks-gpu-cluster" / "nodes.tf")
    assert 'replace(p.name, "-", "")' in str(nodes["locals"])
    calls = [c for c in _calls().values() if c["source"] == SOURCE_OF_CLOUD["azure"]]
    assert calls
    for call in calls:
        doc = {"apiVersion": "meridian/v1", "kind": "Cluster", "metadata": {"name": call["cluster_id"]}, "spec": {
            "cloud": "azure", "region": call["location"], "zone": call["zone"], "provider": generated["provider"],
            "auth": {"token_file": "/etc/meridian/secrets/agent/token"},
            "azure": {"subscription_id": "00000000-0000-0000-0000-000000000000", "resource_group": "meridian",
                      "aks_cluster": f"meridian-{call['cluster_id']}"},
            "pools": [{"name": p["name"], "instance_type": p["instance_type"], "tier": p["tier"],
                       "min_nodes": p["min_nodes"], "max_nodes": p["max_nodes"], "resource": p["name"].replace("-", "")}
                      for p in call["pools"]]}}
        meridian_spec.load_text(yaml.safe_dump(doc), f"{call['cluster_id']}.yaml")
