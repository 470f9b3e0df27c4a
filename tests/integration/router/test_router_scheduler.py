"""The router fed by a (fake) scheduler over gRPC: table updates, last-known-good restarts,
traffic reports."""

from __future__ import annotations

import asyncio

from router import testing


def chat(model: str = "m") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}]}


async def until(predicate, timeout_s: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_tables_from_watch_routes_are_applied(replicas, make_router, http):
    """Tables streamed by WatchRoutes replace each other; the router names itself and its region."""
    a, b = await replicas(2)
    async with testing.FakeScheduler() as scheduler:
        scheduler.publish(testing.table(1, {"m": [testing.replica("a", a.port)]}))
        router = await make_router(scheduler_address=scheduler.address, region="eu-west", router_id="edge-1")
        await until(lambda: router.state.version == 1)
        async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=chat()) as resp:
            assert (await resp.json())["replica"] == a.name
        scheduler.publish(testing.table(2, {"m2": [testing.replica("b", b.port)]}))
        await until(lambda: router.state.version == 2)
        async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=chat("m2")) as resp:
            assert (await resp.json())["replica"] == b.name
        async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=chat("m")) as resp:
            assert resp.status == 404
        first = scheduler.watch_requests[0]
        assert (first.router_id, first.router_region) == ("edge-1", "eu-west")


async def test_restart_serves_last_known_good_while_scheduler_is_down(replicas, make_router, http, tmp_path):
    """A router restarted while the scheduler is unreachable serves the table saved on disk."""
    (rep,) = await replicas(1)
    lkg = str(tmp_path / "lkg.pb")
    async with testing.FakeScheduler() as scheduler:
        scheduler.publish(testing.table(5, {"m": [testing.replica("a", rep.port)]}))
        first = await make_router(scheduler_address=scheduler.address, lkg_store="file", lkg_path=lkg)
        await until(lambda: first.state.version == 5 and (tmp_path / "lkg.pb").exists())
        address = scheduler.address
    await first.stop()
    second = await make_router(scheduler_address=address, lkg_store="file", lkg_path=lkg)
    assert second.state.version == 5 and second.state.source == "lkg"
    async with http.post(f"http://127.0.0.1:{second.port}/v1/chat/completions", json=chat()) as resp:
        assert resp.status == 200
    async with http.get(f"http://127.0.0.1:{second.port}/ready") as resp:
        assert resp.status == 200 and (await resp.json())["source"] == "lkg"


async def test_router_without_any_table_is_not_ready(make_router, http):
    """With no scheduler reachable and no saved table, /ready is 503 and so are requests (not_ready,
    retryable), not a 404 that would read as a model that does not exist."""
    router = await make_router(scheduler_address="127.0.0.1:1")
    async with http.get(f"http://127.0.0.1:{router.port}/ready") as resp:
        assert resp.status == 503
    async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=chat()) as resp:
        assert resp.status == 503 and (await resp.json())["error"]["code"] == "not_ready"


async def test_traffic_reports_reach_the_scheduler(replicas, make_router, http):
    """Requests and tokens per (model, client region) are reported through ReportTraffic."""
    (rep,) = await replicas(1)
    async with testing.FakeScheduler() as scheduler:
        scheduler.publish(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
        router = await make_router(scheduler_address=scheduler.address, region="na-east",
                                   traffic_report_interval_s=0.2)
        await until(lambda: router.state.version == 1)
        for _ in range(3):
            async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=chat()) as resp:
                assert resp.status == 200
        await until(lambda: sum(s.requests for r in scheduler.reports for s in r.samples) == 3)
        samples = [s for r in scheduler.reports for s in r.samples]
        assert {(s.model, s.client_region) for s in samples} == {("m", "na-east")}
        assert sum(s.prompt_tokens for s in samples) == 21 and sum(s.completion_tokens for s in samples) == 24
