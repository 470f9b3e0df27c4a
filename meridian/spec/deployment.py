"""ModelDeployment: what a model owner declares (model, runtime, resources, SLA, scaling,
placement, priority, rollout)."""

from __future__ import annotations

from typing import Literal

import pydantic

from meridian import capacity
from meridian.spec import base, rules

Quantization = Literal["none", "fp8", "w8a8_fp8", "int8", "w8a8_int8", "awq", "gptq", "int4", "gguf"]


class ModelArchitecture(base.StrictModel):
    """Figures the capacity model needs when the model is not in Meridian's known table."""

    parameters_b: float = pydantic.Field(gt=0, le=2000, description="Parameters, in billions.")
    layers: int = pydantic.Field(gt=0, le=512)
    kv_heads: int = pydantic.Field(gt=0, le=256)
    head_dim: int = pydantic.Field(gt=0, le=1024)


class ModelSource(base.StrictModel):
    source: str = pydantic.Field(min_length=1, description="Hub id (org/name) or a local path.")
    revision: str = pydantic.Field(default="main", min_length=1, description="Hub revision or commit.")
    served_name: str = pydantic.Field(
        min_length=1, max_length=128, pattern=r"^[^:\s]+$",
        description="The name clients put in the request's `model` field (no ':' or spaces).")
    architecture: ModelArchitecture | None = None


class Runtime(base.StrictModel):
    engine: Literal["sglang"] = "sglang"
    tp_size: int | None = pydantic.Field(default=None, ge=1, le=64,
                                         description="Tensor-parallel degree; default: the replica's GPU count.")
    context_length: int | None = pydantic.Field(default=None, ge=128, le=10_000_000,
                                                description="Max tokens per request; default: the model's.")
    mem_fraction_static: float = pydantic.Field(default=0.88, gt=0.1, le=0.98,
                                                description="GPU memory share for weights + KV cache.")
    quantization: Quantization = "none"
    max_running_requests: int | None = pydantic.Field(default=None, ge=1, le=65536)
    max_queued_requests: int | None = pydantic.Field(default=None, ge=1, le=1_000_000)
    is_embedding: bool = False
    extra_args: list[str] = pydantic.Field(default_factory=list,
                                           description="Extra SGLang flags, passed through verbatim.")

    @pydantic.field_validator("extra_args")
    @classmethod
    def _owned_flags(cls, value: list[str]) -> list[str]:
        owned = {"--model-path", "--model", "--port", "--host", "--tp-size", "--tp", "--served-model-name",
                 "--api-key", "--enable-metrics", "--context-length", "--mem-fraction-static"}
        for arg in value:
            flag = arg.split("=", 1)[0]
            if flag in owned:
                raise ValueError(f"{flag} is set by Meridian from the spec; use the runtime field instead")
        return value


class MeasuredWorkload(base.StrictModel):
    prompt_tokens_mean: float = pydantic.Field(gt=0, description="Mean prompt tokens of the measured requests.")
    output_tokens_mean: float = pydantic.Field(ge=0, description="Mean output tokens of the measured requests.")


