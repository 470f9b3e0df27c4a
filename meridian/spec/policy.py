"""CapacityPolicy: what an infrastructure team declares (clouds and regions, quotas, budgets,
reserved commitments, price overrides, priority classes, spot defaults)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import pydantic

from meridian.spec import base, rules


class CloudRules(base.StrictModel):
    name: base.CloudName
    enabled: bool = True
    regions_allowed: list[rules.CloudRegion] = pydantic.Field(default_factory=list,
                                                              description="Empty: every region.")
    regions_blocked: list[rules.CloudRegion] = pydantic.Field(default_factory=list)
    max_gpus: int | None = pydantic.Field(default=None, ge=0, description="GPU quota for the whole cloud.")
    max_gpus_by_type: dict[str, int] = pydantic.Field(default_factory=dict)


class TeamQuota(base.StrictModel):
    name: str = pydantic.Field(pattern=base.NAME_PATTERN)
    max_gpus: int | None = pydantic.Field(default=None, ge=0)
    max_gpus_by_type: dict[str, int] = pydantic.Field(default_factory=dict)
    budget_per_hour_usd: float | None = pydantic.Field(default=None, ge=0)


class ReservedCommitment(base.StrictModel):
    """Capacity already paid for: the solver uses it before anything else. Where the spec set has
    clusters in its cloud and region, one of their pools must be a reserved-tier pool of its
    instance type (else the commitment is paid and serves nothing)."""

    cloud: base.CloudName
    region: rules.CloudRegion
    instance_type: str = pydantic.Field(min_length=1)
    nodes: int = pydantic.Field(ge=1, description="Nodes committed: a reserved-tier pool of this instance type "
                                                  "in this region offers the solver at most these.")
    price_per_hour_usd: float = pydantic.Field(ge=0, description="Effective hourly price per node.")


class PriceOverride(base.StrictModel):
    cloud: base.CloudName
    instance_type: str = pydantic.Field(min_length=1)
    region: rules.CloudRegion | None = None
    price_per_hour_usd: float | None = pydantic.Field(default=None, ge=0)
    spot_price_per_hour_usd: float | None = pydantic.Field(default=None, ge=0)


class PriorityClass(base.StrictModel):
    name: str = pydantic.Field(pattern=base.NAME_PATTERN)
    value: int = pydantic.Field(ge=0, le=1_000_000, description="Higher wins when capacity is short.")
    preempts: list[str] = pydantic.Field(
        default_factory=list, description="Classes this one may take capacity from when short.")


class SpotDefaults(base.StrictModel):
    allowed: bool = True
    max_share: float = pydantic.Field(
        default=0.5, ge=0, le=1,
        description="Most of any deployment's capacity that may run on spot (a deployment's own cap may be lower).")
    fallback: Literal["on_demand", "none"] = pydantic.Field(
        default="on_demand", description="What replaces spot capacity that is lost or unavailable: on-demand "
                                         "replicas, as SkyServe's SpotHedge does. 'none' (leave it unreplaced) is "
                                         "not implemented: it is accepted, so specs applied with it keep loading, "
                                         "but capacity is replaced on demand all the same and the scheduler logs "
                                         "a warning (event=spot_fallback_unsupported) each time it loads such a "
                                         "policy.")


class CapacityPolicySpec(base.StrictModel):
    clouds: list[CloudRules] = pydantic.Field(min_length=1)
    teams: list[TeamQuota] = pydantic.Field(default_factory=list)
    budget_per_hour_usd: float | None = pydantic.Field(default=None, ge=0)
    reserved: list[ReservedCommitment] = pydantic.Field(default_factory=list)
    price_overrides: list[PriceOverride] = pydantic.Field(default_factory=list)
    priority_classes: list[PriorityClass] = pydantic.Field(
        default_factory=lambda: [PriorityClass(name="standard", value=100)])
    spot: SpotDefaults = SpotDefaults()

    @pydantic.model_validator(mode="after")
    def _cross_field(self, info: pydantic.ValidationInfo) -> CapacityPolicySpec:
        ctx = base.context_of(info)
        problems = rules.Problems()
        rules.unique([c.name for c in self.clouds], "clouds", problems, "cloud")
        rules.unique([t.name for t in self.teams], "teams", problems, "team")
        classes = [p.name for p in self.priority_classes]
        rules.unique(classes, "priority_classes", problems, "priority class")
        for i, cloud in enumerate(self.clouds):
            for field in ("regions_allowed", "regions_blocked"):
                for j, region in enumerate(getattr(cloud, field)):
                    r = ctx.latency_map.regions.get(region)
                    if r is not None and r.cloud != cloud.name:
                        problems.add(f"clouds.{i}.{field}.{j}", f"{region!r} is in {r.cloud}, not {cloud.name}")
            both = set(cloud.regions_allowed) & set(cloud.regions_blocked)
            if both:
                problems.add(f"clouds.{i}.regions_blocked", f"regions both allowed and blocked: {sorted(both)}")
            self._check_gpu_keys(ctx, cloud.max_gpus_by_type, f"clouds.{i}.max_gpus_by_type", problems)
        for i, team in enumerate(self.teams):
            self._check_gpu_keys(ctx, team.max_gpus_by_type, f"teams.{i}.max_gpus_by_type", problems)
        for i, cls in enumerate(self.priority_classes):
            for j, other in enumerate(cls.preempts):
                if other not in classes:
                    problems.add(f"priority_classes.{i}.preempts.{j}", base.unknown_name("priority class", other, classes))
                elif other == cls.name:
                    problems.add(f"priority_classes.{i}.preempts.{j}", "a class cannot preempt itself")
                else:
                    target = next(p for p in self.priority_classes if p.name == other)
                    if target.value >= cls.value:
                        problems.add(f"priority_classes.{i}.preempts.{j}",
                                     f"{cls.name} (value {cls.value}) may only preempt lower classes; "
                                     f"{other} has value {target.value}")
        priced: tuple[tuple[str, Sequence[ReservedCommitment | PriceOverride]], ...] = (
            ("reserved", self.reserved), ("price_overrides", self.price_overrides))
        for field, items in priced:
            for i, item in enumerate(items):
                types = ctx.catalog.instance_types(item.cloud)
                if item.instance_type not in types:
                    problems.add(f"{field}.{i}.instance_type",
                                 base.unknown_name(f"{item.cloud} instance type", item.instance_type, types))
        problems.raise_if_any()
        return self

    @staticmethod
    def _check_gpu_keys(ctx: base.Context, mapping: dict[str, int], path: str, problems: rules.Problems) -> None:
        for gpu_type, count in mapping.items():
            if gpu_type not in ctx.gpu_types:
                problems.add(f"{path}.{gpu_type}", base.unknown_name("GPU type", gpu_type, list(ctx.gpu_types)))
            if count < 0:
                problems.add(f"{path}.{gpu_type}", f"quota must be >= 0, got {count}")

    def priority_of(self, name: str) -> int | None:
        for cls in self.priority_classes:
            if cls.name == name:
                return cls.value
        return None


class CapacityPolicy(base.StrictModel):
    """Fleet-wide capacity rules. Kind ``CapacityPolicy``."""

    apiVersion: Literal["meridian/v1"]
    kind: Literal["CapacityPolicy"]
    metadata: base.Metadata
    spec: CapacityPolicySpec


def in_use(policies: Iterable[CapacityPolicy]) -> CapacityPolicy | None:
    """The one capacity policy a set of specs runs under: the one named ``default``, else the first
    by name (the scheduler warns of the others, which it ignores); None without any."""
    ordered = sorted(policies, key=lambda p: (p.metadata.name != "default", p.metadata.name))
    return ordered[0] if ordered else None
