"""Helpers for the kubernetes backend's integration tests: a ``FakeCluster`` whose nodes are the sim
cloud's (same names, the pool label, GPUs per node from the catalog), a Cluster spec choosing the
kubernetes backend with that cluster's kubeconfig, and an agent built from it (imported by name:
this directory is on sys.path under pytest's default import mode)."""

from __future__ import annotations

import contextlib
import json
import pathlib
import sys

from kubernetes_asyncio import client, config

from meridian import spec

from agents.testing import kube

import agent_it_helpers as h

NAMESPACE = "meridian"
POOL_LABEL = "meridian.dev/pool"
IMAGE = "meridian/replica:test"
# Pools of the sim cloud: (name, instance type, GPUs per node, initial nodes, tier).
POOLS = (("l4", "g6.12xlarge", 4, 2, "on_demand"), ("l4-spot", "g6.xlarge", 1, 1, "spot"))


def pools_yaml() -> str:
    rows = "\n".join(f"    - {{name: {n}, instance_type: {t}, tier: {tier}, max_nodes: 3, initial_nodes: {k}}}"
                     for n, t, _, k, tier in POOLS)
    return f"""  cloud: aws
  region: us-east-1
  zone: us-east-1a
  provider: sim
  pools:
{rows}
  sim: {{provisioning_delay_s: 1, spot_preemptions_per_node_hour: 0}}"""


def sim_node_names(cluster_id: str) -> dict[str, list[str]]:
    """The sim cloud's node names per pool (``<cluster>-<pool>-NNNN``, in order)."""
    return {n: [f"{cluster_id}-{n}-{i:04d}" for i in range(1, k + 1)] for n, _, _, k, _ in POOLS}


def add_sim_nodes(fake: kube.FakeCluster, cluster_id: str) -> dict[str, list[str]]:
    """A Node per sim node (what NodeSync does in the demo), labelled with its pool."""
    names = sim_node_names(cluster_id)
    gpus = {n: g for n, _, g, _, _ in POOLS}
    types = {n: t for n, t, _, _, _ in POOLS}
    for pool, nodes in names.items():
        for node in nodes:
            fake.add_node(node, labels={POOL_LABEL: pool, "node.kubernetes.io/instance-type": types[pool]},
                          gpus=gpus[pool])
    return names


def kube_settings(kubeconfig: pathlib.Path, **overrides) -> dict:
    """The replicas.kubernetes section for tests: quick probes and short graces."""
    settings = {"image": IMAGE, "namespace": NAMESPACE, "kubeconfig": str(kubeconfig), "node_pool_label": POOL_LABEL,
                "command": ["python", "-m", "runtime_adapter", "serve"], "probe_period_s": 1, "stop_grace_s": 3,
                "drain_deadline_s": 20, "pod_start_timeout_s": 90, "max_restarts": 3, "cpu_request": "100m",
                "memory_request": "256Mi", "model_cache": {"type": "empty_dir"}}
    settings.update(overrides)
    return settings


def cluster_doc(name: str, *, address: str, state_dir: pathlib.Path, kubeconfig: pathlib.Path,
                **kube_overrides) -> spec.Cluster:
    text = h.cluster_text(name, pools_yaml(), address=address, state_dir=str(state_dir))
    text += "  replicas:\n    backend: kubernetes\n    kubernetes: " + json.dumps(kube_settings(kubeconfig, **kube_overrides)) + "\n"
    return spec.load_text(text, f"{name}.yaml").of_kind("Cluster")[0]


def build_agent(cluster: spec.Cluster, state_dir: pathlib.Path, **kwargs):
    kwargs.setdefault("backend_options", {"backoff_initial_s": 0.2, "backoff_max_s": 1.0, "adopt_timeout_s": 10.0})
    return h.build_agent(cluster, state_dir, **kwargs)


@contextlib.asynccontextmanager
async def fake_cluster(tmp_path: pathlib.Path, **options):
    """A started FakeCluster (quick restart backoff, frequent bookmarks) with the test namespace;
    stopped afterwards (which kills every container)."""
    fake = kube.FakeCluster(workdir=tmp_path / "kube", restart_backoff_scale=0.05, bookmark_interval_s=0.5, **options)
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@contextlib.asynccontextmanager
async def core_api(kubeconfig: pathlib.Path):
    """A CoreV1Api of the real client from the cluster's kubeconfig (a writer other than the agent)."""
    api_client = await config.new_client_from_config(config_file=str(kubeconfig))
    try:
        yield client.CoreV1Api(api_client)
    finally:
        await api_client.close()


def our_pods(fake: kube.FakeCluster) -> list[dict]:
    return [p for p in fake.pods(NAMESPACE) if p["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by")
            == "meridian-agent"]


def pod_of(fake: kube.FakeCluster, replica_id: str) -> dict | None:
    for p in fake.pods(NAMESPACE):
        if p["metadata"].get("labels", {}).get("meridian.dev/replica-id") == replica_id:
            return p
    return None


PYTHON = sys.executable