class Resources(base.StrictModel):
    gpus_per_replica: int = pydantic.Field(default=1, ge=1, le=64)
    gpu_types: list[rules.GpuTypeName] = pydantic.Field(
        default_factory=list, description="Allowed GPU types; empty means any with enough memory.")
    gpus_by_type: dict[str, int] = pydantic.Field(
        default_factory=dict,
        description="GPUs per replica for particular GPU types (e.g. A100-80GB: 8 where H100 needs 4).")
    min_gpu_memory_gib: int | None = pydantic.Field(default=None, ge=1, le=1024)
    throughput_profile: dict[str, float] = pydantic.Field(
        default_factory=dict,
        description="Measured requests/s per replica by GPU type; overrides the capacity model.")
    throughput_profile_workload: MeasuredWorkload | None = pydantic.Field(
        default=None,
        description="The workload throughput_profile was measured on. A figure holds for the tokens it was "
                    "measured on: `meridian validate` warns when these differ from `workload` by more than "
                    "10%, as after a workload change without a new measurement (the scheduler still sizes "
                    "with the profile as given). Needs throughput_profile.")

    @pydantic.model_validator(mode="after")
    def _measured_needs_profile(self) -> Resources:
        if self.throughput_profile_workload is not None and not self.throughput_profile:
            raise ValueError("throughput_profile_workload says what throughput_profile was measured on, but "
                             "throughput_profile is empty: give the measured requests/s per GPU type, or drop it")
        return self

    @pydantic.field_validator("gpus_by_type")
    @classmethod
    def _by_type(cls, value: dict[str, int], info: pydantic.ValidationInfo) -> dict[str, int]:
        ctx = base.context_of(info)
        for gpu_type, count in value.items():
            base.check_gpu_type(ctx, gpu_type)
            if not 1 <= count <= 64:
                raise ValueError(f"GPUs per replica for {gpu_type} must be in 1..64, got {count}")
        return value

    def gpus_for(self, gpu_type: str) -> int:
        """GPUs one replica takes on ``gpu_type``."""
        return self.gpus_by_type.get(gpu_type, self.gpus_per_replica)

    @pydantic.field_validator("throughput_profile")
    @classmethod
    def _profile(cls, value: dict[str, float], info: pydantic.ValidationInfo) -> dict[str, float]:
        ctx = base.context_of(info)
        for gpu_type, rps in value.items():
            base.check_gpu_type(ctx, gpu_type)
            if rps <= 0:
                raise ValueError(f"throughput for {gpu_type} must be > 0 requests/s, got {rps}")
        return value


class Sla(base.StrictModel):
    ttft_p99_ms: float = pydantic.Field(gt=0, le=600_000, description="p99 time to first token.")
    tpot_p99_ms: float | None = pydantic.Field(default=None, gt=0, le=10_000,
                                               description="p99 time per output token.")
    availability_target: float = pydantic.Field(
        default=0.999, gt=0, lt=1, description="The owner's availability goal, kept with the SLA for reports; "
                                               "placement does not read it (placement.min_distinct_clouds / "
                                               "min_distinct_regions are what spread replicas).")
    client_regions: list[rules.ClientRegion] = pydantic.Field(
        min_length=1, description="Where this model's clients are.")
    max_rtt_ms: float | None = pydantic.Field(
        default=None, gt=0, le=1000,
        description="Max network RTT from a client region to the replicas that serve it: the solver places "
                    "each region's capacity within it (when no pool is, at the nearest pools that still meet "
                    "ttft_p99_ms, reported as an SLA risk), and routers keep the region's requests within it "
                    "while any healthy replica is (beyond it only to fail over, never a refusal).")
    always_served_regions: list[rules.ClientRegion] = pydantic.Field(
        default_factory=list,
        description="Client regions (of client_regions) that always keep a replica within the SLA's reach, "
                    "traffic or not; the others need one only while they send traffic. A region no declared "
                    "capacity can serve within the SLA is an error of `meridian validate` and a refusal of "
                    "`meridian apply` (unless --allow-unmet-sla).")


class Scaling(base.StrictModel):
    min_replicas: int = pydantic.Field(
        default=1, ge=0, le=10_000,
        description="Least demand the autoscaler asks for, in replicas of the reference GPU type (the first type "
                    "of resources.gpu_types the model fits, else the fitting type with the least memory). It is "
                    "capacity, not a count of SGLang servers: where a larger allowed type serves it for less, "
                    "fewer replicas may meet it. For redundancy use placement.min_distinct_clouds / "
                    "min_distinct_regions.")
    max_replicas: int = pydantic.Field(
        default=10, ge=1, le=10_000,
        description="Most replicas (SGLang servers) the deployment runs, whatever their GPU type. The autoscaler "
                    "counts demand in replicas of the reference GPU type and stops at what max_replicas replicas "
                    "of the largest allowed type can serve; the solver holds the replica count to max_replicas "
                    "and names it when demand goes unplaced.")
    target_concurrency_per_replica: float = pydantic.Field(default=16, gt=0, le=10_000)
    target_utilization: float = pydantic.Field(default=0.7, gt=0, le=1)
    scale_up_delay_s: float = pydantic.Field(default=30, ge=0, le=3600)
    scale_down_delay_s: float = pydantic.Field(default=300, ge=0, le=86_400)
    scale_to_zero: bool = False
    scale_to_zero_after_s: float = pydantic.Field(default=900, ge=0, le=86_400)
    warm_pool: int = pydantic.Field(default=0, ge=0, le=1000,
                                    description="Spare capacity kept beyond a non-zero demand, in replicas of the "
                                                "reference GPU type, as min_replicas.")

    @property
    def least_replicas(self) -> int:
        """The fewest replicas the deployment ever asks for: 0 only when it may scale to zero, else
        at least one (``min_replicas: 0`` without ``scale_to_zero`` still keeps a replica)."""
        return self.min_replicas if self.scale_to_zero else max(self.min_replicas, 1)


