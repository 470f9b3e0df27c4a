"""The client's knobs, validated in one place: frozen pydantic models with constrained types.

``Timeouts`` are three separate limits, each named in the error it raises:

- ``connect_s``: opening one TCP connection (per attempt);
- ``first_token_s``: a stream's first event (per attempt, counted from the attempt's start); a
  non-streaming answer arrives in one piece after its last token, so it has no first token to wait
  for and only ``total_s`` bounds it;
- ``total_s``: the whole call, every attempt and backoff wait included, and for a stream the
  reading of its last event.

``RetryPolicy`` says how often and how late a failed attempt is tried again (see ``retry.py`` for
which failures qualify). ``ClientSettings`` gathers the rest of a client's configuration."""

from __future__ import annotations

import urllib.parse
from typing import Annotated

import pydantic

PositiveSeconds = Annotated[float, pydantic.Field(gt=0, allow_inf_nan=False)]


class _Frozen(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


class Timeouts(_Frozen):
    """Per-attempt connect and first-token limits and the whole call's limit, in seconds; ``None``
    turns a limit off."""

    connect_s: PositiveSeconds | None = 5.0
    # Above the router's cold_start_wait_s (90 s): a stream for a model scaled to zero is not cut
    # (and restarted) while the router waits for its first replica.
    first_token_s: PositiveSeconds | None = 120.0
    # The router's request_timeout_s: the longest any request may run there.
    total_s: PositiveSeconds | None = 600.0


class RetryPolicy(_Frozen):
    """At most ``max_attempts`` tries per call (1: no retries), waiting a jittered exponential
    backoff between them (attempt n waits uniform(0.1, 1) x min(``backoff_max_s``,
    ``backoff_initial_s`` x ``backoff_multiplier``^(n-1))), or longer when the server's
    ``Retry-After`` asks for it, up to ``max_retry_after_s`` (a longer ask ends the call with the
    error, so the caller can schedule it). Retries also draw on a budget shared by all calls of one
    client: each call deposits ``budget_ratio`` retries, deposits expire after ``budget_window_s``,
    and a reserve of ``budget_min_per_s`` retries per second stays available (``budget_ratio``
    None: no budget, only ``max_attempts``)."""

    max_attempts: Annotated[int, pydantic.Field(ge=1, le=20)] = 3
    backoff_initial_s: PositiveSeconds = 0.25
    backoff_max_s: PositiveSeconds = 8.0
    backoff_multiplier: Annotated[float, pydantic.Field(ge=1, le=10)] = 2.0
    max_retry_after_s: Annotated[float, pydantic.Field(ge=0, allow_inf_nan=False)] = 60.0
    budget_ratio: Annotated[float, pydantic.Field(ge=0, le=1)] | None = 0.2
    budget_min_per_s: Annotated[float, pydantic.Field(ge=0, allow_inf_nan=False)] = 3.0
    budget_window_s: Annotated[int, pydantic.Field(ge=1, le=3600)] = 10

    @pydantic.model_validator(mode="after")
    def _backoff_order(self) -> RetryPolicy:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(f"backoff_max_s ({self.backoff_max_s}) must be >= backoff_initial_s "
                             f"({self.backoff_initial_s})")
        return self


def _origin(base_url: str) -> str:
    """``base_url`` without a trailing ``/`` or ``/v1`` (the client adds ``/v1/...`` itself), so
    both the router's address and the OpenAI SDK's ``base_url`` are accepted."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url must be an http:// or https:// URL with a host, like "
                         f"http://router:8080 or http://router:8080/v1; got {base_url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"base_url must not have a query or fragment; got {base_url!r}")
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class ClientSettings(_Frozen):
    """Everything a client is built from except its API key and injected parts (clock, randomness,
    event hook). ``hedge_after_s``: send a second try of a non-streaming call on another
    connection when the first has not answered after this long (``None``: no hedging)."""

    base_url: str
    timeouts: Timeouts = Timeouts()
    retry: RetryPolicy = RetryPolicy()
    hedge_after_s: PositiveSeconds | None = None
    region: Annotated[str, pydantic.Field(max_length=64, pattern=r"^[A-Za-z0-9._-]*$")] = ""
    region_header: Annotated[str, pydantic.Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9-]+$")] = \
        "X-Meridian-Client-Region"
    send_deadline: bool = True
    max_connections: Annotated[int, pydantic.Field(ge=1, le=10000)] = 100
    keepalive_s: PositiveSeconds = 15.0
    headers: dict[str, str] = {}

    @pydantic.field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return _origin(value)

    @pydantic.field_validator("headers")
    @classmethod
    def _no_auth_header(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if name.lower() in ("authorization", "x-api-key"):
                raise ValueError(f"pass the API key as api_key=, not as the {name!r} header (it is kept out of logs)")
        return value
