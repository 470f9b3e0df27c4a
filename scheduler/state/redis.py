"""The HA state store: everything in one Redis (a collection is a hash, a counter a string), the leader
lease a key with a server-side TTL. Atomicity and fencing come from Lua scripts, which Redis runs
without interleaving other commands: the fence check and the write it guards are one step.

Key layout, per namespace: ``meridian:{ns}:c:{collection}`` (hash), ``meridian:{ns}:n:{counter}``,
``meridian:{ns}:lease`` (JSON: holder, token, meta).

Replicated Redis (Sentinel, ``redis+sentinel://``; see ``meridian.redisconn``): Redis replicates
asynchronously, so a write the primary acknowledged can vanish in a failover. With
``replica_acks`` = N > 0 every write (the lease's acquisition and renewals, fenced writes, directive
claims, counters, spec applies) is followed, on the same connection, by ``WAIT N timeout``; a write
fewer than N replicas confirmed within ``ack_timeout_ms`` raises ``StateError`` and counts as not
done: a lease not replicated is not led with (so a fencing token, once used, survives a failover
and the next one is higher), a renewal not replicated does not extend this node's belief in its
lease (a primary cut off from its replicas cannot keep a deposed leader leading), and a claim not
replicated is not sent (at most once). Sentinel promotes the replica with the most replicated data,
so what N >= 1 replicas confirmed is on the new primary."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Mapping, Sequence

import redis.asyncio as aioredis
import redis.exceptions

from meridian import redisconn
from scheduler.state import base

_FENCE = """
local function fenced(lease_key, fence)
  if fence == '' then return true end
  local v = redis.call('GET', lease_key)
  if not v then return false end
  return cjson.decode(v)['token'] == fence
end
"""

# KEYS: lease, then one hash key per op. ARGV: fence, then (op, field, value) per op.
_WRITE = _FENCE + """
if not fenced(KEYS[1], ARGV[1]) then return -1 end
for i = 2, #KEYS do
  local op = ARGV[(i - 2) * 3 + 2]
  local field = ARGV[(i - 2) * 3 + 3]
  if op == 'put' then
    redis.call('HSET', KEYS[i], field, ARGV[(i - 2) * 3 + 4])
  else
    redis.call('HDEL', KEYS[i], field)
  end
end
return 1
"""

# KEYS: lease, hash. ARGV: fence, field, value.
_INSERT = _FENCE + """
if not fenced(KEYS[1], ARGV[1]) then return -1 end
return redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[3])
"""

# KEYS: lease, token counter. ARGV: holder, ttl_ms, meta JSON, token floor (wall clock ms).
# Returns {lease JSON, pttl} or nil.
_ACQUIRE = """
local v = redis.call('GET', KEYS[1])
if v then
  if cjson.decode(v)['holder'] == ARGV[1] then
    -- Held already (an earlier acquire whose replication was not confirmed): rewrite its expiry
    -- unchanged, a write after the lease's, so WAIT on this connection confirms the lease itself.
    local pttl = redis.call('PTTL', KEYS[1])
    if pttl > 0 then redis.call('PEXPIRE', KEYS[1], pttl) end
    return {v, pttl}
  end
  return false
end
local token = redis.call('INCR', KEYS[2])
if token < tonumber(ARGV[4]) then
  redis.call('SET', KEYS[2], ARGV[4])
  token = tonumber(ARGV[4])
end
local lease = cjson.encode({holder = ARGV[1], token = string.format('%d', token), meta = cjson.decode(ARGV[3])})
redis.call('SET', KEYS[1], lease, 'PX', ARGV[2])
return {lease, tonumber(ARGV[2])}
"""

# KEYS: counter keys. ARGV: one value per key; each counter becomes max(current, value).
_RAISE = """
for i = 1, #KEYS do
  local current = tonumber(redis.call('GET', KEYS[i]) or '0')
  if current < tonumber(ARGV[i]) then redis.call('SET', KEYS[i], ARGV[i]) end
end
return #KEYS
"""

# KEYS: lease. ARGV: holder, token, ttl_ms (renew) / holder, token (release).
_RENEW = """
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local l = cjson.decode(v)
if l['holder'] ~= ARGV[1] or l['token'] ~= ARGV[2] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

_RELEASE = """
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local l = cjson.decode(v)
if l['holder'] ~= ARGV[1] or l['token'] ~= ARGV[2] then return 0 end
return redis.call('DEL', KEYS[1])
"""