class SpotRules(base.StrictModel):
    allowed: bool = False
    max_share: float = pydantic.Field(
        default=0.5, ge=0, le=1,
        description="Most of this deployment's capacity that may run on spot: capacity is what its replicas "
                    "serve, so one replica on a large GPU weighs more than one on a small GPU.")
    max_share_per_region: float = pydantic.Field(
        default=0.67, ge=0, le=1,
        description="Most of this deployment's capacity that its spot replicas in any one region may hold (capacity "
                    "weighed as for max_share), so that a correlated preemption wave or an outage in one region "
                    "leaves the rest: with the default 0.67 a deployment allowed wholly on spot keeps at least a "
                    "third of its capacity outside any one region's spot pools (in a second region, or on "
                    "on-demand), never all of it in one region. Binds only where max_share (and the capacity "
                    "policy's spot cap) is above it; 1: no spread.")
    hedge: bool = pydantic.Field(
        default=False,
        description="Every client region this deployment covers keeps, within its SLA's reach, an on-demand "
                    "replica or two spot replicas, so that one preemption does not leave the region without a "
                    "replica for the minutes its replacement takes (a new node and a cold start). Costs a second "
                    "replica wherever one spot replica alone would cover a region; a plan that cannot hedge a "
                    "region still covers it and names it (`meridian plan` risks, the scheduler's /status).")


class Placement(base.StrictModel):
    clouds: list[base.CloudName] = pydantic.Field(default_factory=list, description="Empty: any enabled.")
    regions: list[rules.CloudRegion] = pydantic.Field(default_factory=list, description="Empty: any enabled.")
    min_distinct_clouds: int = pydantic.Field(default=1, ge=1, le=4)
    min_distinct_regions: int = pydantic.Field(default=1, ge=1, le=64)
    spot: SpotRules = SpotRules()


class RollbackThresholds(base.StrictModel):
    ttft_p99_ms: float | None = pydantic.Field(
        default=None, gt=0,
        description="Roll back when a READY replica of the new revision reports a p99 TTFT above this during a "
                    "step; unset: TTFT is not judged.")
    error_rate: float = pydantic.Field(
        default=0.02, ge=0, le=1,
        description="Roll back when the new revision's errors / requests over a step (as routers report them) "
                    "exceed this.")


class Rollout(base.StrictModel):
    """How a new replica revision (model, runtime or GPUs per replica changed) replaces the old one."""

    strategy: Literal["canary", "blue_green"] = pydantic.Field(
        default="canary",
        description="canary: the new revision takes steps_percent of the replicas step by step; blue_green: a full "
                    "new set starts beside the old one, out of traffic, then traffic switches at once.")
    steps_percent: list[int] = pydantic.Field(
        default_factory=lambda: [10, 50, 100], min_length=1,
        description="canary: the new revision's share of the replicas at each step (rounded up, at least one); "
                    "increasing, ending at 100.")
    step_duration_s: float = pydantic.Field(
        default=300, ge=0, le=86_400,
        description="Healthy observation each step needs (its new replicas READY, thresholds met) before the next "
                    "(blue_green: before the switch).")
    rollback: RollbackThresholds = RollbackThresholds()
    progress_deadline_s: float | None = pydantic.Field(
        default=900, gt=0, le=86_400,
        description="Roll back when a step is not done this long after its step_duration_s: its new replicas never "
                    "all READY for that long (a crash loop, no GPUs for them); at the last step, new replicas still "
                    "short. null: wait for ever.")

    @pydantic.field_validator("steps_percent")
    @classmethod
    def _steps(cls, value: list[int]) -> list[int]:
        if any(not 0 < v <= 100 for v in value):
            raise ValueError("each step is a percentage in (0, 100]")
        if value != sorted(value) or len(set(value)) != len(value):
            raise ValueError(f"steps must increase strictly, got {value}")
        if value[-1] != 100:
            raise ValueError(f"the last step must be 100, got {value[-1]}")
        return value


