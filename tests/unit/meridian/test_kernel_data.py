"""The GPU catalog, the latency map and the capacity model behave as the solver and emulator expect."""

from __future__ import annotations

import pytest

from meridian import capacity, catalog, latency, spec


def test_catalog_covers_every_example_region_and_pool(repo_root):
    """Every cluster in examples/ has catalog rows (GPU type, count, prices) for each of its pools."""
    import pathlib

    clusters = spec.load_files(sorted(pathlib.Path(repo_root, "examples").glob("*.yaml"))).of_kind("Cluster")
    cat = catalog.instances.default()
    assert {c.spec.cloud for c in clusters} == {"aws", "gcp", "azure"} and len(clusters) >= 6
    for c in clusters:
        for pool in c.spec.pools:
            offer = cat.lookup(c.spec.cloud, pool.instance_type, c.spec.region)
            assert offer is not None, (c.metadata.name, pool.name)
            assert offer.gpu_count >= 1 and 0 < offer.spot_price_per_hour_usd < offer.price_per_hour_usd


def test_catalog_known_instances():
    """Known instance types carry their real GPU type and count."""
    cat = catalog.instances.default()
    assert (cat.lookup("aws", "p5.48xlarge", "us-east-1").gpu_type, cat.lookup("aws", "p5.48xlarge", "us-east-1").gpu_count) == ("H100", 8)
    assert cat.lookup("gcp", "g2-standard-8", "us-central1").gpu_type == "L4"
    assert cat.lookup("azure", "Standard_ND96amsr_A100_v4", "eastus").gpu_type == "A100-80GB"
    assert set(cat.gpu_types()) <= set(catalog.gpus.names())


def test_latency_map_is_symmetric_and_geographic():
    """RTT is symmetric, near for co-located places and grows with distance."""
    m = latency.default()
    assert m.rtt_ms("na-east", "us-east-1") == m.rtt_ms("us-east-1", "na-east") < 10
    assert m.rtt_ms("eu-west", "eu-west-1") < m.rtt_ms("eu-west", "us-east-1") < m.rtt_ms("eu-west", "ap-northeast-1")
    assert 60 < m.rtt_ms("us-east-1", "eu-west-1") < 90
    with pytest.raises(latency.UnknownRegion):
        m.rtt_ms("mars", "us-east-1")
    over = m.with_overrides(overrides={("eu-west", "us-east-1"): 42.0})
    assert over.rtt_ms("us-east-1", "eu-west") == 42.0 and m.rtt_ms("us-east-1", "eu-west") != 42.0


def test_capacity_model_orders_gpus_by_hardware():
    """Faster GPUs decode faster and serve more requests/s; bigger memory holds more KV tokens."""
    arch = capacity.KNOWN_ARCHITECTURES["meta-llama/Llama-3.1-8B-Instruct"]
    w = capacity.Workload(512, 256)
    perf = {g: capacity.replica_perf(arch, g, 1) for g in ("L4", "A10G", "L40S", "A100-80GB", "H100")}
    steps = [perf[g].decode_step_s(8, 8 * 640) for g in ("L4", "A10G", "L40S", "A100-80GB", "H100")]
    assert steps == sorted(steps, reverse=True)
    rps = [perf[g].capacity_rps(w) for g in ("L4", "L40S", "H100")]
    assert rps == sorted(rps) and rps[0] > 0
    assert perf["H100"].kv_budget_tokens > perf["L4"].kv_budget_tokens


def test_capacity_sla_bounds():
    """A tighter TPOT target lowers capacity; one the GPU cannot meet gives zero."""
    arch = capacity.KNOWN_ARCHITECTURES["meta-llama/Llama-3.1-8B-Instruct"]
    p = capacity.replica_perf(arch, "A10G", 1)
    w = capacity.Workload(512, 256)
    assert p.capacity_rps(w, tpot_p99_ms=200) > p.capacity_rps(w, tpot_p99_ms=60) > 0
    assert p.capacity_rps(w, tpot_p99_ms=10) == 0
    assert p.capacity_rps(w, ttft_p99_ms=1) == 0


def test_capacity_fit_and_tensor_parallel():
    """A 70B model does not fit one H100 or H200, fits two, needs eight L4s, never fits T4s; more GPUs prefill faster."""
    arch = capacity.KNOWN_ARCHITECTURES["meta-llama/Llama-3.1-70B-Instruct"]
    with pytest.raises(capacity.DoesNotFit):
        capacity.replica_perf(arch, "H100", 1)
    assert capacity.min_gpus_to_fit(arch, "H100") == 2
    assert capacity.min_gpus_to_fit(arch, "H200") == 2
    assert capacity.min_gpus_to_fit(arch, "L4") == 8
    assert capacity.min_gpus_to_fit(arch, "T4") is None
    assert capacity.replica_perf(arch, "H100", 4).prefill_tokens_per_s > capacity.replica_perf(arch, "H200", 2).prefill_tokens_per_s
