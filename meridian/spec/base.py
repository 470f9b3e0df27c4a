"""Common pieces of every spec kind: strict frozen models, metadata, and the validation context
through which cross-document facts (GPU catalog, latency map) reach the validators."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal

import pydantic

from meridian import catalog, latency

API_VERSION = "meridian/v1"
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
CLOUDS = ("aws", "gcp", "azure", "local")
CloudName = Literal["aws", "gcp", "azure", "local"]


class StrictModel(pydantic.BaseModel):
    """Frozen, unknown fields are errors, strings are not coerced from numbers."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=True)


class Metadata(StrictModel):
    name: str = pydantic.Field(pattern=NAME_PATTERN, description="DNS-style name, unique per kind.")
    team: str | None = pydantic.Field(default=None, pattern=NAME_PATTERN,
                                      description="Owning team; quotas and budgets are per team. Beside a capacity "
                                                  "policy that lists teams, one of them.")
    labels: dict[str, str] = pydantic.Field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Context:
    """Facts the validators check names against. Built-in defaults; a LatencyMap document in the
    same set of files adds regions and RTT overrides."""

    latency_map: latency.LatencyMap
    catalog: catalog.Catalog
    gpu_types: tuple[str, ...]


def default_context() -> Context:
    return Context(latency.default(), catalog.instances.default(), tuple(catalog.gpus.names()))


def context_of(info: pydantic.ValidationInfo) -> Context:
    ctx = info.context.get("meridian") if isinstance(info.context, dict) else None
    return ctx if isinstance(ctx, Context) else default_context()


def closest(word: str, choices: list[str] | tuple[str, ...]) -> str | None:
    """The closest valid word for a "did you mean" hint, or None when nothing is close."""
    import difflib  # stdlib, cheap; kept local as it is only used on the error path

    lowered = {c.lower(): c for c in choices}
    if word.lower() in lowered:
        return lowered[word.lower()]
    hits = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[hits[0]] if hits else None


def unknown_name(what: str, word: str, choices: list[str] | tuple[str, ...]) -> str:
    hint = closest(word, choices)
    if hint is not None:
        return f"unknown {what} {word!r}; did you mean {hint!r}?"
    shown = ", ".join(list(choices)[:12]) + (", ..." if len(choices) > 12 else "")
    return f"unknown {what} {word!r}; valid: {shown}"


def check_region(ctx: Context, region: str, *, kind: str | None = None) -> None:
    m = ctx.latency_map
    if region not in m:
        pool = m.client_regions() + m.cloud_regions() if kind is None else (
            m.client_regions() + m.cloud_regions() if kind == "client" else m.cloud_regions())
        raise ValueError(unknown_name("region", region, pool))
    if kind == "cloud" and m.region(region).kind != "cloud":
        raise ValueError(f"{region!r} is a client region; a cloud region is needed here")


def check_gpu_type(ctx: Context, gpu_type: str) -> None:
    if gpu_type not in ctx.gpu_types:
        raise ValueError(unknown_name("GPU type", gpu_type, list(ctx.gpu_types)))


SERVED_NAME = re.compile(r"^[^:\s]+$")


def field_path(*parts: Any) -> str:
    return ".".join(str(p) for p in parts)
