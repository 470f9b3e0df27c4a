"""On the SkyServe-like fleet, where every deployment may run wholly on spot, a preemption wave that
takes every spot node of one region leaves the embedding model a routable replica: the per-region
spot cap (placement.spot.max_share_per_region) keeps part of its capacity elsewhere."""

from __future__ import annotations

import pathlib

import yaml

from meridian.simulate import defaults, runner, scenario

SKY = defaults.examples_dir() / "scenarios" / "skyserve-like"
# Every region with spot pools of the SkyServe-like fleet loses all of them, one after another.
WAVES = [{"at_h": 0.5 + 0.4 * i, "region": r, "share": 1.0}
         for i, r in enumerate(["us-east-1", "us-central1", "eu-west-1", "europe-west4", "eastus2", "westeurope"])]


def _specs(tmp: pathlib.Path, region_share: float | None) -> list[str]:
    """The SkyServe-like specs, with embed's max_share_per_region set (None: the default)."""
    docs = list(yaml.safe_load_all((SKY / "deployments.yaml").read_text()))
    for doc in docs:
        if doc["metadata"]["name"] == "embed" and region_share is not None:
            doc["spec"]["placement"]["spot"]["max_share_per_region"] = region_share
    (tmp / "deployments.yaml").write_text(yaml.safe_dump_all(docs))
    return [str(tmp / "deployments.yaml"), str(SKY / "capacity-policy.yaml"), str(SKY / "clusters.yaml"),
            str(defaults.examples_dir() / "latency-overrides.yaml")]


def _no_replica(tmp: pathlib.Path, region_share: float | None) -> float:
    sc = scenario.parse({
        "name": "spread", "specs": _specs(tmp, region_share), "hours": 2.5, "start_utc_hour": 14.0, "seed": 3,
        "warmup_min": 20.0, "fidelity": {"samples_per_stream": 4},
        "traffic": [{"deployment": "embed", "peak_rps": {"na-east": 8.0, "eu-west": 6.0}}],
        "spot": {"preemptions_per_node_hour": 0.0, "waves": WAVES},
    }, tmp, "spread")
    runner.quiet_components()
    result = runner.run(sc, ["meridian"], jobs=1, with_bound=False).result("meridian")
    return result.stats.get("failed_no_replica", 0.0)


def test_a_wave_over_one_regions_spot_leaves_the_embedding_model_a_replica(tmp_path):
    """With the default cap no wave leaves embed without a routable replica; with the cap off
    (max_share_per_region 1) its replicas sit on one region's spot and a wave fails its requests."""
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    assert _no_replica(tmp_path / "on", None) == 0
    assert _no_replica(tmp_path / "off", 1.0) > 0
