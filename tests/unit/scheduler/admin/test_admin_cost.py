"""GET /v1/cost and ``meridian cost`` against a running scheduler: the bill from the reported pools priced
as the solver prices them (catalog, policy, reserved commitment), shares + idle = bill, tokens from
the routers' reports, the bill since the node leads, and the specs' cost floor beside it."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import grpc
import pytest
import yaml

from meridian import catalog
from meridian.cli import main as cli
from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import routing_pb2_grpc
from scheduler import testing
from scheduler.admin import client as admin_client
from tests.unit.scheduler.service_harness import (
    ADMIN_TOKEN,
    ROUTER_TOKEN,
    TOKENS,
    leading,
)

POLICY = """
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: default}
spec:
  clouds: [{name: aws}]
  reserved:
    - {cloud: aws, region: us-east-1, instance_type: p5.48xlarge, nodes: 1, price_per_hour_usd: 31.46}
"""
DEPLOYMENT = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: assistant}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 2, max_replicas: 4, scale_up_delay_s: 0}
"""
CLUSTER = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c1}
spec:
  cloud: aws
  region: us-east-1
  provider: sim
  auth: {token_env: MERIDIAN_TOKEN_C1}
  scheduler: {address: "127.0.0.1:7070"}
  pools:
    - {name: l4, instance_type: g6.xlarge, tier: on_demand, min_nodes: 0, max_nodes: 4, initial_nodes: 3}
    - {name: h100, instance_type: p5.48xlarge, tier: reserved, min_nodes: 0, max_nodes: 2, initial_nodes: 2}
"""


def client(svc) -> admin_client.AdminClient:
    return admin_client.AdminClient(f"http://127.0.0.1:{svc.admin_port}", ADMIN_TOKEN, env={})


async def call(fn, *args):
    return await asyncio.to_thread(fn, *args)


async def _fleet(svc):
    """The specs applied; agent c1 (aws us-east-1) reports 3 L4 nodes (on demand) and 2 H100 nodes
    (reserved, 1 committed) and runs what the plan starts; two chat replicas ready."""
    c = client(svc)
    await call(c.apply, [{"name": "p.yaml", "text": POLICY}, {"name": "d.yaml", "text": DEPLOYMENT},
                         {"name": "c.yaml", "text": CLUSTER}])
    agent = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", TOKENS["c1"], cloud=fm.Cloud.AWS,
                              region="us-east-1")
    cluster = testing.FakeCluster(agent, [
        testing.gpu_pool("l4", nodes=3, nodes_max=4, price_per_node_hour_usd=0.5),
        testing.gpu_pool("h100", gpu_type="H100", nodes=2, nodes_max=2, gpus_per_node=8, tier=fm.Tier.RESERVED,
                         instance_type="p5.48xlarge", price_per_node_hour_usd=55.0)])
    await cluster.connect()

    async def two_ready() -> bool:
        await cluster.step()
        return sum(r.state is fm.ReplicaState.READY for r in cluster.replicas.values()) == 2

    await testing.wait_for(two_ready, interval_s=0.2, what="two chat replicas ready")
    return c, agent, cluster


async def _traffic(svc, prompt: int, completion: int, window_s: float = 10.0) -> None:
    now = svc.clock.now()
    report = fm.TrafficReport("router-a", "na-east", now - window_s, now, (
        fm.TrafficSample("chat", "na-east", requests=20, prompt_tokens=prompt, completion_tokens=completion),))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as ch:
        await routing_pb2_grpc.RoutingServiceStub(ch).ReportTraffic(wire.traffic_to_pb(report, ROUTER_TOKEN))


async def test_cost_endpoint_bills_reported_nodes_at_the_solvers_prices(make_service):
    """The bill is every reported node x its price as the solver prices it (the catalog's on-demand L4
    price, not the agent's; the H100 pool's first node at the committed $31.46, the second on demand);
    the replicas' shares (GPUs held x price per GPU) and the idle part add up to it; tokens come from the
    routers' reports; the floor of the specs is beside it, and the bill since the node leads grows."""
    svc = await leading(await make_service())
    c, agent, _ = await _fleet(svc)
    try:
        await _traffic(svc, prompt=6000, completion=2000)
        doc = await call(c.cost)
        now = doc["now"]
        offers = catalog.instances.default()
        l4 = offers.lookup("aws", "g6.xlarge", "us-east-1").price_per_hour_usd
        h100 = offers.lookup("aws", "p5.48xlarge", "us-east-1").price_per_hour_usd
        assert doc["leader"] is True
        assert now["usd_per_hour"] == pytest.approx(3 * l4 + 31.46 + h100, abs=1e-6)
        assert now["shares_usd_per_hour"] + now["idle_usd_per_hour"] == pytest.approx(now["usd_per_hour"], abs=1e-5)
        chat = next(r for r in now["by"]["model"] if r["key"] == "chat")
        # Where the plan put the two replicas decides their price per GPU; the shares say so.
        per_gpu = {p["pool"]: p["usd_per_gpu_hour"] for p in now["pools"]}
        placed = {s["pool"]: s["gpus"] for s in now["shares"] if s["model"] == "chat"}
        assert chat["gpus"] == 2 and sum(placed.values()) == 2
        assert chat["usd_per_hour"] == pytest.approx(sum(per_gpu[p] * g for p, g in placed.items()), abs=1e-5)
        assert [r["key"] for r in now["by"]["team"]] == ["assistant"]
        h100_pool = next(p for p in now["pools"] if p["pool"] == "h100")
        assert (h100_pool["committed_nodes"], h100_pool["price_per_node_hour_usd"],
                h100_pool["beyond_commitment_price_per_node_hour_usd"]) == (1, 31.46, pytest.approx(h100))
        assert sum(r["usd_per_hour"] for r in now["by"]["tier"]) == pytest.approx(now["usd_per_hour"], abs=1e-5)
        # 8000 tokens over a 10 s window: 800 tokens/s.
        units = now["per_million_tokens"]
        assert units["fleet"]["tokens_per_s"] == pytest.approx(800.0)
        assert units["fleet"]["usd_per_million_tokens"] == pytest.approx(now["usd_per_hour"] / (800 * 3600) * 1e6,
                                                                         rel=1e-5)
        assert doc["floor"]["status"] == "ready" and doc["floor"]["usd_per_hour"] > 0
        assert doc["pool_scale_down_delay_s"] == svc.config.pool_scale_down_delay_s
        await asyncio.sleep(2 * svc.config.tick_interval_s + 0.2)
        later = await call(c.cost)
        since = later["since"]
        assert since["kind"] == "window" and since["hours"] > 0 and since["usd"] > 0
        assert since["usd"] == pytest.approx(since["shares_usd"] + since["idle_usd"], abs=1e-5)
        gauge = {tuple(s.labels[k] for k in ("cloud", "tier", "part")): s.value
                 for m in svc.metrics.registry.collect() if m.name == "meridian_scheduler_bill_usd_per_hour"
                 for s in m.samples}
        assert sum(gauge.values()) == pytest.approx(now["usd_per_hour"], abs=1e-5)
    finally:
        await agent.close()