class RedisStore(base.StateStore):
    def __init__(self, client: aioredis.Redis, *, namespace: str = "default", replica_acks: int = 0,
                 ack_timeout_ms: int = 500):
        if replica_acks < 0 or ack_timeout_ms <= 0:
            raise ValueError("replica_acks must be >= 0 and ack_timeout_ms > 0")
        self._r = client
        self.replica_acks = replica_acks
        self._ack_timeout_ms = ack_timeout_ms
        self._prefix = f"meridian:{namespace}:"
        self._lease_key = self._prefix + "lease"
        self._write = client.register_script(_WRITE)
        self._insert = client.register_script(_INSERT)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._raise = client.register_script(_RAISE)

    @classmethod
    def from_url(cls, url: str, *, namespace: str = "default", timeout_s: float = 2.0,
                 replica_acks: int | None = None, ack_timeout_ms: int = 500) -> RedisStore:
        """A store on ``url`` (``redis://`` or ``redis+sentinel://``). ``replica_acks`` None: 1 with
        Sentinel (a replicated deployment), 0 for one Redis."""
        target = redisconn.parse(url)
        client = redisconn.connect(url, decode_responses=True, timeout_s=timeout_s, retries=1)
        acks = (1 if target.is_sentinel else 0) if replica_acks is None else replica_acks
        return cls(client, namespace=namespace, replica_acks=acks, ack_timeout_ms=ack_timeout_ms)

    def _hash(self, collection: str) -> str:
        return f"{self._prefix}c:{collection}"

    async def _call(self, coro):
        try:
            return await coro
        except redis.exceptions.RedisError as exc:
            raise base.StateError(f"Redis: {exc}") from exc

    async def _mutate(self, queue, wrote=lambda result: True) -> object:
        """Run the write ``queue(client)`` issues: directly, or with ``replica_acks`` in a pipeline
        followed by ``WAIT`` on the same connection (WAIT counts the replicas that have this
        connection's writes). Its result; StateError when it wrote (``wrote(result)``: a refused
        fenced write wrote nothing) and too few replicas confirmed it."""
        if not self.replica_acks:
            return await self._call(queue(self._r))
        async with self._r.pipeline(transaction=False) as pipe:
            queued = queue(pipe)
            if inspect.isawaitable(queued):  # a registered script queues itself when awaited
                await queued
            pipe.wait(self.replica_acks, self._ack_timeout_ms)
            results = await self._call(pipe.execute())
        if wrote(results[0]) and int(results[-1]) < self.replica_acks:
            raise base.StateError(f"Redis: the write reached {int(results[-1])} of the {self.replica_acks} replica(s) "
                                  f"required within {self._ack_timeout_ms} ms; treated as not done")
        return results[0]

    async def get(self, collection: str, key: str) -> str | None:
        return await self._call(self._r.hget(self._hash(collection), key))

    async def items(self, collection: str) -> dict[str, str]:
        return await self._call(self._r.hgetall(self._hash(collection)))

    async def write(self, ops: Sequence[base.Op], *, fence: int | None = None) -> None:
        keys = [self._lease_key]
        args: list[str] = ["" if fence is None else str(fence)]
        for op in ops:
            keys.append(self._hash(op.collection))
            if isinstance(op, base.Put):
                args += ["put", op.key, op.value]
            else:
                args += ["del", op.key, ""]
        result = await self._mutate(lambda pipe: self._write(keys=keys, args=args, client=pipe),
                                    wrote=lambda r: int(r) != -1)
        if int(result) == -1:
            raise base.FencedOut(f"lease not held with fencing token {fence}")

    async def insert(self, collection: str, key: str, value: str, *, fence: int | None = None) -> bool:
        args = ["" if fence is None else str(fence), key, value]
        result = int(await self._mutate(
            lambda pipe: self._insert(keys=[self._lease_key, self._hash(collection)], args=args, client=pipe),
            wrote=lambda r: int(r) == 1))
        if result == -1:
            raise base.FencedOut(f"lease not held with fencing token {fence}")
        return result == 1

    async def incr(self, counter: str) -> int:
        return int(await self._mutate(lambda pipe: pipe.incr(f"{self._prefix}n:{counter}")))

    async def _scan(self, pattern: str) -> list[str]:
        keys: list[str] = []
        async for key in self._r.scan_iter(match=pattern, count=500):
            keys.append(key)
        return keys

    async def collections(self) -> list[str]:
        prefix = self._prefix + "c:"
        keys = await self._call(self._scan(_glob_escape(prefix) + "*"))
        return sorted(k[len(prefix):] for k in keys)

    async def counters(self) -> dict[str, int]:
        prefix = self._prefix + "n:"
        keys = sorted(await self._call(self._scan(_glob_escape(prefix) + "*")))
        if not keys:
            return {}
        values = await self._call(self._r.mget(keys))
        return {k[len(prefix):]: int(v) for k, v in zip(keys, values) if v is not None}

    async def raise_counters(self, values: Mapping[str, int]) -> None:
        if not values:
            return
        names = sorted(values)
        await self._mutate(lambda pipe: self._raise(keys=[f"{self._prefix}n:{n}" for n in names],
                                                    args=[str(int(values[n])) for n in names], client=pipe))

    async def acquire_lease(self, holder: str, ttl_s: float, meta: Mapping[str, str]) -> base.Lease | None:
        ttl_ms = max(1, int(ttl_s * 1000))
        got = await self._mutate(lambda pipe: self._acquire(keys=[self._lease_key, f"{self._prefix}n:lease_token"],
                                                            args=[holder, str(ttl_ms), json.dumps(dict(meta)),
                                                                  str(base.token_floor(time.time()))],
                                                            client=pipe),
                                 wrote=bool)
        if not got:
            return None
        raw, pttl_ms = got
        return base.decode_lease(raw, time.time() + max(0, int(pttl_ms)) / 1000.0)

    async def renew_lease(self, holder: str, token: int, ttl_s: float) -> bool:
        ttl_ms = max(1, int(ttl_s * 1000))
        return int(await self._mutate(
            lambda pipe: self._renew(keys=[self._lease_key], args=[holder, str(token), str(ttl_ms)], client=pipe),
            wrote=lambda r: int(r) == 1)) == 1

    async def release_lease(self, holder: str, token: int) -> None:
        # Best effort: an unconfirmed release only means a standby waits out the TTL.
        await self._mutate(lambda pipe: self._release(keys=[self._lease_key], args=[holder, str(token)], client=pipe),
                           wrote=lambda r: False)

    async def lease(self) -> base.Lease | None:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.get(self._lease_key)
            pipe.pttl(self._lease_key)
            raw, pttl_ms = await self._call(pipe.execute())
        if raw is None:
            return None
        return base.decode_lease(raw, time.time() + max(0, int(pttl_ms)) / 1000.0)

    async def close(self) -> None:
        await self._r.aclose()


def _glob_escape(text: str) -> str:
    """``text`` with Redis glob metacharacters escaped, for a SCAN MATCH prefix."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
