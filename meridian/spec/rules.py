"""Helpers for cross-field rules: a model validator collects every broken rule, each with the
sub-path of the field it concerns, and raises them together; the loader splits them back into
separate errors located at their own lines."""

from __future__ import annotations

from typing import Annotated, Any

import pydantic

from meridian.spec import base

RULE_PREFIX = "@"


class Problems:
    """Collects (sub-path, message) pairs inside one model validator."""

    def __init__(self) -> None:
        self._items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self._items.append((path, message))

    def raise_if_any(self) -> None:
        if self._items:
            raise ValueError("\n".join(f"{RULE_PREFIX}{path}: {msg}" for path, msg in self._items))


def split(message: str) -> list[tuple[list[str | int], str]]:
    """Undo Problems.raise_if_any: [(sub-path parts, message)]; a plain message has no sub-path."""
    out = []
    for line in message.split("\n"):
        if line.startswith(RULE_PREFIX) and ": " in line:
            path, msg = line[len(RULE_PREFIX):].split(": ", 1)
            out.append(([int(p) if p.isdigit() else p for p in path.split(".") if p], msg))
        else:
            out.append(([], line))
    return out


def _cloud_region(value: str, info: pydantic.ValidationInfo) -> str:
    base.check_region(base.context_of(info), value, kind="cloud")
    return value


def _client_region(value: str, info: pydantic.ValidationInfo) -> str:
    base.check_region(base.context_of(info), value, kind="client")
    return value


def _gpu_type(value: str, info: pydantic.ValidationInfo) -> str:
    base.check_gpu_type(base.context_of(info), value)
    return value


CloudRegion = Annotated[str, pydantic.AfterValidator(_cloud_region),
                        pydantic.Field(description="A cloud region of the latency map, e.g. us-east-1.")]
ClientRegion = Annotated[str, pydantic.AfterValidator(_client_region),
                         pydantic.Field(description="A client region (or cloud region) of the latency map.")]
GpuTypeName = Annotated[str, pydantic.AfterValidator(_gpu_type),
                        pydantic.Field(description="A GPU type of the catalog, e.g. H100, A100-80GB, L4.")]


def unique(items: list[Any], path: str, problems: Problems, what: str) -> None:
    seen = set()
    for i, item in enumerate(items):
        if item in seen:
            problems.add(f"{path}.{i}", f"duplicate {what} {item!r}")
        seen.add(item)
