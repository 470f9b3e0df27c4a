"""Scale from zero as a client sees it: a request for a model with no replica waits for the first
one instead of failing, and the router reports it as demand at once."""

from __future__ import annotations

import asyncio

from router import testing
from tests.integration.router.test_router_proxy import chat, url


async def test_request_waits_for_the_first_replica_of_a_model_at_zero(replicas, make_router, http):
    """A request arriving while the model has no replica is answered once a replica appears in the table."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": []}), cold_start_wait_s=30)
    pending = asyncio.create_task(http.post(url(router), json=chat()))
    await asyncio.sleep(0.5)
    assert not pending.done(), "the request should wait for a replica, not fail"
    report = router.traffic.take("r", "na-east")
    assert [(s.model, s.in_flight) for s in report.samples] == [("m", 1)], "waiting demand is reported"
    router.state.apply(testing.table(2, {"m": [testing.replica("a", rep.port)]}), "static")
    resp = await asyncio.wait_for(pending, 10)
    async with resp:
        assert resp.status == 200
        assert (await resp.json())["choices"][0]["message"]["content"]
    assert router.metrics.cold_start_waits["m"] == 1


async def test_no_replica_within_the_wait_is_a_503(make_router, http):
    """When no replica appears in time (or waiting is off) the client gets a 503 with an OpenAI-style error."""
    router = await make_router(testing.table(1, {"m": []}), cold_start_wait_s=0.3)
    async with http.post(url(router), json=chat()) as resp:
        assert resp.status == 503
        assert "No healthy replica" in (await resp.json())["error"]["message"]
    router_off = await make_router(testing.table(1, {"m": []}), cold_start_wait_s=0)
    async with http.post(url(router_off), json=chat()) as resp:
        assert resp.status == 503
