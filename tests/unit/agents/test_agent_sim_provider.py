"""The simulated cloud: catalog figures, provisioning delay, stock-outs, spot preemption, faults,
persistence. Driven by an injected clock and RNG, never by sleeping."""

from __future__ import annotations

import random
import typing

import pytest

from meridian import catalog
from meridian.fleet import models
from meridian.spec import cluster as cluster_spec

from agents import agent as agent_mod
from agents import config, providers
from agents.providers import sim
from agents.providers.errors import CloudError, CloudErrorKind


def by_id(statuses):
    return {s.pool.pool_id: s for s in statuses}


def test_pools_carry_catalog_types_counts_and_prices(cluster, clock):
    """Each pool reports the catalog's GPU type, count, memory and price for its region and tier."""
    cloud = sim.SimCloud(cluster, clock=clock, rng=random.Random(0))
    pools = by_id(cloud.snapshot())
    offer = catalog.instances.default().lookup("aws", "g6.12xlarge", "us-east-1")
    p = pools["l4x4"].pool
    assert (p.gpu_type, p.gpus_per_node, p.gpu_memory_gib) == ("L4", 4, 24)
    assert p.price_per_node_hour_usd == offer.price_per_hour_usd
    spot = pools["l4-spot"].pool
    assert spot.tier == models.Tier.SPOT
    assert spot.price_per_node_hour_usd == catalog.instances.default().lookup("aws", "g6.xlarge", "us-east-1").spot_price_per_hour_usd
    assert pools["h100"].pool.gpu_type == "H100" and pools["h100"].pool.gpus_per_node == 8
    assert len(pools["l4"].nodes) == 2 and pools["l4"].pool.gpus_free == 2


def test_nodes_arrive_after_the_provisioning_delay(cluster, clock):
    """A resize shows pending nodes first and running nodes once provisioning_delay_s has passed."""
    cloud = sim.SimCloud(cluster, clock=clock, rng=random.Random(0))
    cloud.resize("h100", 2)
    p = by_id(cloud.snapshot())["h100"].pool
    assert (p.nodes_current, p.nodes_pending, p.provisioning_state) == (0, 2, models.ProvisioningState.SCALING_UP)
    clock.advance(31)
    p = by_id(cloud.snapshot())["h100"].pool
    assert (p.nodes_current, p.nodes_pending, p.provisioning_state) == (2, 0, models.ProvisioningState.STEADY)


def test_capacity_limit_stocks_out_without_changing_anything(cluster, clock):
    """Growing beyond the capacity limit raises INSUFFICIENT_CAPACITY, leaves the target as it was and
    marks the pool stocked out until a resize that fits."""
    cloud = sim.SimCloud(cluster, clock=clock, rng=random.Random(0), capacity_limits={"l4": 3})
    with pytest.raises(CloudError) as err:
        cloud.resize("l4", 4)
    assert err.value.kind == CloudErrorKind.INSUFFICIENT_CAPACITY and err.value.pool_id == "l4"
    status = by_id(cloud.snapshot())["l4"]
    assert status.pool.provisioning_state == models.ProvisioningState.STOCKED_OUT and status.problem is not None
    assert status.pool.nodes_current + status.pool.nodes_pending == 2
    cloud.resize("l4", 3)
    status = by_id(cloud.snapshot())["l4"]
    assert status.problem is None and status.pool.nodes_pending == 1


def test_stock_out_pools_never_grow(clock, cluster_factory):
    """A pool listed in sim.stock_out_pools refuses any growth."""
    cloud = sim.SimCloud(cluster_factory(stock_out="h100"), clock=clock, rng=random.Random(0))
    with pytest.raises(CloudError, match="insufficient"):
        cloud.resize("h100", 1)


def test_shrink_removes_idle_nodes_and_keeps_busy_ones(cluster, clock):
    """Shrinking removes nodes not in keep_nodes first."""
    cloud = sim.SimCloud(cluster, clock=clock, rng=random.Random(0))
    first, second = by_id(cloud.snapshot())["l4"].nodes
    cloud.resize("l4", 1, keep_nodes=frozenset({second}))
    assert by_id(cloud.snapshot())["l4"].nodes == (second,)


