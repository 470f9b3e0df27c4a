"""The policy interface and its registry (SkyPilot's pattern: subclasses register by name, and the
config's allowed values come from the registry).

A policy is pure decision code: given the candidate replicas (already filtered for health, state
and exclusions by the caller) and a request, it returns one of them. It reads the endpoints' state
(in-flight counts, latency estimates, reported load) and its own state (a round-robin position, a
prefix tree) and does no I/O. Randomness and the RTT lookup are injected."""

from __future__ import annotations

import abc
import random
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

import pydantic

from router import endpoints

RttFn = Callable[[str, str], float]


class RouteRequest(Protocol):
    """What a policy may read about a request."""

    client_region: str
    prompt_tokens_estimate: int

    def prompt_text(self) -> str: ...


class NoArgs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


class Policy(abc.ABC):
    """Chooses a replica for a request. One instance per served model."""

    name: ClassVar[str] = ""
    Args: ClassVar[type[pydantic.BaseModel]] = NoArgs

    def __init__(self, args: pydantic.BaseModel, rng: random.Random, rtt_ms: RttFn):
        self.args = args
        self.rng = rng
        self.rtt_ms = rtt_ms

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name:
            if cls.name in REGISTRY:
                raise ValueError(f"routing policy {cls.name!r} registered twice")
            REGISTRY[cls.name] = cls

    @abc.abstractmethod
    def select(self, candidates: Sequence[endpoints.Endpoint], request: RouteRequest,
               now: float) -> endpoints.Endpoint:
        """Pick one of ``candidates`` (never empty) for ``request``; ``now`` is monotonic seconds."""

    def on_routed(self, chosen: endpoints.Endpoint, request: RouteRequest) -> None:
        """Hook after a request was sent to ``chosen`` (learning policies update their state here)."""
        return None

    def forget(self, replica_ids: set[str]) -> None:
        """Drop state about replicas that left the routing table."""
        return None


REGISTRY: dict[str, type[Policy]] = {}


class UnknownPolicy(ValueError):
    """A policy name not in the registry."""


def names() -> list[str]:
    return sorted(REGISTRY)


def check(name: str, args: dict | None = None) -> pydantic.BaseModel:
    """Validate ``name`` and its typed args; raise UnknownPolicy or pydantic.ValidationError."""
    cls = REGISTRY.get(name)
    if cls is None:
        import difflib  # only on the error path

        close = difflib.get_close_matches(name, names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownPolicy(f"unknown routing policy {name!r}{hint} (valid: {', '.join(names())})")
    return cls.Args.model_validate(args or {})


def create(name: str, args: dict | None, rng: random.Random, rtt_ms: RttFn) -> Policy:
    """A new policy instance by registry name with validated args."""
    return REGISTRY[name](check(name, args), rng, rtt_ms)


def weighted_choice(candidates: Sequence[endpoints.Endpoint], rng: random.Random) -> endpoints.Endpoint:
    """A random candidate with probability proportional to its traffic share."""
    total = 0.0
    for e in candidates:
        total += e.share
    point = rng.random() * total
    for e in candidates:
        point -= e.share
        if point < 0:
            return e
    return candidates[-1]