async def test_cli_cost_prints_the_bill_the_endpoint_answers(make_service, capsys, monkeypatch):
    """``meridian cost`` prints the endpoint's bill, labelled, with the shares and idle part under it and
    the cost floor beside it; ``-o json`` is the endpoint's document and ``-o yaml`` the same in YAML; a
    bad --by names the valid dimensions."""
    svc = await leading(await make_service())
    monkeypatch.setenv("MERIDIAN_SCHEDULER_URL", f"http://127.0.0.1:{svc.admin_port}")
    monkeypatch.setenv("MERIDIAN_ADMIN_TOKEN", ADMIN_TOKEN)
    _, agent, _ = await _fleet(svc)
    try:
        assert await call(cli.main, ["cost", "-o", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert await call(cli.main, ["cost"]) == 0
        out = capsys.readouterr().out
        bill = doc["now"]["usd_per_hour"]
        assert f"Bill now: ${bill:,.2f}/h: every billed node" in out
        assert "of which replicas' shares: $" in out and "and idle GPUs on paid nodes: $" in out
        assert "Cost floor of these specs: $" in out and "(a bound, not a bill)" in out
        assert "By model:" in out and "By team:" in out and "By cloud:" in out and "By tier:" in out
        bill_rows = [line for line in out.splitlines() if line.startswith("bill ")]
        assert len(bill_rows) == 4 and all(f"{bill:,.2f}" in row for row in bill_rows)
        assert await call(cli.main, ["cost", "-o", "yaml"]) == 0
        assert yaml.safe_load(capsys.readouterr().out)["now"]["usd_per_hour"] == pytest.approx(bill, abs=0.01)
        assert await call(cli.main, ["cost", "--by", "model,colour"]) == 2
        assert "colour" in capsys.readouterr().err
    finally:
        await agent.close()


async def test_a_standby_answers_with_no_fleet_and_says_where_the_leader_is(make_service, tmp_path):
    """A standby knows no fleet: its bill is empty, says so, and points at the leader; the cost floor
    it gives is that of the specs as stored, the leader's; a bad ``floor`` parameter is a 400 naming
    the valid value."""
    state = f"sqlite://{tmp_path}/shared.db"
    leader = await leading(await make_service(state_url=state))
    standby = await make_service(state_url=state)
    doc = await call(client(standby).cost, False)
    assert doc["leader"] is False and "stands by" in doc["note"]
    assert doc["now"]["usd_per_hour"] == 0 and doc["since"] is None
    assert doc["floor"]["status"] == "none"
    with pytest.raises(urllib.error.HTTPError) as err:
        await call(urllib.request.urlopen, urllib.request.Request(
            f"http://127.0.0.1:{standby.admin_port}/v1/cost?floor=later",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}))
    assert err.value.code == 400 and "the only value is 'wait'" in err.value.read().decode()
    await call(client(leader).apply, [{"name": "p.yaml", "text": POLICY}, {"name": "d.yaml", "text": DEPLOYMENT},
                                      {"name": "c.yaml", "text": CLUSTER}])
    floors = [(await call(c.cost))["floor"] for c in (client(standby), client(leader))]
    assert floors[0]["status"] == "ready" and floors[0]["usd_per_hour"] == floors[1]["usd_per_hour"] > 0
