"""terraform/examples/three-clouds declares the fleet of examples/clusters.yaml: one GPU cluster
module per Cluster spec, with the same cloud, region, zone and pools (name, instance type, tier,
min and max nodes)."""

from __future__ import annotations

import yaml

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
