"""LatencyMap: users add regions and override measured RTTs on top of the built-in table."""

from __future__ import annotations

from typing import Literal

import pydantic

from meridian import latency
from meridian.spec import base, rules


class RegionDecl(base.StrictModel):
    name: str = pydantic.Field(pattern=base.NAME_PATTERN)
    kind: Literal["client", "cloud"] = "client"
    cloud: base.CloudName | None = None
    latitude: float = pydantic.Field(ge=-90, le=90)
    longitude: float = pydantic.Field(ge=-180, le=180)

    @pydantic.model_validator(mode="after")
    def _cloud_for_cloud_regions(self) -> RegionDecl:
        if self.kind == "cloud" and self.cloud is None:
            raise ValueError("a cloud region needs `cloud`")
        return self


class RttOverride(base.StrictModel):
    source: str = pydantic.Field(min_length=1, alias="from")
    target: str = pydantic.Field(min_length=1, alias="to")
    rtt_ms: float = pydantic.Field(gt=0, le=2000)

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class LatencyMapSpec(base.StrictModel):
    regions: list[RegionDecl] = pydantic.Field(default_factory=list)
    overrides: list[RttOverride] = pydantic.Field(default_factory=list)

    @pydantic.model_validator(mode="after")
    def _known(self, info: pydantic.ValidationInfo) -> LatencyMapSpec:
        ctx = base.context_of(info)
        names = set(ctx.latency_map.regions) | {r.name for r in self.regions}
        problems = rules.Problems()
        rules.unique([r.name for r in self.regions], "regions", problems, "region")
        for i, o in enumerate(self.overrides):
            for field, value in (("from", o.source), ("to", o.target)):
                if value not in names:
                    problems.add(f"overrides.{i}.{field}", base.unknown_name("region", value, sorted(names)))
        problems.raise_if_any()
        return self

    def apply(self, base_map: latency.LatencyMap) -> latency.LatencyMap:
        regions = [latency.Region(r.name, r.kind, r.cloud or "", r.latitude, r.longitude) for r in self.regions]
        return base_map.with_overrides(regions, {(o.source, o.target): o.rtt_ms for o in self.overrides})


class LatencyMap(base.StrictModel):
    """RTT overrides and extra regions. Kind ``LatencyMap``."""

    apiVersion: Literal["meridian/v1"]
    kind: Literal["LatencyMap"]
    metadata: base.Metadata
    spec: LatencyMapSpec
