"""The aws provider against moto in server mode (a separate process on loopback) through the real
boto3 client: pools discovered with the right GPU type, count and price; a resize observed through
the same API; throttling retried by botocore; a failed launch for lack of capacity, an auth
failure and a spot notice reaching the scheduler as events."""

from __future__ import annotations

import time
import urllib.request

import boto3
import pytest

from meridian import catalog
from meridian.fleet import models

from agents import providers
from agents.testing import aws_proxy, metadata_fake

import agent_it_helpers as h

REGION = "us-east-1"
POOLS = """  cloud: aws
  region: us-east-1
  zone: us-east-1a
  provider: aws
  aws: {endpoint_url: "ENDPOINT"}
  pools:
    - {name: l4, instance_type: g6.xlarge, max_nodes: 6, resource: asg-l4}
    - {name: l4-spot, instance_type: g6.xlarge, tier: spot, max_nodes: 6, resource: asg-l4-spot}
    - {name: h100, instance_type: p5.48xlarge, max_nodes: 2, resource: asg-h100}"""
GROUPS = [("asg-l4", "g6.xlarge", 1), ("asg-l4-spot", "g6.xlarge", 2), ("asg-h100", "p5.48xlarge", 0)]
CAPACITY_MESSAGE = ("We currently do not have sufficient p5.48xlarge capacity in the Availability Zone you requested "
                    "(us-east-1a). Our system will be working on provisioning additional capacity. Launching EC2 "
                    "instance failed.")


@pytest.fixture
async def aws(moto_url, monkeypatch):
    """Fresh moto state with three GPU Auto Scaling groups, behind a fault-injecting proxy."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("MERIDIAN_TEST_TOKEN", h.TOKEN)
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST", data=b""), timeout=10)
    ec2 = boto3.client("ec2", endpoint_url=moto_url, region_name=REGION)
    asg = boto3.client("autoscaling", endpoint_url=moto_url, region_name=REGION)
    for name, instance_type, desired in GROUPS:
        ec2.create_launch_template(LaunchTemplateName=name,
                                   LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": instance_type})
        asg.create_auto_scaling_group(AutoScalingGroupName=name, MinSize=0, MaxSize=4, DesiredCapacity=desired,
                                      LaunchTemplate={"LaunchTemplateName": name, "Version": "$Latest"},
                                      AvailabilityZones=["us-east-1a"])
    proxy = aws_proxy.AwsFaultProxy(moto_url)
    await proxy.start()
    try:
        yield proxy, ec2, asg
    finally:
        await proxy.stop()


def make_cluster(proxy_url: str, aws_account: str | None = None, **kw):
    pools = POOLS.replace("ENDPOINT", proxy_url)
    if aws_account is not None:
        pools = pools.replace("aws: {endpoint_url:", f'aws: {{account_id: "{aws_account}", endpoint_url:')
    return h.cluster_doc("aws-it", pools, **kw)


async def test_discovers_gpu_pools_with_type_count_and_price(aws):
    """GPU type/count/memory come from describe_instance_types, nodes from the groups, the on-demand
    price from the catalog and the spot price from describe_spot_price_history."""
    proxy, ec2, _ = aws
    p = providers.create("aws", make_cluster(proxy.url), imds_url=None)
    try:
        pools = {s.pool.pool_id: s for s in await p.discover()}
    finally:
        await p.close()
    l4, spot, h100 = pools["l4"].pool, pools["l4-spot"].pool, pools["h100"].pool
    assert (l4.gpu_type, l4.gpus_per_node, l4.gpu_memory_gib, l4.nodes_current) == ("L4", 1, 24, 1)
    assert (h100.gpu_type, h100.gpus_per_node, h100.nodes_current) == ("H100", 8, 0)
    assert l4.price_per_node_hour_usd == catalog.instances.default().lookup("aws", "g6.xlarge", REGION).price_per_hour_usd
    history = ec2.describe_spot_price_history(InstanceTypes=["g6.xlarge"], AvailabilityZone="us-east-1a")
    assert spot.tier == models.Tier.SPOT and spot.nodes_current == 2
    assert spot.price_per_node_hour_usd == float(history["SpotPriceHistory"][0]["SpotPrice"])
    assert len(pools["l4-spot"].nodes) == 2 and all(n.startswith("i-") for n in pools["l4-spot"].nodes)
    assert proxy.count("DescribeInstanceTypes") == 1 and proxy.count("DescribeInstanceTypeOfferings") == 1


async def test_resize_is_seen_through_the_same_api(aws):
    """A resize beyond the group's MaxSize updates the group; boto3 then shows the new desired
    capacity and instances, and so does the next discovery."""
    proxy, _, asg = aws
    p = providers.create("aws", make_cluster(proxy.url), imds_url=None)
    try:
        await p.resize("l4", 5)
        group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["asg-l4"])["AutoScalingGroups"][0]
        assert (group["DesiredCapacity"], group["MaxSize"]) == (5, 5)
        assert proxy.count("UpdateAutoScalingGroup") == 1
        pools = {s.pool.pool_id: s for s in await p.discover()}
        assert pools["l4"].pool.nodes_current == 5 and pools["l4"].pool.gpus_free == 5
        keep = frozenset(pools["l4"].nodes[:2])
        await p.resize("l4", 2, keep_nodes=keep)
        assert set({s.pool.pool_id: s for s in await p.discover()}["l4"].nodes) == keep
        assert proxy.count("SetDesiredCapacity") == 1 and proxy.count("SetInstanceProtection") == 2
    finally:
        await p.close()


async def test_a_cluster_bound_to_another_account_reads_and_resizes_nothing(aws):
    """spec.aws.account_id is checked with STS before anything else: moto's credentials are for
    123456789012, so a cluster naming another account fails discovery and resize with an auth
    error naming both, and touches no group; naming the right one works."""
    proxy, _, asg = aws
    wrong = providers.create("aws", make_cluster(proxy.url, aws_account="000000000000"),
                             imds_url=None)
    try:
        with pytest.raises(providers.CloudError) as info:
            await wrong.discover()
        assert info.value.kind is providers.CloudErrorKind.AUTH_FAILURE
        assert "account 123456789012, not 000000000000" in str(info.value)
        with pytest.raises(providers.CloudError):
            await wrong.resize("l4", 5)
        assert proxy.count("UpdateAutoScalingGroup") == 0 and proxy.count("DescribeAutoScalingGroups") == 0
    finally:
        await wrong.close()
    right = providers.create("aws", make_cluster(proxy.url, aws_account="123456789012"), imds_url=None)
    try:
        assert {s.pool.pool_id for s in await right.discover()} == {"l4", "l4-spot", "h100"}
    finally:
        await right.close()


async def test_throttling_is_retried_by_botocore(aws):
    """Two Throttling answers are retried by the SDK's standard retry mode; the resize succeeds."""
    proxy, _, asg = aws
    proxy.fail("autoscaling", "SetDesiredCapacity", "Throttling", "Rate exceeded", times=2)
    p = providers.create("aws", make_cluster(proxy.url), imds_url=None)
    try:
        await p.resize("l4", 2)
    finally:
        await p.close()
    assert proxy.count("SetDesiredCapacity", injected=True) == 2 and proxy.count("SetDesiredCapacity", injected=False) == 1
    assert asg.describe_auto_scaling_groups(AutoScalingGroupNames=["asg-l4"])["AutoScalingGroups"][0]["DesiredCapacity"] == 2


