"""The gcp provider against a local GKE fake through the real ClusterManagerClient (gRPC) and
Compute Engine REST: node pools discovered with the right GPU type, count and price; a resize seen
through the same API; a zone without capacity reaching the scheduler as a STOCK_OUT event;
permission errors as auth failures."""

from __future__ import annotations

import asyncio
import random

import grpc
import pytest
from google.cloud import container_v1
from google.cloud.container_v1.services.cluster_manager.transports import grpc as gke_grpc

from meridian import backoff
from meridian import catalog
from meridian.fleet import models

from agents import providers
from agents.providers.errors import CloudError, CloudErrorKind
from agents.testing import gke_fake

import agent_it_helpers as h

PARENT = "projects/proj/locations/us-central1-a/clusters/gpus"
POOLS = """  cloud: gcp
  region: us-central1
  zone: us-central1-a
  provider: gcp
  gcp: {project: proj, location: us-central1-a, gke_cluster: gpus, endpoint: "ENDPOINT"}
  pools:
    - {name: l4, instance_type: g2-standard-8, max_nodes: 8}
    - {name: l4-spot, instance_type: g2-standard-8, tier: spot, max_nodes: 8}
    - {name: h100, instance_type: a3-highgpu-8g, max_nodes: 2, resource: h100-pool}"""


@pytest.fixture
async def gke(monkeypatch):
    monkeypatch.setenv("MERIDIAN_TEST_TOKEN", h.TOKEN)
    fake = gke_fake.GkeFake(provisioning_delay_s=0.5)
    await fake.start()
    common = dict(project="proj", location="us-central1-a", cluster="gpus")
    fake.add_node_pool(name="l4", machine_type="g2-standard-8", accelerator_type="nvidia-l4", accelerator_count=1,
                       node_count=2, **common)
    fake.add_node_pool(name="l4-spot", machine_type="g2-standard-8", accelerator_type="nvidia-l4",
                       accelerator_count=1, node_count=1, spot=True, autoscaling=(0, 4), **common)
    fake.add_node_pool(name="h100-pool", machine_type="a3-highgpu-8g", accelerator_type="nvidia-h100-80gb",
                       accelerator_count=8, node_count=0, capacity_limit=1, **common)
    fake.set_quota("proj", "us-central1", "NVIDIA_L4_GPUS", 6)
    try:
        yield fake
    finally:
        await fake.stop()


def provider(fake, **kw):
    cluster = h.cluster_doc("gcp-it", POOLS.replace("ENDPOINT", fake.grpc_address), **kw)
    return cluster, providers.create("gcp", cluster, metadata_url=None, compute_url=fake.http_url + "/compute/v1",
                                     operation_poll_s=0.1)


async def test_discovers_node_pools_with_type_count_and_price(gke):
    """Accelerators from NodeConfig, nodes from the instance groups, prices from the catalog and the
    GPU quota headroom from the region's quota metric."""
    _, p = provider(gke)
    try:
        pools = {s.pool.pool_id: s for s in await p.discover()}
    finally:
        await p.close()
    l4, spot, h100 = pools["l4"].pool, pools["l4-spot"].pool, pools["h100"].pool
    offer = catalog.instances.default().lookup("gcp", "g2-standard-8", "us-central1")
    assert (l4.gpu_type, l4.gpus_per_node, l4.nodes_current, l4.price_per_node_hour_usd) == ("L4", 1, 2, offer.price_per_hour_usd)
    assert (spot.tier, spot.price_per_node_hour_usd) == (models.Tier.SPOT, offer.spot_price_per_hour_usd)
    assert (spot.nodes_min, spot.nodes_max) == (0, 4)  # GKE's own autoscaling bounds
    assert (h100.gpu_type, h100.gpus_per_node, h100.gpu_memory_gib) == ("H100", 8, 80)
    assert l4.quota_headroom_gpus == 4  # NVIDIA_L4_GPUS: limit 6, 2 in use
    assert len(pools["l4"].nodes) == 2


async def test_resize_is_seen_through_the_same_api(gke):
    """set_node_pool_size (after turning GKE's autoscaler off for the pool) is visible through the
    real client and, once the nodes are up, in discovery."""
    _, p = provider(gke)
    client = container_v1.ClusterManagerClient(
        transport=gke_grpc.ClusterManagerGrpcTransport(channel=grpc.insecure_channel(gke.grpc_address)))
    try:
        await p.resize("l4-spot", 3)
        # The client blocks; run it off the loop that serves the fake.
        np = await asyncio.to_thread(client.get_node_pool, name=f"{PARENT}/nodePools/l4-spot")
        assert not np.autoscaling.enabled
        assert gke.calls["SetNodePoolAutoscaling"] == 1 and gke.calls["SetNodePoolSize"] == 1
        pool = {s.pool.pool_id: s for s in await p.discover()}["l4-spot"].pool
        assert pool.nodes_current + pool.nodes_pending == 3
        for _ in range(100):  # nodes come up after the fake's provisioning delay (0.5 s)
            pool = {s.pool.pool_id: s for s in await p.discover()}["l4-spot"].pool
            if pool.nodes_current == 3:
                break
            await asyncio.sleep(0.1)
        assert pool.nodes_current == 3 and pool.nodes_pending == 0
    finally:
        client.transport.close()
        await p.close()


