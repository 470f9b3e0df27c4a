"""The one Redis connection factory: a ``redis.asyncio.Redis`` for a plain Redis URL or for a
Redis Sentinel deployment, so the scheduler's state store and the routers' shared limits reach
Redis the same way.

URLs:

    redis://HOST:PORT/DB                      one Redis (``rediss://`` for TLS, ``unix://PATH``)
    redis+sentinel://H1:26379,H2:26379,H3:26379/SERVICE[/DB]
    rediss+sentinel://...                     the same, TLS to the data nodes

With Sentinel the client asks the sentinels (any of those listed that answers) which node is the
primary of ``SERVICE`` (the name in the sentinels' ``sentinel monitor SERVICE ...``), connects
there, and asks again when that node fails or turns out to be a replica after a failover (redis-py's
``SentinelConnectionPool``). A failover therefore looks like a short outage to the caller: a few
commands fail with ``redis.exceptions.ConnectionError`` and the next ones reach the new primary.

Passwords never go in a URL given on a command line: ``MERIDIAN_REDIS_PASSWORD`` (the data nodes;
also the sentinels unless ``MERIDIAN_REDIS_SENTINEL_PASSWORD`` is set) is read from the environment
when the URL carries none, or from the file ``MERIDIAN_REDIS_PASSWORD_FILE`` names (likewise
``MERIDIAN_REDIS_SENTINEL_PASSWORD_FILE``; the file wins, and holds the password alone: surrounding
whitespace is stripped), so a mounted Secret need not pass through the environment. A file that
cannot be read, is empty or has more than one line is an error naming the variable and the path,
never the value."""

from __future__ import annotations

import dataclasses
import os
import urllib.parse
from collections.abc import Mapping

import redis.asyncio as aioredis
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.backoff

__all__ = ["PASSWORD_ENV", "SCHEMES", "SENTINEL_PASSWORD_ENV", "SENTINEL_SCHEMES", "SecretFileError", "Target",
           "connect", "parse"]

PASSWORD_ENV = "MERIDIAN_REDIS_PASSWORD"
SENTINEL_PASSWORD_ENV = "MERIDIAN_REDIS_SENTINEL_PASSWORD"
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SCHEMES = ("redis", "rediss", "unix", *SENTINEL_SCHEMES)
DEFAULT_SENTINEL_PORT = 26379
FILE_SUFFIX = "_FILE"  # VAR_FILE names a file holding VAR's value


class SecretFileError(ValueError):
    """A password file is missing, unreadable, empty or more than one line (names the variable and
    the path, never the value)."""


def _secret(env: Mapping[str, str], name: str) -> str | None:
    """``name``'s value: from the file ``name_FILE`` names when set, else from ``name`` (None: neither)."""
    path = env.get(name + FILE_SUFFIX, "").strip()
    if not path:
        return env.get(name) or None
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            value = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise SecretFileError(f"{name}{FILE_SUFFIX}={path}: cannot read: {reason}") from None
    if not value:
        raise SecretFileError(f"{name}{FILE_SUFFIX}={path}: the file is empty; put the password in it")
    if "\n" in value:
        raise SecretFileError(f"{name}{FILE_SUFFIX}={path}: more than one line; the file must hold the password alone")
    return value


@dataclasses.dataclass(frozen=True)
class Target:
    """What a Redis URL names. For Sentinel: the sentinels, the monitored service and the db."""

    url: str
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    tls: bool = False

    @property
    def is_sentinel(self) -> bool:
        return bool(self.sentinels)

    def describe(self) -> str:
        """The URL without credentials, for logs and status."""
        if self.is_sentinel:
            hosts = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            return f"{'rediss' if self.tls else 'redis'}+sentinel://{hosts}/{self.service}/{self.db}"
        parts = urllib.parse.urlsplit(self.url)
        netloc = parts.netloc.rsplit("@", 1)[-1]
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def parse(url: str) -> Target:
    """Check ``url`` and say what it names; ValueError with what a valid URL looks like."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in SCHEMES:
        raise ValueError(f"Redis URL {_safe(url)!r}: unknown scheme {scheme!r}; use redis://HOST:PORT/DB or "
                         "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB]")
    if scheme not in SENTINEL_SCHEMES:
        return Target(url)
    rest = url.split("://", 1)[1]
    hosts_part, _, path = rest.partition("/")
    hosts_part = hosts_part.rsplit("@", 1)[-1]
    sentinels = []
    for item in filter(None, hosts_part.split(",")):
        host, _, port = item.rpartition(":") if ":" in item else (item, "", str(DEFAULT_SENTINEL_PORT))
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"Redis URL {_safe(url)!r}: sentinel {item!r} is not HOST:PORT")
        sentinels.append((host.strip("[]"), int(port)))
    segments = [s for s in path.split("?", 1)[0].split("/") if s]
    if not sentinels or not segments or len(segments) > 2 or (len(segments) == 2 and not segments[1].isdigit()):
        raise ValueError(f"Redis URL {_safe(url)!r}: expected redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB] "
                         "(SERVICE is the name the sentinels monitor)")
    return Target(url, tuple(sentinels), segments[0], int(segments[1]) if len(segments) == 2 else 0,
                  tls=scheme.startswith("rediss"))


def _safe(url: str) -> str:
    """``url`` with any password replaced, for error messages."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[-1]}"


def connect(url: str, *, decode_responses: bool = False, timeout_s: float = 2.0, retries: int = 1,
            health_check_interval_s: int = 10, env: Mapping[str, str] | None = None) -> aioredis.Redis:
    """A client for ``url`` (see the module docstring). ``retries``: how often one command is retried
    on a connection error (short, jittered backoff); callers that retry on their own (the state
    store's elector) keep it low so a dead node shows quickly."""
    env = os.environ if env is None else env
    target = parse(url)
    retry = redis.asyncio.retry.Retry(redis.backoff.ExponentialWithJitterBackoff(cap=0.5, base=0.05), retries)
    common = dict(socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=retry,
                  decode_responses=decode_responses, health_check_interval=health_check_interval_s)
    password = urllib.parse.urlsplit(url).password or _secret(env, PASSWORD_ENV)
    if not target.is_sentinel:
        extra = {"password": password} if password and not urllib.parse.urlsplit(url).password else {}
        return aioredis.Redis.from_url(url, **common, **extra)
    sentinel_password = _secret(env, SENTINEL_PASSWORD_ENV) or password
    sentinel = redis.asyncio.sentinel.Sentinel(
        list(target.sentinels), sentinel_kwargs={"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
                                                 "password": sentinel_password},
        password=password, ssl=target.tls, **common)
    return sentinel.master_for(target.service, db=target.db)
