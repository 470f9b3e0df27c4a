"""API keys and per-key rate limits, with a real Redis shared by two router instances."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from router import auth, testing
from tests.conftest import free_port


def chat(model: str = "m") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}]}


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


async def test_keys_in_redis_and_model_allow_list(redis_url, replicas, make_router, http):
    """Requests need a known key (401 otherwise); a key limited to some models gets 403 for others."""
    client = aioredis.Redis.from_url(redis_url)
    await auth.put_key(client, "sk-good", "team-a")
    await auth.put_key(client, "sk-narrow", "team-b", models=["other"])
    await client.aclose()
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}),
                               redis_url=redis_url, api_keys_in_redis=True)
    base = f"http://127.0.0.1:{router.port}"
    async with http.post(f"{base}/v1/chat/completions", json=chat()) as resp:
        assert resp.status == 401 and (await resp.json())["error"]["type"] == "authentication_error"
    async with http.post(f"{base}/v1/chat/completions", json=chat(), headers=bearer("sk-wrong")) as resp:
        assert resp.status == 401
    async with http.post(f"{base}/v1/chat/completions", json=chat(), headers=bearer("sk-good")) as resp:
        assert resp.status == 200
    async with http.post(f"{base}/v1/chat/completions", json=chat(), headers={"x-api-key": "sk-good"}) as resp:
        assert resp.status == 200
    async with http.post(f"{base}/v1/chat/completions", json=chat(), headers=bearer("sk-narrow")) as resp:
        assert resp.status == 403
    async with http.get(f"{base}/v1/models") as resp:
        assert resp.status == 401
    assert rep.requests == 2


async def test_rate_limit_is_shared_across_routers_through_redis(redis_url, replicas, make_router, http):
    """Two routers draw on one bucket per key in Redis; over the burst they answer 429 with Retry-After."""
    client = aioredis.Redis.from_url(redis_url)
    await auth.put_key(client, "sk-limited", "team-c", rate_limit_rps=0.5, burst=4)
    await client.aclose()
    (rep,) = await replicas(1)
    routes = testing.table(1, {"m": [testing.replica("a", rep.port)]})
    r1 = await make_router(routes, redis_url=redis_url, api_keys_in_redis=True)
    r2 = await make_router(routes, redis_url=redis_url, api_keys_in_redis=True)
    statuses, retry_after = [], []
    for i in range(8):
        router = (r1, r2)[i % 2]
        async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=chat(),
                             headers=bearer("sk-limited")) as resp:
            statuses.append(resp.status)
            if resp.status == 429:
                retry_after.append(int(resp.headers["Retry-After"]))
                assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"
    # Burst 4 at 0.5/s: 4 pass, (at most one more if the test ran slowly), the rest are refused.
    assert 4 <= statuses.count(200) <= 5 and statuses[:4] == [200] * 4
    assert retry_after and all(1 <= s <= 2 for s in retry_after)


async def test_keys_file_and_local_rate_limit(tmp_path, replicas, make_router, http):
    """Without Redis, keys come from a file of hashes and limits are enforced in process."""
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - {{name: ci, sha256: {auth.hash_key('sk-file')}, rate_limit_rps: 0.1, burst: 2}}\n")
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}), api_keys_file=str(keys))
    statuses = []
    for _ in range(3):
        async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=chat(),
                             headers=bearer("sk-file")) as resp:
            statuses.append(resp.status)
    assert statuses == [200, 200, 429]


async def test_last_known_good_in_redis(redis_url, replicas, make_router, http):
    """With lkg_store redis, a new router instance starts from the table its predecessor saved."""
    (rep,) = await replicas(1)
    async with testing.FakeScheduler() as scheduler:
        scheduler.publish(testing.table(9, {"m": [testing.replica("a", rep.port)]}))
        first = await make_router(scheduler_address=scheduler.address, lkg_store="redis", redis_url=redis_url,
                                  router_id="edge-r")
        client = aioredis.Redis.from_url(redis_url)
        for _ in range(200):
            if await client.exists("meridian:router:lkg:edge-r"):
                break
            await asyncio.sleep(0.02)
        await client.aclose()
        address = scheduler.address
    await first.stop()
    second = await make_router(scheduler_address=address, lkg_store="redis", redis_url=redis_url, router_id="edge-r")
    assert second.state.version == 9 and second.state.source == "lkg"


async def test_metrics_on_the_client_port_need_a_key_or_are_on_the_metrics_port_only(tmp_path, make_router, http):
    """With API keys, the client port's /metrics needs one (a scraper sends it as a bearer token),
    like every page but the probes; with metrics_port set, /metrics is served there only, without
    a key, and the client port answers 404. Without either, it stays open for local runs."""
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - {{name: scraper, sha256: {auth.hash_key('sk-scrape')}}}\n")
    keyed = await make_router(api_keys_file=str(keys))
    url = f"http://127.0.0.1:{keyed.port}/metrics"
    async with http.get(url) as resp:
        assert resp.status == 401
    async with http.get(url, headers=bearer("sk-scrape")) as resp:
        assert resp.status == 200 and "meridian_router" in await resp.text()
    async with http.get(f"http://127.0.0.1:{keyed.port}/health") as resp:
        assert resp.status == 200

    port = free_port()
    split = await make_router(api_keys_file=str(keys), metrics_port=port)
    async with http.get(f"http://127.0.0.1:{split.port}/metrics", headers=bearer("sk-scrape")) as resp:
        assert resp.status == 404 and (await resp.json())["error"]["message"].endswith("on its metrics port, not to clients")
    async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200 and "meridian_router" in await resp.text()

    plain = await make_router()
    async with http.get(f"http://127.0.0.1:{plain.port}/metrics") as resp:
        assert resp.status == 200