async def test_insufficient_capacity_becomes_a_stock_out_event(aws, scheduler, tmp_path):
    """A scale-up whose launch fails for lack of capacity reaches the scheduler as a STOCK_OUT event
    and the pool's provisioning state STOCKED_OUT."""
    proxy, _, _ = aws
    cluster = make_cluster(proxy.url, address=scheduler.address, state_dir=str(tmp_path))
    scheduler.tokens[cluster.metadata.name] = h.TOKEN
    proxy.failed_scaling_activity("asg-h100", CAPACITY_MESSAGE)
    agent = h.build_agent(cluster, tmp_path / "state", provider_options={"imds_url": None})
    await agent.start()
    try:
        rec = scheduler.record("aws-it")
        await h.wait_for(lambda: rec.inventory, what="inventory")
        await scheduler.send("aws-it", models.Directive("grow-h100", models.ResizePool("h100", 1), 1))
        await h.wait_for(lambda: [e for e in rec.events if e.kind == models.EventKind.STOCK_OUT], what="stock-out")
        event = next(e for e in rec.events if e.kind == models.EventKind.STOCK_OUT)
        assert event.pool_id == "h100" and "sufficient p5.48xlarge capacity" in event.message
        await h.wait_for(lambda: any(p.pool_id == "h100" and p.provisioning_state == models.ProvisioningState.STOCKED_OUT
                                     for p in rec.inventory), what="stocked-out inventory")
        assert [a.outcome for a in rec.acks_for("grow-h100")][:1] == [models.DirectiveOutcome.ACCEPTED]
    finally:
        await agent.shutdown()


async def test_auth_failure_is_reported_and_surfaced(aws, scheduler, tmp_path):
    """AccessDenied from the cloud becomes an AUTH_FAILURE event, the agent's status and a metric;
    it clears once calls succeed again."""
    proxy, _, _ = aws
    cluster = make_cluster(proxy.url, address=scheduler.address, state_dir=str(tmp_path))
    scheduler.tokens[cluster.metadata.name] = h.TOKEN
    proxy.fail("autoscaling", "DescribeAutoScalingGroups", "AccessDenied",
               "User: arn:aws:iam::123456789012:user/agent is not authorized to perform: "
               "autoscaling:DescribeAutoScalingGroups", status=403, times=None)
    agent = h.build_agent(cluster, tmp_path / "state", provider_options={"imds_url": None})
    await agent.start()
    try:
        rec = scheduler.record("aws-it")
        await h.wait_for(lambda: [e for e in rec.events if e.kind == models.EventKind.AUTH_FAILURE], what="auth event")
        assert "not authorized" in agent.status()["cloud"]["auth_failure"]
        assert agent.metrics.auth_failing.labels("aws-it")._value.get() == 1
        assert agent.metrics.cloud_errors.labels("aws-it", "describe_auto_scaling_groups", "auth_failure")._value.get() >= 1
        proxy.clear()
        await h.wait_for(lambda: rec.inventory, timeout_s=60, what="inventory after auth recovers")
        assert agent.status()["cloud"]["auth_failure"] == ""
        assert agent.metrics.auth_failing.labels("aws-it")._value.get() == 0
    finally:
        await agent.shutdown()


async def test_spot_notice_from_instance_metadata(aws):
    """A spot instance-action on the agent's own instance is a notice for that instance's pool."""
    proxy, _, asg = aws
    instance = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["asg-l4-spot"])["AutoScalingGroups"][0]["Instances"][0]["InstanceId"]
    meta = metadata_fake.MetadataFake(instance=instance)
    await meta.start()
    p = providers.create("aws", make_cluster(proxy.url), imds_url=meta.url)
    try:
        assert await p.interruptions() == []
        deadline = round(time.time()) + 120
        meta.notify_spot(deadline)
        (notice,) = await p.interruptions()
        assert (notice.pool_id, notice.node_id, notice.deadline) == ("l4-spot", instance, deadline)
    finally:
        await p.close()
        await meta.stop()
