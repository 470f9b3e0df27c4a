"""Replica backends: where the agent's replicas run, one small interface (``base.ReplicaBackend``),
a registry by name as the providers have. Built-in names: ``local`` (runtime-adapter processes on
the agent's host) and ``kubernetes`` (a pod per replica, through kubernetes_asyncio). A built-in
backend's module is imported only when a backend of that name is created, so a local agent never
loads the Kubernetes client."""

from __future__ import annotations

import importlib
import pathlib
import time
from collections.abc import Callable
from typing import Any

from meridian import spec
from meridian.spec import base as spec_base

from agents.backends.base import (LIVE_STATES, Change, NodeView, Placement, Refused, ReplicaBackend, ReplicaSettings,
                                  Tracked)

# factory(cluster, *, settings, state_dir, clock, **options) -> ReplicaBackend
Factory = Callable[..., ReplicaBackend]

_FACTORIES: dict[str, Factory] = {}
_BUILTIN: dict[str, str] = {
    "local": "agents.backends.local",
    "kubernetes": "agents.backends.kubernetes",
}


def register(name: str) -> Callable[[Factory], Factory]:
    """Decorator: make ``factory`` the replica backend called ``name``."""

    def deco(factory: Factory) -> Factory:
        if name in _FACTORIES and _FACTORIES[name] is not factory:
            raise ValueError(f"replica backend {name!r} is already registered")
        _FACTORIES[name] = factory
        return factory

    return deco


def names() -> list[str]:
    return sorted(set(_FACTORIES) | set(_BUILTIN))


def create(name: str, cluster: spec.Cluster, *, settings: ReplicaSettings, state_dir: pathlib.Path,
           clock: Callable[[], float] = time.time, **options: Any) -> ReplicaBackend:
    """The replica backend ``name`` for ``cluster``. ``settings`` are the launch settings,
    ``state_dir`` the agent's own directory, ``clock`` Unix seconds; ``options`` carry what the
    named backend documents (adapter metrics, injected API clients)."""
    if name not in _FACTORIES and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(spec_base.unknown_name("replica backend", name, names()))
    return factory(cluster, settings=settings, state_dir=state_dir, clock=clock, **options)


__all__ = ["Change", "Factory", "LIVE_STATES", "NodeView", "Placement", "Refused", "ReplicaBackend", "ReplicaSettings",
           "Tracked", "create", "names", "register"]
