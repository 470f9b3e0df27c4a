"""Per-key request rate limits: token buckets, shared by every router instance through Redis.

The bucket lives in Redis (hash ``meridian:router:rl:<key hash>``, fields tokens and ts) and is
updated by one Lua script per request, atomically, with Redis's own clock so routers need no clock
agreement. Without Redis the same bucket runs in-process (each router instance then enforces the
limit on its own). If Redis fails, requests are allowed through the in-process bucket (fail open,
logged and counted): an outage of the limiter must not become an outage of inference."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from router import auth

log = logging.getLogger("meridian.router.ratelimit")

# KEYS[1]: bucket; ARGV: rate per second, burst, cost. Returns {allowed, retry_after_ms}.
TOKEN_BUCKET_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now_ms = t[1] * 1000 + math.floor(t[2] / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1])
local ts = tonumber(b[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now_ms
end
local elapsed = now_ms - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(burst, tokens + elapsed * rate / 1000)
local allowed = 0
local retry_ms = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry_ms = math.ceil((cost - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now_ms))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {allowed, retry_ms}
"""


def limits_for(key: auth.KeyInfo, default_rps: float, default_burst: int) -> tuple[float, int]:
    """(rate per second, burst) for ``key``; rate 0 means unlimited."""
    rps = key.rate_limit_rps if key.rate_limit_rps is not None else default_rps
    burst = key.burst if key.burst is not None else default_burst
    if rps > 0 and burst <= 0:
        burst = max(1, math.ceil(rps))
    return rps, burst


class LocalBuckets:
    """The same token bucket, in process memory. Clock injected."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def take(self, name: str, rps: float, burst: int, cost: float = 1.0) -> float:
        """0.0 if allowed, else seconds until it would be."""
        now = self.clock()
        tokens, ts = self._buckets.get(name, (float(burst), now))
        tokens = min(float(burst), tokens + (now - ts) * rps)
        if tokens >= cost:
            self._buckets[name] = (tokens - cost, now)
            return 0.0
        self._buckets[name] = (tokens, now)
        return (cost - tokens) / rps


class RateLimiter:
    """Checks one request against its key's bucket; Redis-backed when a client is given."""

    def __init__(self, redis=None, *, default_rps: float = 0.0, default_burst: int = 0,
                 clock: Callable[[], float] = time.monotonic, on_error: Callable[[str], None] | None = None):
        self.redis = redis
        self.default_rps = default_rps
        self.default_burst = default_burst
        self.local = LocalBuckets(clock)
        self.on_error = on_error
        self._script = redis.register_script(TOKEN_BUCKET_LUA) if redis is not None else None

    async def check(self, key: auth.KeyInfo) -> float:
        """0.0 if the request may go, else the seconds to wait (for Retry-After)."""
        rps, burst = limits_for(key, self.default_rps, self.default_burst)
        if rps <= 0:
            return 0.0
        if self._script is None:
            return self.local.take(key.key_hash, rps, burst)
        try:
            allowed, retry_ms = await self._script(keys=[f"meridian:router:rl:{key.key_hash}"], args=[rps, burst, 1])
        except Exception as exc:  # fail open through the local bucket, loudly
            log.error("event=rate_limiter_error key=%s error=%r", key.name, exc)
            if self.on_error is not None:
                self.on_error("rate_limiter")
            return self.local.take(key.key_hash, rps, burst)
        return 0.0 if int(allowed) else int(retry_ms) / 1000.0