async def test_stock_out_becomes_an_event(gke, scheduler, tmp_path):
    """A resize into a zone without capacity fails the directive and sends STOCK_OUT; the pool
    reports STOCKED_OUT."""
    cluster, p = provider(gke, address=scheduler.address)
    scheduler.tokens["gcp-it"] = h.TOKEN
    agent = h.build_agent(cluster, tmp_path / "state", provider=p)
    await agent.start()
    try:
        rec = scheduler.record("gcp-it")
        await h.wait_for(lambda: rec.inventory, what="inventory")
        await scheduler.send("gcp-it", models.Directive("grow", models.ResizePool("h100", 2), 1))
        await h.wait_for(lambda: models.DirectiveOutcome.FAILED in [a.outcome for a in rec.acks_for("grow")],
                         what="failed ack")
        # The directive's failure carries its id; discovery may also report the pool's error on its own.
        events = [e for e in rec.events if e.kind == models.EventKind.STOCK_OUT and e.directive_id == "grow"]
        assert events and events[0].pool_id == "h100" and "ZONE_RESOURCE_POOL_EXHAUSTED" in events[0].message
        await h.wait_for(lambda: any(p.pool_id == "h100" and p.provisioning_state == models.ProvisioningState.STOCKED_OUT
                                     for p in rec.inventory), what="stocked-out pool")
    finally:
        await agent.shutdown()


async def test_permission_denied_is_an_auth_failure_and_unavailable_is_retried(gke):
    """PERMISSION_DENIED is classified auth failure; UNAVAILABLE is retried by api-core's Retry."""
    _, p = provider(gke)
    try:
        gke.fail_next("ListNodePools", grpc.StatusCode.PERMISSION_DENIED, "Required 'container.nodePools.list' permission")
        with pytest.raises(CloudError) as err:
            await p.discover()
        assert err.value.kind == CloudErrorKind.AUTH_FAILURE
        before = gke.calls["ListNodePools"]
        gke.fail_next("ListNodePools", grpc.StatusCode.UNAVAILABLE, "try again", times=2)
        assert len(await p.discover()) == 3
        assert gke.calls["ListNodePools"] - before == 3
    finally:
        await p.close()


def fast_backoff() -> backoff.Backoff:
    """Small, seeded delays: the retries are what is tested, not the waiting."""
    return backoff.Backoff(initial_s=0.01, max_s=0.05, rng=random.Random(7))


async def test_managed_instances_are_read_over_every_page(gke):
    """A node pool whose instances span several listManagedInstances pages is counted whole: every
    running instance is a node, the pages read in order."""
    gke.page_size = 2
    gke.pool("l4").instances += [gke._new_instance(gke.pool("l4"), ready_at=0.0) for _ in range(5)]  # 7 in all
    _, p = provider(gke)
    try:
        pools = {s.pool.pool_id: s for s in await p.discover()}
    finally:
        await p.close()
    assert pools["l4"].pool.nodes_current == 7 and len(pools["l4"].nodes) == 7
    assert gke.calls["listManagedInstances"] >= 4 + 1 + 1  # l4: 4 pages; l4-spot and h100: one each


async def test_transient_compute_failures_are_retried(gke):
    """503s (and a 429) from Compute Engine are retried with backoff; discovery then succeeds with
    the same figures as without faults."""
    gke.page_size = 1
    gke.fail_http_next("listManagedInstances", 503, times=2)
    gke.fail_http_next("getInstanceGroupManager", 429, times=1)
    gke.fail_http_next("getRegion", 503, times=1)
    cluster = h.cluster_doc("gcp-it", POOLS.replace("ENDPOINT", gke.grpc_address))
    p = providers.create("gcp", cluster, metadata_url=None, compute_url=gke.http_url + "/compute/v1",
                         operation_poll_s=0.1, compute_backoff=fast_backoff)
    try:
        pools = {s.pool.pool_id: s for s in await p.discover()}
        assert p._compute.retried == 4
    finally:
        await p.close()
    assert pools["l4"].pool.nodes_current == 2 and pools["l4"].problem is None
    assert pools["l4"].pool.quota_headroom_gpus == 4


async def test_a_compute_outage_that_outlasts_the_retries_is_an_unavailable_error(gke):
    """When Compute Engine keeps answering 503, discovery fails with an UNAVAILABLE CloudError naming
    the call, after the configured retries (not for ever)."""
    gke.fail_http_next("listManagedInstances", 503, times=50)
    cluster = h.cluster_doc("gcp-it", POOLS.replace("ENDPOINT", gke.grpc_address))
    p = providers.create("gcp", cluster, metadata_url=None, compute_url=gke.http_url + "/compute/v1",
                         operation_poll_s=0.1, compute_backoff=fast_backoff)
    try:
        with pytest.raises(CloudError) as err:
            await p.discover()
    finally:
        await p.close()
    assert err.value.kind is CloudErrorKind.UNAVAILABLE and err.value.operation == "list_managed_instances"
    assert gke.calls["listManagedInstances"] == 5  # one try and four retries
