"""The azure provider against a local ARM fake through the real ComputeManagementClient: scale sets
discovered with the right GPU type, count and price; a resize (a long-running operation) seen
through the same API; allocation failures as STOCK_OUT and quota refusals as QUOTA_EXCEEDED
events; throttling retried by azure-core; auth errors classified."""

from __future__ import annotations

import asyncio

import azure.core.pipeline.policies
import pytest
from azure.mgmt.compute import ComputeManagementClient

from meridian import catalog
from meridian.fleet import models

from agents import providers
from agents.providers.errors import CloudError, CloudErrorKind
from agents.testing import arm_fake

import agent_it_helpers as h

POOLS = """  cloud: azure
  region: eastus2
  zone: "1"
  provider: azure
  azure: {subscription_id: sub-1, resource_group: gpu-rg, endpoint: "ENDPOINT"}
  pools:
    - {name: a10, instance_type: Standard_NV36ads_A10_v5, max_nodes: 6, resource: vmss-a10}
    - {name: a100-spot, instance_type: Standard_NC24ads_A100_v4, tier: spot, max_nodes: 4, resource: vmss-a100}
    - {name: h100, instance_type: Standard_ND96isr_H100_v5, max_nodes: 2, resource: vmss-h100}"""


@pytest.fixture
async def arm(monkeypatch):
    monkeypatch.setenv("MERIDIAN_TEST_TOKEN", h.TOKEN)
    fake = arm_fake.ArmFake(provisioning_delay_s=0.3)
    await fake.start()
    common = dict(subscription="sub-1", resource_group="gpu-rg", location="eastus2")
    fake.add_scale_set(name="vmss-a10", sku="Standard_NV36ads_A10_v5", capacity=2, **common)
    fake.add_scale_set(name="vmss-a100", sku="Standard_NC24ads_A100_v4", capacity=1, spot=True, **common)
    fake.add_scale_set(name="vmss-h100", sku="Standard_ND96isr_H100_v5", capacity=0, capacity_limit=1, **common)
    fake.set_quota("sub-1", "eastus2", "StandardNVADSA10v5Family", 144)  # 4 x 36 vCPUs
    try:
        yield fake
    finally:
        await fake.stop()


def provider(fake, **kw):
    cluster = h.cluster_doc("azure-it", POOLS.replace("ENDPOINT", fake.url), **kw)
    return cluster, providers.create("azure", cluster, metadata_url=None, polling_interval_s=0.05, retry_total=3)


async def test_discovers_scale_sets_with_type_count_and_price(arm):
    """GPU count from resource_skus, type and price from the catalog, quota headroom from usage.list."""
    _, p = provider(arm)
    try:
        pools = {s.pool.pool_id: s for s in await p.discover()}
    finally:
        await p.close()
    a10, a100, h100 = pools["a10"].pool, pools["a100-spot"].pool, pools["h100"].pool
    cat = catalog.instances.default()
    assert (a10.gpu_type, a10.gpus_per_node, a10.nodes_current) == ("A10", 1, 2)
    assert a10.price_per_node_hour_usd == cat.lookup("azure", "Standard_NV36ads_A10_v5", "eastus2").price_per_hour_usd
    assert a10.quota_headroom_gpus == 2  # (144 - 72) vCPUs / 36 per VM
    assert (a100.gpu_type, a100.tier) == ("A100-80GB", models.Tier.SPOT)
    assert a100.price_per_node_hour_usd == cat.lookup("azure", "Standard_NC24ads_A100_v4", "eastus2").spot_price_per_hour_usd
    assert (h100.gpu_type, h100.gpus_per_node) == ("H100", 8)
    assert pools["a10"].nodes == ("vmss-a10_0", "vmss-a10_1")


async def test_resize_is_seen_through_the_same_api(arm):
    """begin_update of sku.capacity (polled to completion) shows in virtual_machine_scale_sets.get and,
    once the VMs are up, in discovery."""
    _, p = provider(arm)
    client = ComputeManagementClient(object(), "sub-1", base_url=arm.url,
                                     authentication_policy=azure.core.pipeline.policies.SansIOHTTPPolicy())
    try:
        await p.resize("a10", 4)
        vmss = await asyncio.to_thread(client.virtual_machine_scale_sets.get, "gpu-rg", "vmss-a10")
        assert vmss.sku.capacity == 4
        assert arm.calls["update_vmss"] == 1 and arm.calls["get_operation"] >= 1
        for _ in range(100):  # VMs come up after the fake's provisioning delay (0.3 s)
            pool = {s.pool.pool_id: s for s in await p.discover()}["a10"].pool
            if pool.nodes_current == 4:
                break
            await asyncio.sleep(0.1)
        assert (pool.nodes_current, pool.nodes_pending) == (4, 0)
    finally:
        client.close()
        await p.close()


async def test_allocation_failure_and_quota_become_events(arm, scheduler, tmp_path):
    """AllocationFailed (the operation ends Failed) is a STOCK_OUT event; OperationNotAllowed for a
    family quota is a QUOTA_EXCEEDED event; both directives end FAILED."""
    cluster, p = provider(arm, address=scheduler.address)
    scheduler.tokens["azure-it"] = h.TOKEN
    agent = h.build_agent(cluster, tmp_path / "state", provider=p)
    await agent.start()
    try:
        rec = scheduler.record("azure-it")
        await h.wait_for(lambda: rec.inventory, what="inventory")
        await scheduler.send("azure-it", models.Directive("h100", models.ResizePool("h100", 2), 1))
        await scheduler.send("azure-it", models.Directive("a10", models.ResizePool("a10", 6), 1))
        kinds = {models.EventKind.STOCK_OUT, models.EventKind.QUOTA_EXCEEDED}
        await h.wait_for(lambda: kinds <= {e.kind for e in rec.events}, what="stock-out and quota events")
        by_kind = {e.kind: e for e in rec.events}
        assert by_kind[models.EventKind.STOCK_OUT].pool_id == "h100"
        assert "AllocationFailed" in by_kind[models.EventKind.STOCK_OUT].message
        assert by_kind[models.EventKind.QUOTA_EXCEEDED].pool_id == "a10"
        for d in ("h100", "a10"):
            await h.wait_for(lambda d=d: models.DirectiveOutcome.FAILED in [a.outcome for a in rec.acks_for(d)],
                             what=f"{d} failed")
        await h.wait_for(lambda: any(p.pool_id == "h100" and p.provisioning_state == models.ProvisioningState.STOCKED_OUT
                                     for p in rec.inventory), what="stocked-out pool")
    finally:
        await agent.shutdown()


async def test_throttling_is_retried_and_auth_is_classified(arm):
    """A 429 is retried by azure-core's retry policy; a 401 AuthenticationFailed is an auth failure."""
    _, p = provider(arm)
    try:
        arm.fail_next("get_vmss", 429, "TooManyRequests", "The request is being throttled.")
        before = arm.calls["get_vmss"]
        assert len(await p.discover()) == 3
        assert arm.calls["get_vmss"] - before == 4  # 3 scale sets + 1 retry
        arm.fail_next("get_vmss", 401, "AuthenticationFailed", "Authentication failed.", times=5)
        with pytest.raises(CloudError) as err:
            await p.discover()
        assert err.value.kind == CloudErrorKind.AUTH_FAILURE
    finally:
        await p.close()
