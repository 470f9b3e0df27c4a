"""The aks provider against the local ARM fake through the real ContainerServiceClient (and
ComputeManagementClient for sizes and quotas): agent pools discovered with GPU type, count, tier,
bounds and nodes; growth by the agent pool's count with the cluster autoscaler turned off; shrinks
that delete chosen machines and keep those hosting replicas; failed operations and quota refusals
as STOCK_OUT and QUOTA_EXCEEDED events; spot pools and their Scheduled Events; scale sets never
touched."""

from __future__ import annotations

import asyncio
import time

import azure.core.pipeline.policies
import pytest
from azure.mgmt.containerservice import ContainerServiceClient

from meridian import catalog
from meridian.fleet import models

from agents import providers
from agents.providers.errors import CloudError, CloudErrorKind
from agents.testing import arm_fake, metadata_fake

import agent_it_helpers as h

POOLS = """  cloud: azure
  region: eastus2
  zone: "1"
  provider: aks
  azure: {subscription_id: sub-1, resource_group: gpu-rg, aks_cluster: meridian-eus2, endpoint: "ENDPOINT"}
  pools:
    - {name: a10, instance_type: Standard_NV36ads_A10_v5, max_nodes: 6}
    - {name: a100-spot, instance_type: Standard_NC24ads_A100_v4, tier: spot, max_nodes: 4, resource: a100spot}
    - {name: h100, instance_type: Standard_ND96isr_H100_v5, max_nodes: 2}"""
AT = {"subscription": "sub-1", "resource_group": "gpu-rg", "cluster": "meridian-eus2", "location": "eastus2"}


@pytest.fixture
async def arm(monkeypatch):
    monkeypatch.setenv("MERIDIAN_TEST_TOKEN", h.TOKEN)
    fake = arm_fake.ArmFake(provisioning_delay_s=0.3)
    await fake.start()
    fake.agent_pools.add(name="a10", vm_size="Standard_NV36ads_A10_v5", count=2, **AT)
    fake.agent_pools.add(name="a100spot", vm_size="Standard_NC24ads_A100_v4", count=1, spot=True, autoscaling=True,
                         min_count=1, max_count=3, **AT)
    fake.agent_pools.add(name="h100", vm_size="Standard_ND96isr_H100_v5", count=0, capacity_limit=1, **AT)
    fake.set_quota("sub-1", "eastus2", "StandardNVADSA10v5Family", 144)  # 4 x 36 vCPUs
    fake.set_quota("sub-1", "eastus2", "lowPriorityCores", 72)  # 3 x 24 vCPUs
    try:
        yield fake
    finally:
        await fake.stop()


def pool_of(fake, name):
    return fake.agent_pools.pools[("sub-1", "gpu-rg", "meridian-eus2", name)]


def provider(fake, **kw):
    cluster = h.cluster_doc("aks-it", POOLS.replace("ENDPOINT", fake.url), **kw)
    return cluster, providers.create("aks", cluster, metadata_url=kw.pop("metadata_url", None),
                                     polling_interval_s=0.05, retry_total=3)


async def discover(p) -> dict:
    return {s.pool.pool_id: s for s in await p.discover()}


async def test_discovers_agent_pools_with_type_count_tier_bounds_and_nodes(arm):
    """GPU type and price from the catalog, GPUs per node from resource_skus, count and nodes from the
    agent pool and its machines (named as their Kubernetes nodes), an autoscaled pool's min/max as
    bounds, spot priority as the spot tier with its lowPriorityCores quota; no scale set is read."""
    _, p = provider(arm)
    try:
        pools = await discover(p)
    finally:
        await p.close()
    a10, a100, h100 = pools["a10"].pool, pools["a100-spot"].pool, pools["h100"].pool
    cat = catalog.instances.default()
    assert (a10.gpu_type, a10.gpus_per_node, a10.nodes_current, a10.tier) == ("A10", 1, 2, models.Tier.ON_DEMAND)
    assert a10.price_per_node_hour_usd == cat.lookup("azure", "Standard_NV36ads_A10_v5", "eastus2").price_per_hour_usd
    assert a10.quota_headroom_gpus == 2  # (144 - 72) vCPUs / 36 per VM
    scale_set = pool_of(arm, "a10").scale_set
    assert pools["a10"].nodes == (f"{scale_set}000000", f"{scale_set}000001")
    assert (a100.gpu_type, a100.tier, a100.nodes_min, a100.nodes_max) == ("A100-80GB", models.Tier.SPOT, 1, 3)
    assert a100.price_per_node_hour_usd == cat.lookup("azure", "Standard_NC24ads_A100_v4", "eastus2").spot_price_per_hour_usd
    assert a100.quota_headroom_gpus == 2  # (72 - 24) spot vCPUs / 24 per VM
    assert (h100.gpu_type, h100.gpus_per_node, h100.nodes_current, h100.nodes_max) == ("H100", 8, 0, 2)
    assert all(s.problem is None for s in pools.values())
    assert arm.calls["get_vmss"] == 0 and arm.calls["update_vmss"] == 0


