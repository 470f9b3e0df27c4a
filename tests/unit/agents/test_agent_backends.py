"""The replica backend registry and the pure merge of the provider's and the backend's views of
the nodes: which nodes take replicas, which replicas lost their node, one notice per node."""

from __future__ import annotations

import subprocess
import sys

import pytest
import runtime_adapter

from meridian.fleet import models

from agents import backends, directives, nodes
from agents.backends import local
from agents.providers import base as provider_base


def _status(pool_id: str, node_ids: tuple[str, ...], gpus_per_node: int = 4) -> provider_base.PoolStatus:
    pool = models.GpuPool(pool_id, "L4", 24, gpus_per_node, "g6.12xlarge", len(node_ids), 0, 4,
                          len(node_ids) * gpus_per_node, models.Tier.SPOT, 4.6, 0)
    return provider_base.PoolStatus(pool, node_ids)


def test_registry_names_builtins_and_refuses_unknown_names(cluster, tmp_path):
    """`local` and `kubernetes` are registered names; an unknown one is refused with a hint, and
    a local backend is what `local` creates."""
    assert {"local", "kubernetes"} <= set(backends.names())
    with pytest.raises(ValueError, match="did you mean 'local'"):
        backends.create("locale", cluster, settings=backends.ReplicaSettings(), state_dir=tmp_path)
    made = backends.create("local", cluster, settings=backends.ReplicaSettings(), state_dir=tmp_path)
    assert isinstance(made, local.LocalBackend) and made.node_views() is None and made.interruptions() == []


def test_creating_a_local_backend_does_not_import_the_kubernetes_client(tmp_path):
    """A local agent never loads kubernetes_asyncio (the backend modules are imported by name)."""
    code = ("import sys, pathlib; from agents import backends; from tests.unit.agents import conftest; "
            "backends.create('local', conftest.make_cluster(), settings=backends.ReplicaSettings(), "
            f"state_dir=pathlib.Path({str(tmp_path)!r})); "
            "print('kubernetes_asyncio' in sys.modules)")
    # A fresh interpreter: this one may have imported the client already.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_a_backend_view_the_providers_nodes_are_the_truth():
    """With no view of its own (local), a pool's running nodes take replicas and define presence."""
    pools = {"l4": _status("l4", ("i-1", "i-2"))}
    sets = nodes.node_sets(pools, None)
    assert sets["l4"].nodes == ("i-1", "i-2") and sets["l4"].instance_type == "g6.12xlarge"
    assert nodes.present_nodes(pools, None) == {"l4": frozenset({"i-1", "i-2"})}


def test_the_backends_node_list_decides_placement_and_presence():
    """With a backend view, only its usable nodes take replicas, each with its allocatable GPUs; a
    pool the backend has no node of takes none; presence is the backend's."""
    pools = {"l4": _status("l4", ("i-1", "i-2", "i-3")), "h100": _status("h100", ("i-9",), 8)}
    views = {"l4": backends.NodeView("l4", usable=("node-a",), present=frozenset({"node-a", "node-b"}),
                                     gpus_by_node={"node-a": 2, "node-b": 4}, cloud_ids={"node-a": "i-1"})}
    sets = nodes.node_sets(pools, views)
    assert sets["l4"].nodes == ("node-a",) and sets["l4"].gpus_on("node-a") == 2
    assert sets["h100"].nodes == ()
    assert nodes.present_nodes(pools, views) == {"l4": frozenset({"node-a", "node-b"}), "h100": frozenset()}
    assert nodes.cloud_ids(views) == {"node-a": "i-1"}


def test_a_cloud_notice_and_a_reclaim_sign_for_one_node_are_one_notice():
    """The provider's notice (by instance id) and the backend's (by node name) for the same node merge
    into one, under the node's name, keeping the provider's id and the earlier deadline."""
    views = {"l4": backends.NodeView("l4", present=frozenset({"node-a"}), cloud_ids={"node-a": "i-1"})}
    cloud = provider_base.Interruption("i-1@1000", "l4", 1000.0, "i-1", "spot preemption")
    sign = provider_base.Interruption("kube:node-a:spot-itn", "l4", 990.0, "node-a", "tainted")
    other = provider_base.Interruption("kube:node-b", "l4", 2000.0, "node-b", "tainted")
    merged = nodes.merge_notices([cloud], [sign, other], views)
    assert set(merged) == {"node:node-a", "node:node-b"}
    assert merged["node:node-a"].notice_id == "i-1@1000" and merged["node:node-a"].node_id == "node-a"
    assert merged["node:node-a"].deadline == 990.0


def test_a_replica_too_big_for_any_node_is_refused_naming_the_node_size(cluster):
    """A start needing more GPUs than the largest usable node offers names the instance type and the
    GPUs per node the backend sees."""
    pools = {"l4": _status("l4", ("i-1",))}
    views = {"l4": backends.NodeView("l4", usable=("node-a",), present=frozenset({"node-a"}),
                                     gpus_by_node={"node-a": 4})}
    view = directives.View(pools, {p.name: p for p in cluster.spec.pools}, node_sets=nodes.node_sets(pools, views))
    action = models.StartReplica("r1", "chat", "rev", models.RuntimeSpec("m", "m", tp_size=8), "l4", 8)
    plan = directives.plan_start(action, view)
    assert isinstance(plan, directives.Refuse)
    assert plan.reason == "a replica needs 8 GPUs on one node; pool l4's nodes (g6.12xlarge) have 4 per node"


async def test_a_tls_replica_takes_two_ports_and_is_refused_when_only_one_is_left(tmp_path):
    """With TLS the relay's port is the endpoint and the engine binds 127.0.0.1 on a second port of
    the range; a range with one port left refuses, naming why two are needed."""
    tls = runtime_adapter.TlsFiles("/etc/tls.crt", "/etc/tls.key")
    settings = backends.ReplicaSettings(port_range=(32000, 32002), tls=tls, advertise_host="10.0.0.5",
                                        engine_command=("python", "-m", "runtime_adapter.emulator"))
    backend = local.LocalBackend(settings, tmp_path, is_port_free=lambda port: True)
    spec = models.RuntimeSpec(model_path="Qwen/Qwen2.5-0.5B-Instruct", served_model_name="qwen")
    action = models.StartReplica("r1", "chat", "rev", spec, "l4", 1)
    managed = backend.prepare(action, directive_id="d1", node_id="n1", gpu_ids=(0,), gpu_type="L4")
    assert (managed.port, managed.engine_port) == (32000, 32001)
    assert managed.handle.endpoint == "https://10.0.0.5:32000" and managed.handle.host == "127.0.0.1"
    argv = managed.handle.plan.argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "32001"
    backend._replicas["r1"] = managed
    assert backend.used_ports() == {32000, 32001}
    with pytest.raises(backends.Refused, match="32000-32002 .*takes two"):
        backend.prepare(models.StartReplica("r2", "chat", "rev", spec, "l4", 1), directive_id="d2", node_id="n1",
                        gpu_ids=(1,), gpu_type="L4")
    await backend.close(stop_replicas=True)