class WorkloadShape(base.StrictModel):
    prompt_tokens_mean: float = pydantic.Field(default=512, gt=0)
    output_tokens_mean: float = pydantic.Field(default=256, ge=0)
    prompt_tokens_p99: float | None = pydantic.Field(
        default=None, gt=0,
        description="The 99th percentile of prompt length, when known (from the model's traffic). Placement "
                    "sizes for the mean; `meridian validate` warns when no pool within a client region's "
                    "reach prefills a prompt this long within ttft_p99_ms, because about 1% of requests or "
                    "more will then miss the TTFT target however many replicas serve them.")

    @pydantic.model_validator(mode="after")
    def _p99_not_below_mean(self) -> WorkloadShape:
        if self.prompt_tokens_p99 is not None and self.prompt_tokens_p99 < self.prompt_tokens_mean:
            raise ValueError(f"prompt_tokens_p99 ({self.prompt_tokens_p99:g}) is below prompt_tokens_mean "
                             f"({self.prompt_tokens_mean:g}): a 99th percentile is at least the mean")
        return self


class ModelDeploymentSpec(base.StrictModel):
    model: ModelSource
    runtime: Runtime = Runtime()
    resources: Resources = Resources()
    sla: Sla
    scaling: Scaling = Scaling()
    placement: Placement = Placement()
    priority_class: str = pydantic.Field(default="standard", pattern=base.NAME_PATTERN)
    rollout: Rollout = Rollout()
    workload: WorkloadShape = WorkloadShape()

    @pydantic.model_validator(mode="after")
    def _cross_field(self, info: pydantic.ValidationInfo) -> ModelDeploymentSpec:
        problems = rules.Problems()
        s, r, res, p = self.scaling, self.runtime, self.resources, self.placement
        if s.min_replicas > s.max_replicas:
            problems.add("scaling.min_replicas",
                         f"min_replicas ({s.min_replicas}) must be <= max_replicas ({s.max_replicas})")
        if s.scale_to_zero and s.min_replicas != 0:
            problems.add("scaling.scale_to_zero", f"scale_to_zero needs min_replicas: 0 (got {s.min_replicas})")
        if s.warm_pool > s.max_replicas:
            problems.add("scaling.warm_pool", f"warm_pool ({s.warm_pool}) exceeds max_replicas ({s.max_replicas})")
        if p.spot.hedge and not p.spot.allowed:
            problems.add("placement.spot.hedge", "hedge guards spot replicas against preemption: it needs "
                                                 "placement.spot.allowed: true (on-demand replicas need no hedge)")
        for gpu_type, count in [("", res.gpus_per_replica), *res.gpus_by_type.items()]:
            if r.tp_size is not None and count % r.tp_size != 0:
                where = f" for {gpu_type}" if gpu_type else ""
                problems.add("runtime.tp_size", f"tp_size ({r.tp_size}) must divide the GPUs per replica{where} ({count})")
        for gpu_type in res.gpus_by_type:
            if res.gpu_types and gpu_type not in res.gpu_types:
                problems.add(f"resources.gpus_by_type.{gpu_type}", f"{gpu_type} is not in resources.gpu_types")
        if not res.gpu_types and res.min_gpu_memory_gib is None:
            problems.add("resources.gpu_types", "give gpu_types or min_gpu_memory_gib")
        rules.unique(res.gpu_types, "resources.gpu_types", problems, "GPU type")
        rules.unique(p.regions, "placement.regions", problems, "region")
        rules.unique(p.clouds, "placement.clouds", problems, "cloud")
        rules.unique(self.sla.client_regions, "sla.client_regions", problems, "client region")
        rules.unique(self.sla.always_served_regions, "sla.always_served_regions", problems, "client region")
        for i, region in enumerate(self.sla.always_served_regions):
            if region not in self.sla.client_regions:
                problems.add(f"sla.always_served_regions.{i}",
                             f"{region!r} is not in sla.client_regions ({', '.join(self.sla.client_regions)})")
        if s.scale_to_zero and self.sla.always_served_regions:
            problems.add("scaling.scale_to_zero", "a deployment with sla.always_served_regions never scales to "
                                                  "zero: drop scale_to_zero or the always-served regions")
        if p.clouds and p.min_distinct_clouds > len(p.clouds):
            problems.add("placement.min_distinct_clouds",
                         f"min_distinct_clouds ({p.min_distinct_clouds}) exceeds the {len(p.clouds)} allowed clouds")
        if p.regions and p.min_distinct_regions > len(p.regions):
            problems.add("placement.min_distinct_regions",
                         f"min_distinct_regions ({p.min_distinct_regions}) exceeds the {len(p.regions)} allowed regions")
        isolation = max(p.min_distinct_clouds, p.min_distinct_regions)
        if isolation > s.max_replicas:
            problems.add("placement.min_distinct_regions",
                         f"isolation across {isolation} clouds/regions needs max_replicas >= {isolation}")
        if p.clouds and p.regions:
            ctx = base.context_of(info)
            for i, region in enumerate(p.regions):
                known = ctx.latency_map.regions.get(region)
                if known is not None and known.cloud and known.cloud not in p.clouds:
                    problems.add(f"placement.regions.{i}",
                                 f"region {region!r} is in {known.cloud}, which placement.clouds does not allow")
        if not r.is_embedding and self.sla.tpot_p99_ms is None:
            problems.add("sla.tpot_p99_ms", "a generative model needs tpot_p99_ms")
        w = self.workload
        if r.context_length is not None:
            output = 0.0 if r.is_embedding else w.output_tokens_mean  # an embedding has no output tokens
            if w.prompt_tokens_mean + output > r.context_length:
                problems.add("workload.prompt_tokens_mean",
                             f"a mean request ({w.prompt_tokens_mean:g} prompt + {output:g} output tokens) does not "
                             f"fit runtime.context_length ({r.context_length}): the replicas would refuse most "
                             "requests")
            elif w.prompt_tokens_p99 is not None and w.prompt_tokens_p99 > r.context_length:
                problems.add("workload.prompt_tokens_p99",
                             f"prompt_tokens_p99 ({w.prompt_tokens_p99:g}) exceeds runtime.context_length "
                             f"({r.context_length}): the replicas would refuse the longest prompts")
        self._check_fit(problems)
        problems.raise_if_any()
        return self

    def _check_fit(self, problems: rules.Problems) -> None:
        arch = self.architecture()
        if arch is None:
            return
        quant = None if self.runtime.quantization == "none" else self.runtime.quantization
        for i, gpu_type in enumerate(self.resources.gpu_types):
            ok, why = capacity.fits(arch, gpu_type, self.resources.gpus_for(gpu_type), quant,
                                    self.runtime.mem_fraction_static)
            if not ok:
                problems.add(f"resources.gpu_types.{i}", f"does not fit: {why}")

    def tp_size_for(self, gpu_type: str) -> int:
        """Tensor-parallel degree of a replica on ``gpu_type``."""
        return self.runtime.tp_size or self.resources.gpus_for(gpu_type)

    def architecture(self) -> capacity.Architecture | None:
        """The capacity model's view of this model (spec figures, else the known table)."""
        a = self.model.architecture
        if a is not None:
            return capacity.Architecture(a.parameters_b, a.layers, a.kv_heads, a.head_dim, self.runtime.is_embedding)
        known = capacity.KNOWN_ARCHITECTURES.get(self.model.source)
        if known is not None and known.is_embedding != self.runtime.is_embedding:
            return capacity.Architecture(known.parameters_b, known.layers, known.kv_heads, known.head_dim,
                                         self.runtime.is_embedding)
        return known


class ModelDeployment(base.StrictModel):
    """A model served with an SLA. Kind ``ModelDeployment``."""

    apiVersion: Literal["meridian/v1"]
    kind: Literal["ModelDeployment"]
    metadata: base.Metadata
    spec: ModelDeploymentSpec