async def test_grow_sets_the_count_with_the_autoscaler_off(arm):
    """Growing an autoscaled pool PUTs the pool as read (If-Match on its eTag) with the new count,
    enableAutoScaling false and no min/max; the SDK then reads the new count, and discovery shows
    the machines once they are up."""
    _, p = provider(arm)
    client = ContainerServiceClient(object(), "sub-1", base_url=arm.url,
                                    authentication_policy=azure.core.pipeline.policies.SansIOHTTPPolicy())
    try:
        await p.resize("a100-spot", 3)
        pool = pool_of(arm, "a100spot")
        (put,) = pool.puts
        assert (put["count"], put["enableAutoScaling"]) == (3, False)
        assert "minCount" not in put and "maxCount" not in put
        assert pool.if_match == ['"1"']
        assert arm.calls["get_aks_operation"] >= 1  # the operation was awaited
        ap = await asyncio.to_thread(client.agent_pools.get, "gpu-rg", "meridian-eus2", "a100spot")
        assert (ap.count, ap.enable_auto_scaling, ap.provisioning_state) == (3, False, "Succeeded")
        for _ in range(100):  # machines are listed after the fake's provisioning delay (0.3 s)
            status = (await discover(p))["a100-spot"]
            if status.pool.nodes_current == 3:
                break
            await asyncio.sleep(0.1)
        assert (status.pool.nodes_current, status.pool.nodes_pending, status.pool.nodes_max) == (3, 0, 4)
        await p.resize("a10", 2)  # the count already, autoscaler off: nothing to send
        assert pool_of(arm, "a10").puts == []
    finally:
        client.close()
        await p.close()


async def test_shrink_deletes_spare_machines_and_keeps_those_hosting_replicas(arm):
    """A shrink names its victims with deleteMachines: the newest machines not hosting replicas. The
    protected nodes are the two newest, which AKS's own choice on a plain count change would have
    removed; they survive, and the count is not PUT."""
    _, p = provider(arm)
    try:
        await p.resize("a10", 4)
        for _ in range(100):
            nodes = (await discover(p))["a10"].nodes
            if len(nodes) == 4:
                break
            await asyncio.sleep(0.1)
        assert len(nodes) == 4
        keep = frozenset(nodes[2:])
        await p.resize("a10", 2, keep_nodes=keep)
        pool = pool_of(arm, "a10")
        assert sorted(pool.deleted) == sorted(nodes[:2])
        assert len(pool.puts) == 1  # the growth only
        after = (await discover(p))["a10"]
        assert set(after.nodes) == keep and after.pool.nodes_current == 2
        await p.resize("a10", 1, keep_nodes=frozenset({nodes[3]}))
        assert set((await discover(p))["a10"].nodes) == {nodes[3]}
        assert arm.calls["delete_machines"] == 2 and arm.calls["get_aks_operation_result"] == 2
    finally:
        await p.close()


async def test_shrinking_an_autoscaled_pool_turns_the_autoscaler_off_first(arm):
    """The autoscaler is switched off (count unchanged) before machines are deleted, so it cannot
    put them back."""
    _, p = provider(arm)
    try:
        await p.resize("a100-spot", 0)
        pool = pool_of(arm, "a100spot")
        assert [(b["count"], b["enableAutoScaling"]) for b in pool.puts] == [(1, False)]
        assert len(pool.deleted) == 1 and pool.count == 0
    finally:
        await p.close()


