"""The routers' shared rate limits on replicated Redis (redis+sentinel://, through the kernel's Redis
connection factory): two routers share one bucket; when the primary is SIGKILLed they fail open
through their local buckets (counted), and share the bucket again on the promoted replica."""

from __future__ import annotations

import asyncio

from meridian import redisconn
from router import auth, ratelimit
from tests.integration.sentinel_cluster import SentinelCluster

KEY = auth.KeyInfo("team-a", auth.hash_key("k-123"), rate_limit_rps=0.001, burst=5)
AFTER = auth.KeyInfo("team-b", auth.hash_key("k-456"), rate_limit_rps=0.001, burst=5)
PROBE = auth.KeyInfo("probe", auth.hash_key("k-789"), rate_limit_rps=1000.0, burst=1000)


async def allowed(limiters, n: int, key: auth.KeyInfo = KEY) -> int:
    return sum([await limiters[i % len(limiters)].check(key) == 0.0 for i in range(n)])


async def test_two_routers_share_limits_across_a_sentinel_failover():
    """5 of 8 requests pass across two routers (one shared bucket of 5); during the failover requests
    are let through locally and counted as errors; after it the shared bucket limits again."""
    cluster = SentinelCluster().start()
    clients = [redisconn.connect(cluster.url, timeout_s=1.0, retries=1) for _ in range(2)]
    errors: list[str] = []
    limiters = [ratelimit.RateLimiter(c, on_error=errors.append) for c in clients]
    try:
        assert await allowed(limiters, 8) == 5
        old = cluster.kill_primary()
        assert await limiters[0].check(KEY) == 0.0 and errors  # fail open, loudly
        await asyncio.to_thread(cluster.wait_failover, old)
        for _ in range(100):  # both clients find the new primary on their next commands
            errors.clear()
            await allowed(limiters, 2, PROBE)
            if not errors:
                break
            await asyncio.sleep(0.1)
        assert not errors
        assert await allowed(limiters, 8, AFTER) == 5 and not errors
    finally:
        for c in clients:
            await c.aclose()
        cluster.stop()
