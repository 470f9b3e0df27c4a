"""A simulated cluster carries out directives as the agent does: a shrink that would take a node
hosting a replica is refused (the agent's rule), not carried out by killing the replica."""

from __future__ import annotations

import random

from meridian import spec
from meridian.fleet import models as fm
from meridian.simulate import clusters, defaults

EXAMPLES = [defaults.examples_dir() / p for p in defaults.DEFAULT_SPECS]


def _start(replica_id: str, gpus: int, pool_id: str = "h100-od") -> fm.Directive:
    runtime = fm.RuntimeSpec(model_path="meta-llama/Llama-3.1-8B-Instruct", served_model_name="chat", tp_size=1)
    return fm.Directive(f"d-{replica_id}", fm.StartReplica(replica_id=replica_id, deployment="chat", revision="r1",
                                                            runtime=runtime, pool_id=pool_id, gpu_count=gpus))


def test_a_shrink_below_the_nodes_hosting_replicas_is_refused_and_kills_nothing():
    """Two 8-GPU nodes, a 6-GPU and a 4-GPU replica (one per node): 10 GPUs in use fit one node by
    count, but a shrink to one node would take a replica with it; it is refused and both keep
    running. Once one replica is gone, the shrink to one node goes through."""
    loaded = spec.load_files(EXAMPLES)
    doc = next(c for c in loaded.of_kind("Cluster") if c.metadata.name == "aws-use1")
    now = [0.0]
    sim = clusters.SimCluster(doc, clock=lambda: now[0], rng=random.Random(1), notice_s=120.0,
                              policy=loaded.of_kind("CapacityPolicy")[0].spec, cold_start=lambda d, g: 60.0,
                              provisioning_delay_s=10.0)
    ack, _ = sim.apply(fm.Directive("grow", fm.ResizePool("h100-od", 2)), now[0])
    assert ack.outcome is fm.DirectiveOutcome.ACCEPTED
    now[0] = 30.0
    sim.observe(now[0])
    assert sim.nodes()["h100-od"] == 2
    assert sim.apply(_start("a", 6), now[0])[0].outcome is fm.DirectiveOutcome.ACCEPTED
    assert sim.apply(_start("b", 4), now[0])[0].outcome is fm.DirectiveOutcome.ACCEPTED
    assert sim.replicas["a"].node_id != sim.replicas["b"].node_id

    ack, _ = sim.apply(fm.Directive("shrink", fm.ResizePool("h100-od", 1)), now[0])
    assert ack.outcome is fm.DirectiveOutcome.REFUSED
    assert "2 node(s) of pool h100-od host replicas" in ack.reason
    obs = sim.observe(now[0] + 1)
    assert obs.killed == [] and set(sim.replicas) == {"a", "b"}
    assert sim.nodes()["h100-od"] == 2

    del sim.replicas["b"]  # gone (drained and left)
    ack, _ = sim.apply(fm.Directive("shrink-2", fm.ResizePool("h100-od", 1)), now[0] + 2)
    assert ack.outcome is fm.DirectiveOutcome.ACCEPTED
    assert sim.observe(now[0] + 3).killed == [] and sim.nodes()["h100-od"] == 1


def test_free_gpus_on_a_node_under_notice_are_not_reported():
    """As the agent reports them: an 8-GPU spot node with one replica and a notice offers none of its
    7 free GPUs, so the reconciler grows the pool for the replacement instead of starting it on the
    node being reclaimed (where the agent would find no room)."""
    loaded = spec.load_files([defaults.examples_dir() / "scenarios" / "skyserve-like" / "clusters.yaml"])
    doc = next(c for c in loaded.of_kind("Cluster") if c.metadata.name == "aws-use1")
    now = [0.0]
    sim = clusters.SimCluster(doc, clock=lambda: now[0], rng=random.Random(1), notice_s=120.0, policy=None,
                              cold_start=lambda d, g: 60.0, provisioning_delay_s=10.0,
                              preemptions_per_node_hour=0.0)
    assert sim.apply(fm.Directive("grow", fm.ResizePool("h100-spot", 1)), now[0])[0].outcome \
        is fm.DirectiveOutcome.ACCEPTED
    now[0] = 30.0
    sim.observe(now[0])
    assert sim.apply(_start("a", 1, "h100-spot"), now[0])[0].outcome is fm.DirectiveOutcome.ACCEPTED

    def free() -> int:
        obs = sim.observe(now[0])
        return next(p.gpus_free for p in obs.pools if p.pool_id == "h100-spot")

    assert free() == 7
    sim.cloud.preempt("h100-spot", sim.replicas["a"].node_id)
    now[0] = 31.0
    assert free() == 0
