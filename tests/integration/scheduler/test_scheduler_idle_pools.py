"""Idle paid nodes are given back, in a real fleet on loopback: a scheduler process, an agent process
(sim provider) and its emulator replica. A pool that starts with three nodes for a deployment that
needs one shrinks to one after the scale-down delay, and the bill (``GET /v1/cost``) drops from
three nodes with idle GPUs to one node with none. Bounded: about 30 s of wall time."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from meridian import catalog
from meridian.demo import fleet as fleet_mod
from meridian.demo import processes

pytestmark = [pytest.mark.timeout(240)]
SPECS = """
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: default}
spec:
  clouds: [{name: aws}]
  spot: {allowed: false}
---
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 1, max_replicas: 2}
"""
CLUSTERS = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: aws-use1}
spec:
  cloud: aws
  region: us-east-1
  provider: sim
  auth: {token_env: UNUSED_REPLACED_BY_THE_FLEET}
  pools:
    - {name: l4, instance_type: g6.xlarge, max_nodes: 4, initial_nodes: 3}
"""
DELAY_S = 3.0


async def _poll(fleet, session, predicate, timeout_s: float, what: str) -> dict:
    deadline = time.monotonic() + timeout_s
    last: dict = {}
    while time.monotonic() < deadline:
        try:
            last = await fleet.cost(session)
            if predicate(last):
                return last
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError):
            pass
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{what} not seen within {timeout_s}s; last bill: {last.get('now')}")


async def test_an_idle_pool_shrinks_after_the_delay_and_the_bill_follows(tmp_path):
    """Three L4 nodes are billed while one replica runs; after the delay the idle two are given back and
    the bill is one node's price with no idle GPU; the bill over the run lies between the two."""
    (tmp_path / "specs.yaml").write_text(SPECS)
    (tmp_path / "clusters.yaml").write_text(CLUSTERS)
    work = tmp_path / "fleet"
    # The adoption grace outlasts the agent's start, so the first plan is made from its report.
    fleet = fleet_mod.LocalFleet(fleet_mod.FleetConfig(
        workdir=work, spec_files=(tmp_path / "specs.yaml",), cluster_file=tmp_path / "clusters.yaml",
        provisioning_delay_s=1.0, scheduler_settings=(
            "heartbeat_interval_s=1", "adopt_grace_s=30", "tick_interval_s=0.5",
            f"pool_scale_down_delay_s={DELAY_S:g}")))
    node = catalog.instances.default().lookup("aws", "g6.xlarge", "us-east-1").price_per_hour_usd
    fleet.prepare()
    try:
        await fleet.start_scheduler()
        async with aiohttp.ClientSession() as session:
            applied = await fleet.apply(session, [tmp_path / "specs.yaml", work / "clusters.yaml"])
            assert applied["status"] == 200, applied
            await fleet.start_agents()
            three = await _poll(fleet, session, lambda b: b["now"]["nodes"] == 3 and b["now"]["gpus_held"] == 1,
                                60, "three nodes billed with one replica")
            assert three["now"]["usd_per_hour"] == pytest.approx(3 * node, abs=1e-4)
            assert three["now"]["idle_gpus"] == 2 and three["now"]["idle_usd_per_hour"] == pytest.approx(2 * node, abs=1e-4)
            assert three["pool_scale_down_delay_s"] == DELAY_S
            one = await _poll(fleet, session, lambda b: b["now"]["nodes"] == 1, 30 + DELAY_S, "the pool shrunk to 1")
            assert one["now"]["usd_per_hour"] == pytest.approx(node, abs=1e-4)
            assert one["now"]["idle_gpus"] == 0 and one["now"]["gpus_held"] == 1
            assert one["now"]["shares_usd_per_hour"] == pytest.approx(node, abs=1e-4)
            since = one["since"]
            assert node < since["usd_per_hour"] < 3 * node
            assert since["usd"] == pytest.approx(since["shares_usd"] + since["idle_usd"], abs=1e-5)
    finally:
        await asyncio.to_thread(fleet.stop)
        left = await asyncio.to_thread(fleet.procs.stragglers)
        assert left == [], f"processes of the run outlived it: {processes.describe(left)}"
