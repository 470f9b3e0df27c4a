"""Providers: the clouds behind the agent, one small interface (``base.Provider``), a registry
by name. Built-in names: ``sim`` (simulated cloud), ``aws`` (boto3), ``gcp`` (GKE),
``azure`` (plain scale sets), ``aks`` (the agent pools of an AKS cluster). A built-in provider's
module (and its cloud SDK) is imported only when a provider of that name is created, so a sim agent
never loads boto3 or the Azure SDK."""

from __future__ import annotations

import importlib
import random
import time
from collections.abc import Callable
from typing import Any

from meridian import spec
from meridian.spec import base as spec_base

from agents.providers import errors
from agents.providers.base import Interruption, PoolStatus, Provider
from agents.providers.errors import CloudError, CloudErrorKind

# factory(cluster, *, clock, rng, **options) -> Provider
Factory = Callable[..., Provider]

_FACTORIES: dict[str, Factory] = {}
_BUILTIN: dict[str, str] = {
    "sim": "agents.providers.sim",
    "aws": "agents.providers.aws",
    "gcp": "agents.providers.gcp",
    "azure": "agents.providers.azure",
    "aks": "agents.providers.aks",
}


def register(name: str) -> Callable[[Factory], Factory]:
    """Decorator: make ``factory`` the provider called ``name``."""

    def deco(factory: Factory) -> Factory:
        if name in _FACTORIES and _FACTORIES[name] is not factory:
            raise ValueError(f"provider {name!r} is already registered")
        _FACTORIES[name] = factory
        return factory

    return deco


def names() -> list[str]:
    return sorted(set(_FACTORIES) | set(_BUILTIN))


def create(name: str, cluster: spec.Cluster, *, clock: Callable[[], float] = time.time,
           rng: random.Random | None = None, **options: Any) -> Provider:
    """A provider ``name`` for ``cluster``. ``clock`` (Unix seconds) and ``rng`` are injected so the
    simulator and tests drive time and chance; ``options`` carry injected clients/endpoints that
    the named provider documents."""
    if name not in _FACTORIES and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(spec_base.unknown_name("provider", name, names()))
    return factory(cluster, clock=clock, rng=rng or random.Random(), **options)


__all__ = ["CloudError", "CloudErrorKind", "Factory", "Interruption", "PoolStatus", "Provider", "create",
           "errors", "names", "register"]
