"""API keys, stored hashed (SHA-256 hex of the key), from a YAML file or Redis.

Keys file::

    keys:
      - name: team-a                 # shows in logs, never the key
        sha256: 9f86d0...            # hex SHA-256 of the key (`meridian router --hash-key KEY`)
        rate_limit_rps: 10           # optional; default: the router's default_rate_limit_rps
        burst: 20                    # optional; default: default_rate_limit_burst or one second of rate
        models: [llama-3-8b]         # optional allow-list; default: every model
        max_concurrent_streams: 8    # optional; default: the router's default_max_concurrent_streams

Redis: hash ``meridian:router:apikeys``, field = the SHA-256 hex, value = JSON with the same fields
(name, rate_limit_rps, burst, models, max_concurrent_streams). Lookups are cached in-process for ``cache_ttl_s`` (unknown
keys for ``negative_ttl_s``) so Redis sees about one read per key per TTL.

Clients send ``Authorization: Bearer <key>`` (what the openai SDK does) or ``x-api-key: <key>``."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import pathlib
import time
from collections.abc import Callable

import orjson
import pydantic

from meridian import yamlread
from router import errors

log = logging.getLogger("meridian.router.auth")
REDIS_HASH = "meridian:router:apikeys"


def hash_key(key: str) -> str:
    """The stored form of an API key: SHA-256, hex."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class KeyInfo:
    name: str
    key_hash: str
    rate_limit_rps: float | None = None
    burst: int | None = None
    models: frozenset[str] | None = None
    max_concurrent_streams: int | None = None

    def allows(self, model: str) -> bool:
        return self.models is None or model in self.models


def may_use(key: KeyInfo | None, model: str) -> bool:
    """Whether the caller may use (and so see) ``model``: every model when the router checks no
    keys (``key`` None), else what its key allows."""
    return key is None or key.allows(model)


class _KeySpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    name: str = pydantic.Field(min_length=1, max_length=128)
    sha256: str = pydantic.Field(pattern=r"^[0-9a-f]{64}$")
    rate_limit_rps: float | None = pydantic.Field(default=None, ge=0)
    burst: int | None = pydantic.Field(default=None, ge=1)
    models: list[str] | None = None
    max_concurrent_streams: int | None = pydantic.Field(default=None, ge=0, le=1_000_000)

    def info(self) -> KeyInfo:
        return KeyInfo(self.name, self.sha256, self.rate_limit_rps, self.burst,
                       frozenset(self.models) if self.models is not None else None, self.max_concurrent_streams)


class _KeysFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    keys: list[_KeySpec] = pydantic.Field(default_factory=list)


def load_keys_file(path: str | pathlib.Path) -> dict[str, KeyInfo]:
    """hash -> KeyInfo from a keys file; raises pydantic.ValidationError naming the bad field."""
    data = yamlread.load_file(path) or {}
    parsed = _KeysFile.model_validate(data)
    out = {k.sha256: k.info() for k in parsed.keys}
    if len(out) != len(parsed.keys):
        raise ValueError(f"{path}: the same key hash appears twice")
    return out


def presented_key(authorization: str | None, x_api_key: str | None) -> str | None:
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    if x_api_key:
        return x_api_key.strip() or None
    return None


class KeyStore:
    """Resolves presented keys to KeyInfo: static keys first, then Redis (when given)."""

    def __init__(self, static: dict[str, KeyInfo] | None = None, redis=None, *, cache_ttl_s: float = 30.0,
                 negative_ttl_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 on_error: Callable[[str], None] | None = None):
        self.static = static or {}
        self.redis = redis
        self.cache_ttl_s = cache_ttl_s
        self.negative_ttl_s = negative_ttl_s
        self.clock = clock
        self.on_error = on_error
        self._cache: dict[str, tuple[KeyInfo | None, float]] = {}

    async def authenticate(self, authorization: str | None, x_api_key: str | None) -> KeyInfo:
        """The key's info; raises ApiError 401 when missing or unknown."""
        key = presented_key(authorization, x_api_key)
        if key is None:
            raise errors.unauthorized("Missing API key: send 'Authorization: Bearer <key>'")
        digest = hash_key(key)
        info = self.static.get(digest)
        if info is None and self.redis is not None:
            info = await self._from_redis(digest)
        if info is None:
            raise errors.unauthorized("Invalid API key")
        return info

    async def _from_redis(self, digest: str) -> KeyInfo | None:
        now = self.clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            raw = await self.redis.hget(REDIS_HASH, digest)
        except Exception as exc:  # Redis down: keep serving keys seen recently, refuse new ones
            log.error("event=key_store_error error=%r", exc)
            if self.on_error is not None:
                self.on_error("key_store")
            return cached[0] if cached is not None else None
        info = None
        if raw is not None:
            try:
                fields = orjson.loads(raw)
                info = _KeySpec.model_validate({**fields, "sha256": digest}).info()
            except (orjson.JSONDecodeError, pydantic.ValidationError, TypeError) as exc:
                log.error("event=bad_key_record key_hash=%s error=%s", digest[:12], exc)
        if len(self._cache) > 100_000:
            self._cache.clear()
        self._cache[digest] = (info, now + (self.cache_ttl_s if info is not None else self.negative_ttl_s))
        return info


async def put_key(redis, key: str, name: str, rate_limit_rps: float | None = None, burst: int | None = None,
                  models: list[str] | None = None, max_concurrent_streams: int | None = None) -> str:
    """Store an API key (hashed) in Redis; returns its hash. For operators and tests."""
    digest = hash_key(key)
    record = {"name": name, "rate_limit_rps": rate_limit_rps, "burst": burst, "models": models,
              "max_concurrent_streams": max_concurrent_streams}
    await redis.hset(REDIS_HASH, digest, orjson.dumps({k: v for k, v in record.items() if v is not None}))
    return digest
