"""Crashes the fuzzing and hostile-input probes found, kept as regression tests: one agent's bad
figures used to stop planning for the whole fleet (a negative pool price failed every control-loop
tick; a NaN or infinite one failed every solve)."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import pytest
from tests.unit.scheduler.service_harness import TOKENS, leading

from meridian import spec
from meridian.fleet import models as fm
from meridian.fleet import wire
from scheduler import testing

DEPLOYMENT = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 1, max_replicas: 4}
"""


def sample(svc, name: str, labels: dict) -> float:
    return svc.metrics.registry.get_sample_value(f"meridian_scheduler_{name}", labels) or 0.0


@pytest.mark.parametrize("price", [-5.0, math.nan, math.inf])
async def test_one_pool_with_an_unusable_price_does_not_stop_planning(make_service, price):
    """c2 reports a pool priced negative, NaN or infinite beside c1's good pool: the bad pool is
    dropped and counted (bad_pool), and plans keep coming over c1's pool (no failed tick or solve)."""
    svc = await leading(await make_service(plan_interval_s=0.5))
    await svc.spec_store.apply(spec.load_text(DEPLOYMENT, "d.yaml").documents, 0.0)
    a1 = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", TOKENS["c1"])
    a2 = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c2", TOKENS["c2"])
    try:
        await a1.connect()
        await a2.connect()
        await a2.inventory([dataclasses.replace(testing.gpu_pool("cheap"), price_per_node_hour_usd=price)])
        await a1.inventory([testing.gpu_pool("l4")])
        for agent in (a1, a2):
            await agent.replicas([])

        async def heartbeats() -> None:  # keep both clusters live while the plan comes
            while True:
                for agent in (a1, a2):
                    await agent.heartbeat()
                await asyncio.sleep(0.3)

        beating = asyncio.create_task(heartbeats())
        await testing.wait_for(lambda: sample(svc, "auth_failures_total", {"surface": "agent", "reason": "bad_pool"})
                               == 1, what="bad pool refused")
        # Plans keep coming, over c1's pool alone (whether the solve places chat within its time
        # limit on a loaded machine is the solver's business, not this test's).
        solved = lambda: sum(sample(svc, "plans_total", {"status": s}) for s in ("optimal", "feasible"))  # noqa: E731
        before = solved()
        await testing.wait_for(lambda: solved() >= before + 3 and svc.loop.plan.result.stats.get("pools") == 1,
                               timeout_s=30, what="plans over the good pool")
        assert sample(svc, "plans_total", {"status": "error"}) == 0
        assert sample(svc, "errors_total", {"where": "tick"}) == 0
        assert svc.fleet.pools_of("c2") == {}
        beating.cancel()
    finally:
        await a1.close()
        await a2.close()


def test_non_finite_or_negative_measurements_read_as_zero():
    """A load, latency or weight that is NaN, infinite or negative on the wire reads as 0, so a
    replica's report (and a router's traffic) is kept rather than poisoning sums and policies."""
    load = wire.load_to_pb(fm.ReplicaLoad(kv_cache_usage=0.5))
    load.ttft.p99_ms = math.nan
    load.requests_per_s = -3.0
    load.generation_tokens_per_s = math.inf
    got = wire.load_from_pb(load)
    assert (got.ttft.p99_ms, got.requests_per_s, got.generation_tokens_per_s, got.kv_cache_usage) == (0.0, 0.0, 0.0,
                                                                                                       0.5)
