"""Autoscaling policies by name.

A policy is a pure function of (context, state) -> (decision, state): no clock of its own, no I/O.
Policies register a factory under a name; the factory takes the policy's keyword settings and
validates them at construction, so a bad setting fails when the scheduler starts, not mid-loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from scheduler.autoscaler import types

DEFAULT_POLICY = "concurrency"


class Policy(Protocol):
    """One deployment's scaling rule."""

    name: str

    def decide(self, ctx: types.AutoscaleContext,
               state: types.AutoscaleState) -> tuple[types.Decision, types.AutoscaleState]:
        """The desired capacity now, and the state to pass next time."""
        ...


PolicyFactory = Callable[..., Policy]
_POLICIES: dict[str, PolicyFactory] = {}


class UnknownPolicy(KeyError):
    """A policy name no factory is registered under."""


def register(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    """Class decorator: make a policy available under ``name``."""

    def wrap(factory: PolicyFactory) -> PolicyFactory:
        if name in _POLICIES and _POLICIES[name] is not factory:
            raise ValueError(f"autoscaling policy {name!r} is already registered")
        _POLICIES[name] = factory
        return factory

    return wrap


def names() -> list[str]:
    """Registered policy names, sorted."""
    return sorted(_POLICIES)


def get(name: str = DEFAULT_POLICY, **settings: Any) -> Policy:
    """A policy instance by name, built with ``settings`` (validated by the policy)."""
    try:
        factory = _POLICIES[name]
    except KeyError:
        raise UnknownPolicy(f"unknown autoscaling policy {name!r}; registered: {', '.join(names())}") from None
    return factory(**settings)
