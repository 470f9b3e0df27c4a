"""What a simulated cluster bills: catalog prices, spot prices, and a reserved commitment's price only
for the nodes it covers."""

from __future__ import annotations

import random

import pytest

from meridian import catalog, spec
from meridian.simulate import clusters, defaults

EXAMPLES = [defaults.examples_dir() / p for p in defaults.DEFAULT_SPECS]


def _cluster(name: str, reserved_nodes: int):
    loaded = spec.load_files(EXAMPLES)
    policy = loaded.of_kind("CapacityPolicy")[0].spec
    doc = next(c for c in loaded.of_kind("Cluster") if c.metadata.name == name)
    pools = [p.model_copy(update={"min_nodes": reserved_nodes, "max_nodes": reserved_nodes,
                                  "initial_nodes": reserved_nodes}) if p.tier == "reserved" else p
             for p in doc.spec.pools]
    doc = doc.model_copy(update={"spec": doc.spec.model_copy(update={"pools": pools})})
    sim = clusters.SimCluster(doc, clock=lambda: 0.0, rng=random.Random(1), notice_s=120.0, policy=policy,
                              cold_start=lambda d, g: 60.0)
    return sim, policy


def test_reserved_nodes_beyond_the_commitment_bill_on_demand():
    """The examples commit one p5 node in us-east-1 at $31.46/h; a second node in that reserved pool
    is not covered and bills the catalog's on-demand price, as the cloud would."""
    one, policy = _cluster("aws-use1", 1)
    two, _ = _cluster("aws-use1", 2)
    assert one.nodes()["h100"] == 1 and two.nodes()["h100"] == 2
    assert policy.reserved[0].nodes == 1
    on_demand = catalog.instances.default().lookup("aws", "p5.48xlarge", "us-east-1").price_per_hour_usd
    assert two.cost_per_hour_usd() - one.cost_per_hour_usd() == pytest.approx(on_demand)
    assert on_demand > policy.reserved[0].price_per_hour_usd