def test_spot_preemption_notice_then_removal_and_replacement(clock, cluster_factory):
    """At a high preemption rate every spot node gets a notice; it leaves at the deadline and a
    replacement is ordered (as an ASG does); on-demand pools are never preempted."""
    cluster = cluster_factory(spot_preemptions_per_node_hour=100)
    cloud = sim.SimCloud(cluster, clock=clock, rng=random.Random(3), notice_s=120)
    cloud.snapshot()
    clock.advance(600)  # at 100 per node-hour, P(no notice in 10 min) = e^-1000 per node
    notices = cloud.notices()
    assert {n.pool_id for n in notices} == {"l4-spot"} and len(notices) == 2
    assert all(n.deadline == pytest.approx(clock.now + 120) and n.node_id for n in notices)
    doomed = {n.node_id for n in notices}
    clock.advance(121)
    status = by_id(cloud.snapshot())["l4-spot"]
    assert doomed.isdisjoint(status.nodes)
    assert status.pool.nodes_pending == 2


def test_preemption_is_deterministic_for_a_seed(clock, cluster_factory):
    """The same seed and clock give the same preemptions (the simulator relies on it)."""
    cluster = cluster_factory(spot_preemptions_per_node_hour=20)

    def run():
        c = type(clock)(clock.now)
        cloud = sim.SimCloud(cluster, clock=c, rng=random.Random(42))
        seen = []
        for _ in range(50):
            c.advance(60)
            seen.extend(n.notice_id for n in cloud.notices())
        return seen

    assert run() == run()


def test_manual_preemption_and_injected_faults(cluster, clock):
    """preempt() serves a notice on demand; inject_fault() makes the next calls fail with the given error."""
    cloud = sim.SimCloud(cluster, clock=clock, rng=random.Random(0))
    notice = cloud.preempt("l4", notice_s=30)
    assert notice in cloud.notices()
    cloud.inject_fault("discover", CloudError(CloudErrorKind.THROTTLED, "Rate exceeded"), times=2)
    for _ in range(2):
        with pytest.raises(CloudError, match="Rate exceeded"):
            cloud.snapshot()
    assert cloud.snapshot()
    with pytest.raises(ValueError, match="unknown operation"):
        cloud.inject_fault("launch", CloudError(CloudErrorKind.UNKNOWN, "x"))


def test_state_survives_a_new_sim_cloud(cluster, clock, tmp_path):
    """With a state_path a new SimCloud (a restarted agent) finds the nodes, targets and notices as left."""
    path = tmp_path / "sim.json"
    cloud = sim.SimCloud(cluster, clock=clock, rng=random.Random(0), state_path=path)
    cloud.resize("h100", 1)
    clock.advance(31)
    before = by_id(cloud.snapshot())
    again = sim.SimCloud(cluster, clock=clock, rng=random.Random(0), state_path=path)
    after = by_id(again.snapshot())
    assert after["h100"].nodes == before["h100"].nodes and after["h100"].pool.nodes_current == 1


def test_registry_creates_providers_by_name(cluster, clock):
    """The registry knows the five built-in providers, exactly the names a Cluster spec may give, and
    suggests a close name for a typo."""
    assert providers.names() == ["aks", "aws", "azure", "gcp", "sim"]
    spec_names = typing.get_args(typing.get_args(cluster_spec.ClusterSpec.model_fields["provider"].annotation)[0])
    assert sorted(spec_names) == providers.names()
    assert isinstance(providers.create("sim", cluster, clock=clock), sim.SimProvider)
    with pytest.raises(ValueError, match="did you mean 'sim'"):
        providers.create("simm", cluster)


async def test_sim_provider_is_the_async_face(cluster, clock):
    """SimProvider answers the provider interface from its SimCloud."""
    p = providers.create("sim", cluster, clock=clock, capacity_limits={"h100": 1})
    assert len(await p.discover()) == 4
    with pytest.raises(CloudError):
        await p.resize("h100", 2)
    assert await p.interruptions() == []


def test_the_specs_seed_makes_an_agents_sim_cloud_draw_the_same_preemptions(clock, cluster_factory, tmp_path):
    """spec.sim.seed reaches the agent's simulated cloud: the same seed gives the same preemption
    history run after run, another cluster with that seed another one, and no seed a new one."""
    def history(seed, name="test-aws"):
        cluster = cluster_factory(name=name, spot_preemptions_per_node_hour=30,
                                  **({"seed": seed} if seed is not None else {}))
        c = type(clock)(clock.now)
        agent = agent_mod.build(cluster, token="t", state_dir=tmp_path / f"{name}-{seed}-{len(runs)}",
                                replica_settings=config.replica_settings(cluster), clock=c)
        runs.append(1)
        seen = []
        for _ in range(120):
            c.advance(60)
            agent.provider.cloud.advance()
            seen.append(len(agent.provider.cloud.notices()))
        return seen

    runs: list[int] = []
    first = history(42)
    assert sum(first) > 0
    assert history(42) == first
    assert history(42, name="other-aws") != first
    assert history(None) != history(None)
