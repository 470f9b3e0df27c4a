"""What a simulation run replays: the specs, a day of traffic per (deployment, client region), and
the faults (spikes, spot preemption waves, stock-outs, region outages), as one frozen, validated
model. ``load("default")`` gives the built-in scenario; ``load(PATH)`` reads a YAML file whose
``specs`` paths are relative to the file (docs/simulator.md describes every field).

Times in a scenario are hours from the start of the run (``at_h``); the run starts at
``start_utc_hour`` UTC, and each client region's diurnal curve follows its local time."""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Mapping

import pydantic
import yaml

from meridian import spec, traces, yamlread
from meridian.simulate import defaults

log = logging.getLogger("meridian.simulate.scenario")
_WARNED: set[str] = set()


# A shipped trace by short name or by its file's stem (``azure-llm-2023-conv`` is ``azure-conv``).
_SHIPPED_NAMES = {**{s.name: s.name for s in traces.SHIPPED.values()},
                  **{pathlib.Path(s.file).stem: s.name for s in traces.SHIPPED.values()}}


def _shipped_trace(name: str) -> str | None:
    return _SHIPPED_NAMES.get(name)


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the field and what would be valid.
    ``count``: how many problems the message lists, one per line (a problem may take more lines:
    a YAML excerpt)."""

    def __init__(self, message: str, count: int = 1):
        super().__init__(message)
        self.count = count


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


class TraceReplay(_Model):
    """Replay a recorded trace instead of drawing Poisson arrivals (``meridian.simulate.trace.replay``).

    ``file``: a trace shipped with Meridian by short name (``azure-conv``, ``azure-code``,
    ``mooncake``) or file name stem (``azure-llm-2023-conv``), or a ``.csv`` (Azure 2023/2024 or
    BurstGPT, told by its header) / ``.jsonl`` (Mooncake) path relative to the scenario file. Every client region of the traffic entry replays
    the whole trace, tiled end to end to cover the run (a one-hour trace repeats every hour) and
    shifted to the region's local time: at local midnight each region is at the trace's start. Its
    rate is scaled by ``peak_rps[region] / the trace's mean requests/s`` (so the region's mean rate
    at its peak is ``peak_rps``), times the diurnal curve of the entry when ``diurnal`` is true,
    times the scenario's spikes. ``tokens``: ``trace`` serves the trace's mean prompt and output
    tokens (the deployment's ``workload`` is set to them, for the scheduler and the replicas alike;
    embedding deployments keep their spec's, a chat trace's prompts being beyond an embedding
    model's context), ``spec`` keeps the spec's."""

    file: str = pydantic.Field(min_length=1)
    diurnal: bool = True
    tokens: str = pydantic.Field(default="trace", pattern="^(trace|spec)$")


class TrafficShape(_Model):
    """Requests/s of one deployment per client region at that region's daily peak.

    The rate follows a cosine over the local day: ``peak_rps`` at ``peak_local_hour`` and
    ``trough_share x peak_rps`` twelve hours away. Arrivals in a tick are Poisson, or with ``trace``
    the recorded arrivals of a trace file, scaled and shifted (``TraceReplay``)."""

    deployment: str = pydantic.Field(min_length=1)
    peak_rps: dict[str, float] = pydantic.Field(min_length=1, description="client region -> requests/s at peak")
    trough_share: float = pydantic.Field(default=0.25, ge=0, le=1)
    peak_local_hour: float = pydantic.Field(default=14.0, ge=0, lt=24)
    trace: TraceReplay | None = None

    @pydantic.field_validator("peak_rps")
    @classmethod
    def _rates(cls, value: dict[str, float]) -> dict[str, float]:
        for region, rps in value.items():
            if not 0 <= rps <= 100_000:
                raise ValueError(f"peak_rps[{region!r}] must be in 0..100000 requests/s, got {rps}")
        return value


class Spike(_Model):
    """Traffic multiplied by ``multiplier`` for ``duration_min`` from ``at_h``; ``deployment`` and
    ``client_region`` narrow it (None: every deployment / region)."""

    at_h: float = pydantic.Field(ge=0)
    duration_min: float = pydantic.Field(gt=0, le=24 * 60)
    multiplier: float = pydantic.Field(gt=0, le=100)
    deployment: str | None = None
    client_region: str | None = None


class PreemptionWave(_Model):
    """A burst of spot preemptions: at ``at_h``, each running spot node of the region (or cluster)
    gets an interruption notice with probability ``share`` (correlated loss within a region, as
    measured for GPU spot capacity)."""

    at_h: float = pydantic.Field(ge=0)
    share: float = pydantic.Field(gt=0, le=1)
    region: str | None = None
    cluster: str | None = None

    @pydantic.model_validator(mode="after")
    def _target(self) -> PreemptionWave:
        if (self.region is None) == (self.cluster is None):
            raise ValueError("give exactly one of region or cluster")
        return self


class SpotSettings(_Model):
    preemptions_per_node_hour: float | None = pydantic.Field(
        default=None, ge=0, le=10,
        description="Background preemption hazard per spot node; None: each Cluster spec's sim value.")
    notice_s: dict[str, float] = pydantic.Field(
        default_factory=lambda: dict(defaults.SPOT_NOTICE_S),
        description="Interruption notice lead time by cloud (AWS 2 min; GCP and Azure 30 s).")
    waves: tuple[PreemptionWave, ...] = ()


class StockOut(_Model):
    """Pool ``cluster/pool`` cannot grow (insufficient capacity) for ``duration_h`` from ``at_h``."""

    at_h: float = pydantic.Field(ge=0)
    duration_h: float = pydantic.Field(gt=0)
    cluster: str = pydantic.Field(min_length=1)
    pool: str = pydantic.Field(min_length=1)


class Outage(_Model):
    """Every cluster in ``region`` is lost for ``duration_h`` from ``at_h``: its agent goes silent
    and its replicas die at once (nodes keep billing, as a cloud bills instances it cannot reach)."""

    at_h: float = pydantic.Field(ge=0)
    duration_h: float = pydantic.Field(gt=0)
    region: str = pydantic.Field(min_length=1)


class CloudSettings(_Model):
    provisioning_delay_s: float | None = pydantic.Field(
        default=defaults.PROVISIONING_DELAY_S, ge=0, le=3600,
        description="Time for a new GPU node to join its pool; None: each Cluster spec's sim value.")


class ReplicaSettings(_Model):
    """A replica is READY ``cold_start_base_s + weights GiB x cold_start_s_per_weight_gib`` after it
    starts (image pull, weights download and load, CUDA graph capture)."""

    cold_start_base_s: float = pydantic.Field(default=defaults.COLD_START_BASE_S, ge=0, le=3600)
    cold_start_s_per_weight_gib: float = pydantic.Field(default=defaults.COLD_START_S_PER_GIB, ge=0, le=600)


class FidelitySettings(_Model):
    """How finely requests are modelled (see docs/simulator.md, "How it works")."""

    samples_per_stream: int = pydantic.Field(
        default=defaults.SAMPLES_PER_STREAM, ge=1, le=1000,
        description="Representative requests routed per tick and (deployment, client region), rounded up "
                    "to whole rounds over the replicas within the region's reach.")
    prompt_cv: float = pydantic.Field(default=1.0, ge=0, le=5,
                                      description="Coefficient of variation of prompt length (lognormal).")
    tpot_sigma: float = pydantic.Field(default=0.05, ge=0, le=2,
                                       description="Log-sd of a request's TPOT around the replica's mean.")


class Scenario(_Model):
    name: str = pydantic.Field(min_length=1, max_length=100)
    description: str = ""
    specs: tuple[str, ...] = pydantic.Field(min_length=1, description="Spec files (relative to the scenario file).")
    hours: float = pydantic.Field(default=24.0, gt=0, le=24 * 14)
    start_utc_hour: float = pydantic.Field(default=0.0, ge=0, lt=24)
    seed: int = pydantic.Field(default=1, ge=0)
    tick_s: float = pydantic.Field(default=defaults.TICK_S, ge=5, le=600,
                                   description="Simulated seconds per step (traffic, control loop).")
    control_interval_s: float = pydantic.Field(
        default=defaults.CONTROL_INTERVAL_S, ge=5, le=3600,
        description="Simulated seconds between two scheduler rounds (autoscaler, plan, reconcile); a multiple "
                    "of tick_s.")
    warmup_min: float = pydantic.Field(
        default=defaults.WARMUP_MIN, ge=0, le=24 * 60,
        description="Simulated before the measured run, at the first tick's traffic, so it starts from a "
                    "fleet sized for it (not measured, not billed).")
    client_utc_offsets_h: dict[str, float] = pydantic.Field(
        default_factory=lambda: dict(defaults.CLIENT_UTC_OFFSETS_H))
    traffic: tuple[TrafficShape, ...] = pydantic.Field(min_length=1)
    spikes: tuple[Spike, ...] = ()
    spot: SpotSettings = SpotSettings()
    stock_outs: tuple[StockOut, ...] = ()
    outages: tuple[Outage, ...] = ()
    cloud: CloudSettings = CloudSettings()
    replicas: ReplicaSettings = ReplicaSettings()
    fidelity: FidelitySettings = FidelitySettings()
    base_dir: str = pydantic.Field(default=".", description="Set by the loader: where spec paths start.")
    trace_from_cli: bool = pydantic.Field(
        default=False, exclude=True,
        description="Set by ``with_overrides(trace=...)`` (``--trace``): every entry replays one file, so a "
                    "deployment whose context it does not fit is warned about rather than refused.")
    # Set by ``load``: the file, and the line of each YAML path in it, so errors found after
    # validation (names checked against the specs, trace rows) say where the field is.
    _source: str = pydantic.PrivateAttr(default="")
    _lines: dict[tuple, int] = pydantic.PrivateAttr(default_factory=dict)

    @pydantic.model_validator(mode="after")
    def _intervals(self) -> Scenario:
        ratio = self.control_interval_s / self.tick_s
        if abs(ratio - round(ratio)) > 1e-9 or round(ratio) < 1:
            raise ValueError(f"control_interval_s ({self.control_interval_s:g}) must be a whole multiple of tick_s "
                             f"({self.tick_s:g})")
        return self

    @property
    def control_every(self) -> int:
        """Ticks between two scheduler rounds."""
        return int(round(self.control_interval_s / self.tick_s))

    @property
    def ticks(self) -> int:
        return max(1, int(round(self.hours * 3600.0 / self.tick_s)))

    def tick_at(self, hour_h: float) -> int:
        """The tick an event at ``hour_h`` (hours from the start) falls in: faults, windows, the bound."""
        return int(hour_h * 3600.0 // self.tick_s)

    def outage_ticks(self) -> list[tuple[int, int, str]]:
        """Each outage as (first tick down, first tick back up, cloud region)."""
        return [(self.tick_at(o.at_h), self.tick_at(o.at_h + o.duration_h), o.region) for o in self.outages]

    def with_overrides(self, *, hours: float | None = None, seed: int | None = None,
                       trace: str | None = None) -> Scenario:
        """``trace``: every traffic entry replays this trace file (``--trace FILE``; a path is taken
        as given, relative to the working directory), keeping its rates and day shape."""
        update: dict[str, object] = {}
        if trace is not None:
            file = trace if _shipped_trace(trace) else str(pathlib.Path(trace).resolve())
            update["traffic"] = tuple(
                t.model_copy(update={"trace": TraceReplay(file=file, **(
                    {"diurnal": t.trace.diurnal, "tokens": t.trace.tokens} if t.trace else {}))})
                for t in self.traffic)
            update["trace_from_cli"] = True
        if hours is not None:
            if not 0 < hours <= 24 * 14:
                raise ScenarioError(f"hours must be in (0, 336], got {hours}")
            update["hours"] = hours
        if seed is not None:
            if seed < 0:
                raise ScenarioError(f"seed must be >= 0, got {seed}")
            update["seed"] = seed
        out = self.model_copy(update=update)
        out.check_traces()
        return out

    def trace_path(self, replay: TraceReplay) -> str | pathlib.Path:
        """A replay's file: a shipped trace's short name as it is, else a path (relative: to the
        scenario file)."""
        name = _shipped_trace(replay.file)
        if name is not None:
            return name
        path = pathlib.Path(replay.file)
        return path if path.is_absolute() else pathlib.Path(self.base_dir) / path

    def check_traces(self) -> None:
        """Every ``traffic[].trace.file`` resolves to a trace whose rows all read, with requests in
        it: a bad row is a scenario error naming the field, the file and the line, before anything
        runs. Each file is read once (``trace.recorded`` keeps it for the run), and a file named by
        several entries is reported once, under the first."""
        from meridian.simulate import trace as trace_mod  # noqa: PLC0415  (trace imports this module)

        problems = []
        seen: set[str] = set()
        for i, shape in enumerate(self.traffic):
            if shape.trace is None:
                continue
            path = self.trace_path(shape.trace)
            if str(path) in seen:
                continue
            seen.add(str(path))
            try:
                trace_mod.recorded(path)  # resolves the file, then reads every row
            except traces.TraceError as exc:
                problems.append(f"traffic.{i}.trace.file: {exc}")
        if problems:
            if self.trace_from_cli:  # the file is the command line's, not a line of the scenario file
                raise ScenarioError(f"--trace: {problems[0].split(': ', 1)[1]}")
            raise ScenarioError(located(problems, self._source, self._lines), len(problems))

    def spec_paths(self) -> list[pathlib.Path]:
        base = pathlib.Path(self.base_dir)
        return [p if p.is_absolute() else base / p for p in map(pathlib.Path, self.specs)]

    def load_specs(self) -> spec.SpecSet:
        """Validate the scenario's spec files as one set; raise ScenarioError naming the problem."""
        try:
            specs = spec.load_files(self.spec_paths())
        except spec.SpecError as exc:
            more = f"\n... and {len(exc.issues) - 10} more (meridian validate lists them all)" if len(exc.issues) > 10 else ""
            raise ScenarioError("\n".join(f"specs: {i}" for i in exc.issues[:10]) + more, len(exc.issues)) from None
        self.check_against(specs)
        return specs

    def _context_problems(self, i: int, shape: TrafficShape, dep) -> list[str]:
        """A trace replayed with its own tokens whose mean request does not fit the deployment's
        context: a replica would refuse most of its requests, which the report would otherwise show
        as 0% attainable "for no pool within reach". Embedding deployments keep their spec's tokens
        (``TraceReplay.tokens``), so a chat trace's long prompts are no problem of theirs."""
        context = dep.spec.runtime.context_length
        if shape.trace is None or shape.trace.tokens != "trace" or context is None or dep.spec.runtime.is_embedding:
            return []  # an embedding deployment replays the trace's arrivals with its spec's tokens
        from meridian.simulate import trace as trace_mod  # noqa: PLC0415  (trace imports this module)

        try:
            rec = trace_mod.recorded(self.trace_path(shape.trace))
        except traces.TraceError:
            return []  # check_traces has said so
        output = 0.0 if dep.spec.runtime.is_embedding else rec.output_tokens_mean
        if rec.prompt_tokens_mean + output <= context:
            return []
        return [f"traffic.{i}.trace: {shape.trace.file}: its requests average {rec.prompt_tokens_mean:,.0f} prompt + {output:,.0f} "
                f"output tokens, over deployment {shape.deployment}'s runtime.context_length {context:,}: a "
                "replica would refuse most of them; replay it for a deployment with a longer context, or with "
                "tokens: spec in the scenario file (the trace's arrivals, the spec's tokens)"]

    def check_against(self, specs: spec.SpecSet) -> None:
        """Cross-checks between the scenario and its specs: every name must exist."""
        problems: list[str] = []
        deployments = {d.metadata.name: d for d in specs.of_kind("ModelDeployment")}
        clusters = {c.metadata.name: c for c in specs.of_kind("Cluster")}
        lmap = specs.context.latency_map
        client_regions = set(lmap.client_regions())
        if not deployments:
            problems.append("specs: no ModelDeployment in the spec files")
        if not clusters:
            problems.append("specs: no Cluster in the spec files")
        for i, shape in enumerate(self.traffic):
            dep = deployments.get(shape.deployment)
            if dep is None:
                problems.append(f"traffic.{i}.deployment: unknown deployment {shape.deployment!r}; "
                                f"known: {sorted(deployments)}")
                continue
            for problem in self._context_problems(i, shape, dep):
                if self.trace_from_cli:  # --trace: one file for every entry; the user has no tokens: spec to give
                    if problem not in _WARNED:  # once per process, not once per policy run
                        _WARNED.add(problem)
                        log.warning("event=trace_exceeds_context %s (the simulator serves them as if they fit)",
                                    problem)
                else:
                    problems.append(problem)
            served = list(dep.spec.sla.client_regions)
            for region in shape.peak_rps:
                if region not in client_regions:
                    problems.append(f"traffic.{i}.peak_rps.{region}: unknown client region {region!r}; the latency map's: "
                                    f"{sorted(client_regions)}")
                elif region not in served:
                    problems.append(f"traffic.{i}.peak_rps.{region}: deployment {shape.deployment!r} does not serve "
                                    f"client region {region!r} (its sla.client_regions: {served})")
                elif region not in self.client_utc_offsets_h:
                    problems.append(f"client_utc_offsets_h: no UTC offset for client region {region!r}")
        for i, s in enumerate(self.spikes):
            if s.deployment is not None and s.deployment not in deployments:
                problems.append(f"spikes.{i}.deployment: unknown deployment {s.deployment!r}")
            if s.client_region is not None and s.client_region not in client_regions:
                problems.append(f"spikes.{i}.client_region: unknown client region {s.client_region!r}")
        regions = {c.spec.region for c in clusters.values()}
        for i, w in enumerate(self.spot.waves):
            if w.cluster is not None and w.cluster not in clusters:
                problems.append(f"spot.waves.{i}.cluster: unknown cluster {w.cluster!r}; known: {sorted(clusters)}")
            if w.region is not None and w.region not in regions:
                problems.append(f"spot.waves.{i}.region: no cluster in region {w.region!r}; with clusters: "
                                f"{sorted(regions)}")
        for i, s in enumerate(self.stock_outs):
            c = clusters.get(s.cluster)
            if c is None:
                problems.append(f"stock_outs.{i}.cluster: unknown cluster {s.cluster!r}; known: {sorted(clusters)}")
            elif s.pool not in {p.name for p in c.spec.pools}:
                problems.append(f"stock_outs.{i}.pool: cluster {s.cluster} has no pool {s.pool!r}; pools: "
                                f"{[p.name for p in c.spec.pools]}")
        for i, o in enumerate(self.outages):
            if o.region not in regions:
                problems.append(f"outages.{i}.region: no cluster in region {o.region!r}; with clusters: "
                                f"{sorted(regions)}")
        for cloud, notice in self.spot.notice_s.items():
            if cloud not in ("aws", "gcp", "azure", "local"):
                problems.append(f"spot.notice_s: unknown cloud {cloud!r}; valid: aws, gcp, azure, local")
            elif not 0 <= notice <= 3600:
                problems.append(f"spot.notice_s.{cloud}: {notice:g} s; give the notice's lead time in seconds, "
                                "0 to 3600 (AWS 120, GCP and Azure 30)")
        if problems:
            raise ScenarioError(located(problems, self._source, self._lines), len(problems))


def located(problems: list[str], source: str, lines: Mapping[tuple, int]) -> str:
    """Problems written ``"a.0.b: message"``, one per line, each as ``source:line: a.0.b: message``
    (the line of the deepest part of the path the file has; ``source: ...`` without one)."""
    out = []
    for problem in problems:
        head = problem.split(": ", 1)[0]
        path = () if " " in head else tuple(int(t) if t.isdigit() else t for t in head.split("."))
        line = next((lines[path[:end]] for end in range(len(path), 0, -1) if path[:end] in lines), None)
        where = f"{source}:{line}" if source and line else source
        out.append(f"{where}: {problem}" if where else problem)
    return "\n".join(out)


def parse(data: object, base_dir: str | pathlib.Path, source: str = "<scenario>",
          lines: Mapping[tuple, int] | None = None) -> Scenario:
    """``lines``: the line of each YAML path in ``source`` (``load`` reads them), for errors."""
    lines = lines or {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping, got {type(data).__name__}")
    try:
        sc = Scenario.model_validate({**data, "base_dir": str(base_dir)})
    except pydantic.ValidationError as exc:
        parts = []
        for err in exc.errors(include_url=False):
            path = ".".join(str(p) for p in err["loc"]) or "(top)"
            if err["type"] == "extra_forbidden":
                parts.append(f"{path}: {spec.loader.unknown_field(Scenario, tuple(err['loc']))}")
            else:
                parts.append(f"{path}: {err['msg'].removeprefix('Value error, ')}")
        raise ScenarioError(located(parts, source, lines), len(parts)) from None
    sc._source, sc._lines = source, dict(lines)
    sc.check_traces()
    return sc


def load(name_or_path: str) -> Scenario:
    """``"default"`` (the built-in day) or a YAML file."""
    if name_or_path == "default":
        return parse(defaults.DEFAULT_SCENARIO, defaults.examples_dir(), "default")
    path = pathlib.Path(name_or_path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"--scenario {name_or_path}: cannot read it ({exc.strerror or exc}); give 'default' "
                            "or a YAML scenario file") from None
    try:
        data = yamlread.safe_load(text, str(path))
    except yamlread.YAMLFileError as exc:
        raise ScenarioError(str(exc)) from None
    return parse(data, path.resolve().parent, str(path), spec.loader.yaml_lines(text))


def dump(scenario: Scenario) -> str:
    """The scenario as YAML (``meridian simulate --print-scenario``), ready to copy and edit: spec and
    trace files as absolute paths, so the copy works wherever it is saved."""
    data = scenario.model_dump(mode="json", exclude={"base_dir"})
    data["specs"] = [str(p.resolve()) for p in scenario.spec_paths()]
    for shape, out in zip(scenario.traffic, data.get("traffic", []), strict=True):
        if shape.trace is not None:
            path = scenario.trace_path(shape.trace)
            out["trace"]["file"] = path if isinstance(path, str) else str(path.resolve())
    return yaml.safe_dump(data, sort_keys=False)