async def test_failed_operation_and_quota_become_events(arm, scheduler, tmp_path):
    """An operation that ends Failed with AllocationFailed inside AKS's error is a STOCK_OUT event and
    leaves the pool STOCKED_OUT (AKS keeps reporting the error, so a new provider sees it too); a
    400 QuotaExceeded from AKS's preflight check is a QUOTA_EXCEEDED event; both directives FAILED."""
    cluster, p = provider(arm, address=scheduler.address)
    scheduler.tokens["aks-it"] = h.TOKEN
    agent = h.build_agent(cluster, tmp_path / "state", provider=p)
    await agent.start()
    try:
        rec = scheduler.record("aks-it")
        await h.wait_for(lambda: rec.inventory, what="inventory")
        await scheduler.send("aks-it", models.Directive("h100", models.ResizePool("h100", 2), 1))
        await scheduler.send("aks-it", models.Directive("a10", models.ResizePool("a10", 6), 1))
        kinds = {models.EventKind.STOCK_OUT, models.EventKind.QUOTA_EXCEEDED}
        await h.wait_for(lambda: kinds <= {e.kind for e in rec.events}, what="stock-out and quota events")
        by_kind = {e.kind: e for e in rec.events}
        assert by_kind[models.EventKind.STOCK_OUT].pool_id == "h100"
        assert "AllocationFailed" in by_kind[models.EventKind.STOCK_OUT].message
        assert by_kind[models.EventKind.QUOTA_EXCEEDED].pool_id == "a10"
        assert "quota" in by_kind[models.EventKind.QUOTA_EXCEEDED].message
        for d in ("h100", "a10"):
            await h.wait_for(lambda d=d: models.DirectiveOutcome.FAILED in [a.outcome for a in rec.acks_for(d)],
                             what=f"{d} failed")
        await h.wait_for(lambda: any(p.pool_id == "h100" and p.provisioning_state == models.ProvisioningState.STOCKED_OUT
                                     for p in rec.inventory), what="stocked-out pool")
    finally:
        await agent.shutdown()
    assert pool_of(arm, "h100").provisioning_state == "Failed" and pool_of(arm, "a10").count == 2
    _, fresh = provider(arm)
    try:
        h100 = (await discover(fresh))["h100"]
    finally:
        await fresh.close()
    assert h100.pool.provisioning_state == models.ProvisioningState.STOCKED_OUT
    assert h100.problem.kind == CloudErrorKind.INSUFFICIENT_CAPACITY


async def test_stopped_and_missing_pools_are_errors_and_are_not_resized(arm):
    """A stopped agent pool is reported ERROR with what to do and a resize is refused before any PUT;
    an agent pool the cluster does not have is NOT_FOUND."""
    arm.agent_pools.stop(pool_of(arm, "a10"))
    del arm.agent_pools.pools[("sub-1", "gpu-rg", "meridian-eus2", "h100")]
    _, p = provider(arm)
    try:
        pools = await discover(p)
        assert pools["a10"].pool.provisioning_state == models.ProvisioningState.ERROR
        assert "stopped" in pools["a10"].problem.message
        assert pools["h100"].problem.kind == CloudErrorKind.NOT_FOUND
        with pytest.raises(CloudError) as err:
            await p.resize("a10", 3)
        assert err.value.kind == CloudErrorKind.INVALID_REQUEST and pool_of(arm, "a10").puts == []
    finally:
        await p.close()


async def test_throttling_is_retried_and_authorization_is_classified(arm):
    """A 429 is retried by azure-core; a 403 AuthorizationFailed (a missing role) is an auth failure."""
    _, p = provider(arm)
    try:
        arm.fail_next("list_agent_pools", 429, "TooManyRequests", "The request is being throttled.")
        assert len(await p.discover()) == 3
        assert arm.calls["list_agent_pools"] == 2
        arm.fail_next("list_machines", 403, "AuthorizationFailed", "The client does not have authorization to "
                      "perform action 'Microsoft.ContainerService/managedClusters/agentPools/machines/read'.", times=5)
        with pytest.raises(CloudError) as err:
            await p.discover()
        assert err.value.kind == CloudErrorKind.AUTH_FAILURE
    finally:
        await p.close()


async def test_spot_eviction_notice_names_the_machine(arm):
    """A Scheduled Events Preempt for a spot VM (``<scale set>_<instance id>``) is a notice for its
    pool naming the machine, as discovery names the node."""
    meta = metadata_fake.MetadataFake()
    await meta.start()
    cluster = h.cluster_doc("aks-it", POOLS.replace("ENDPOINT", arm.url))
    p = providers.create("aks", cluster, metadata_url=meta.url, polling_interval_s=0.05, retry_total=3)
    try:
        (node,) = (await discover(p))["a100-spot"].nodes
        assert await p.interruptions() == []
        deadline = round(time.time()) + 30
        meta.preempt_azure(pool_of(arm, "a100spot").vm_name(node), deadline)
        (notice,) = await p.interruptions()
        assert (notice.pool_id, notice.node_id, notice.deadline) == ("a100-spot", node, deadline)
    finally:
        await p.close()
        await meta.stop()
