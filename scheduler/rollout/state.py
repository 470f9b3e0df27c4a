"""A deployment's rollout as data: ``RolloutState`` (frozen, with a JSON form the state store keeps)
and the health tally of the current step, ``StepSignals``.

One record per deployment, kept whatever the phase: a COMPLETE record holds the last spec fully
rolled out (``stable_spec``), which is what the next rollout's old side runs and what a rollback
restores; the spec store keeps only the newest spec."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping

STRATEGIES = ("canary", "blue_green")
ROLLBACK_REASONS = ("error_rate", "ttft", "progress_deadline")


class Phase(str, enum.Enum):
    PROGRESSING = "progressing"  # the new revision is taking over, step by step
    COMPLETE = "complete"  # only the applied spec's revision serves (or nothing had to be rolled)
    ROLLED_BACK = "rolled_back"  # the new revision breached a threshold; the stable revision serves


@dataclasses.dataclass(frozen=True)
class StepSignals:
    """The new revision's health over the current step: router-reported ``requests`` and ``errors``
    (windows received since the step began), and the worst p99 TTFT one of its READY replicas
    reported (ms). ``counted``: per traffic window key, when the last window counted was received,
    so a window is never counted twice."""

    requests: int = 0
    errors: int = 0
    ttft_p99_ms: float = 0.0
    counted: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.requests < 0 or self.errors < 0:
            raise ValueError(f"requests and errors must be >= 0, got {self.requests}, {self.errors}")

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None


@dataclasses.dataclass(frozen=True)
class Counts:
    """Replicas as of the last round: the new revision's wanted and READY, the old side's wanted and
    present (any revision but the new one, STARTING or READY, not being drained)."""

    new_wanted: int = 0
    new_ready: int = 0
    old_wanted: int = 0
    old_present: int = 0


@dataclasses.dataclass(frozen=True)
class RolloutState:
    """``revision``: the applied spec's replica revision; ``stable_revision``/``stable_spec``: the last
    revision fully rolled out and its ModelDeployment JSON. ``step``: index into ``steps_percent``
    (canary) or 0 = new set beside the old, 1 = traffic switched (blue_green). ``observed_s``:
    seconds of healthy observation in this step so far; ``healthy_at_s``: when the last round found
    it healthy (None: it was not). ``steps_percent`` and ``step_duration_s`` are the spec's, as of the
    last round. Times are Unix seconds."""

    deployment: str
    phase: Phase
    strategy: str
    revision: str
    stable_revision: str
    stable_spec: str
    started_at_s: float
    steps_percent: tuple[int, ...] = (100,)
    step_duration_s: float = 0.0
    step: int = 0
    step_started_at_s: float = 0.0
    observed_s: float = 0.0
    healthy_at_s: float | None = None
    signals: StepSignals = StepSignals()
    counts: Counts = Counts()
    reason: str = ""
    rollback_reason: str = ""  # one of ROLLBACK_REASONS once rolled back
    ended_at_s: float | None = None

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.rollback_reason and self.rollback_reason not in ROLLBACK_REASONS:
            raise ValueError(f"rollback_reason must be one of {', '.join(ROLLBACK_REASONS)}, "
                             f"got {self.rollback_reason!r}")
        if self.step < 0:
            raise ValueError(f"step must be >= 0, got {self.step}")

    @property
    def in_progress(self) -> bool:
        return self.phase is Phase.PROGRESSING

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["phase"] = self.phase.value
        data["steps_percent"] = list(self.steps_percent)
        data["signals"]["counted"] = dict(self.signals.counted)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> RolloutState:
        """Raises ValueError (naming the field) on a record this version cannot read."""
        try:
            data = json.loads(text)
            data["phase"] = Phase(data["phase"])
            data["steps_percent"] = tuple(int(v) for v in data.get("steps_percent", (100,)))
            data["signals"] = StepSignals(**data.get("signals", {}))
            data["counts"] = Counts(**data.get("counts", {}))
            return cls(**data)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"unreadable rollout record: {exc!r}") from None
