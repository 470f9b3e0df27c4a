"""Shared builders for the agent's unit tests: Cluster specs and a controllable clock."""

from __future__ import annotations

import re
import sys

import pytest

from meridian import spec

CLUSTER = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: NAME}
spec:
  cloud: aws
  region: us-east-1
  zone: us-east-1a
  provider: sim
  auth: {token_env: MERIDIAN_TEST_TOKEN}
  pools:
    - {name: l4, instance_type: g6.xlarge, max_nodes: 4, initial_nodes: 2}
    - {name: l4x4, instance_type: g6.12xlarge, max_nodes: 3, initial_nodes: 1}
    - {name: l4-spot, instance_type: g6.xlarge, tier: spot, max_nodes: 4, initial_nodes: 2}
    - {name: h100, instance_type: p5.48xlarge, max_nodes: 2, initial_nodes: 0}
  sim: {provisioning_delay_s: 30, spot_preemptions_per_node_hour: 0, stock_out_pools: [EXTRA]}
  agent: {engine_command: [ENGINE, -m, runtime_adapter.emulator]}
"""


def make_cluster(name: str = "test-aws", stock_out: str = "", **sim) -> spec.Cluster:
    text = CLUSTER.replace("NAME", name).replace("EXTRA", stock_out).replace("ENGINE", sys.executable)
    for key, value in sim.items():  # a setting given replaces the default's (a key twice is a YAML error)
        if f"{key}: " in text:
            text = re.sub(rf"{key}: [^,}}]+", f"{key}: {value}", text, count=1)
        else:
            text = text.replace("spot_preemptions_per_node_hour:", f"{key}: {value}, spot_preemptions_per_node_hour:")
    return spec.load_text(text, "cluster.yaml").of_kind("Cluster")[0]


class Clock:
    """A clock the test moves by hand (Unix seconds)."""

    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cluster() -> spec.Cluster:
    return make_cluster()


@pytest.fixture
def cluster_factory():
    """``make_cluster(name=..., stock_out=..., **sim settings)``."""
    return make_cluster
