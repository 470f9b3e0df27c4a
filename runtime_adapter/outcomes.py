"""What a supervised replica's operations end in: the errors ``Replica`` raises and the results it
returns (kept apart from the supervision loop, which is long enough)."""

from __future__ import annotations

import dataclasses


class ReplicaFailed(RuntimeError):
    """The replica ended FAILED or STOPPED instead of becoming ready; the message says why."""


class AdoptError(RuntimeError):
    """A persisted replica cannot be re-attached (gone, pid reused, port silent); start a new one."""


@dataclasses.dataclass(frozen=True)
class StartupPhases:
    """Seconds spent in each start-up phase of the latest launch."""

    prefetch_s: float = 0.0
    load_s: float = 0.0  # spawn -> port open (weights load, KV allocation)
    warmup_s: float = 0.0  # port open -> first 200 of /health_generate


@dataclasses.dataclass(frozen=True)
class DrainResult:
    outstanding_at_term: int  # running + queued when SIGTERM was sent (-1: unknown)
    deadline_hit: bool
    killed: bool  # SIGTERM was not enough; SIGKILL was sent
    duration_s: float


__all__ = ["AdoptError", "DrainResult", "ReplicaFailed", "StartupPhases"]
