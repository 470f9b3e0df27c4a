"""Pure diff between two placements: what to start and what to drain, per pool.

``meridian plan`` shows it; the reconciler turns it into directives (make-before-break: it starts
``adds`` before it drains ``removes``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from scheduler.solver import problem


@dataclasses.dataclass(frozen=True)
class PoolChange:
    deployment: str
    pool: str
    current: int
    target: int

    @property
    def delta(self) -> int:
        return self.target - self.current


@dataclasses.dataclass(frozen=True)
class PlanDiff:
    """Changes sorted by (deployment, pool); ``adds`` and ``removes`` split them by sign."""

    changes: tuple[PoolChange, ...]

    @property
    def adds(self) -> tuple[PoolChange, ...]:
        return tuple(c for c in self.changes if c.delta > 0)

    @property
    def removes(self) -> tuple[PoolChange, ...]:
        return tuple(c for c in self.changes if c.delta < 0)

    @property
    def replicas_added(self) -> int:
        return sum(c.delta for c in self.adds)

    @property
    def replicas_removed(self) -> int:
        return -sum(c.delta for c in self.removes)

    @property
    def empty(self) -> bool:
        return not self.changes

    def by_pool(self) -> dict[str, int]:
        """Pool key -> net replica change (all deployments)."""
        out: dict[str, int] = {}
        for c in self.changes:
            out[c.pool] = out.get(c.pool, 0) + c.delta
        return out

    def to_dict(self) -> list[dict[str, object]]:
        return [{"deployment": c.deployment, "pool": c.pool, "current": c.current, "target": c.target,
                 "delta": c.delta} for c in self.changes]


def diff(current: problem.Placement | Mapping[tuple[str, str], int],
         target: problem.Placement | Mapping[tuple[str, str], int]) -> PlanDiff:
    """Replicas to add or remove per (deployment, pool) to go from ``current`` to ``target``."""
    cur = current.replicas if isinstance(current, problem.Placement) else current
    tgt = target.replicas if isinstance(target, problem.Placement) else target
    changes = []
    for key in sorted(set(cur) | set(tgt)):
        a, b = cur.get(key, 0), tgt.get(key, 0)
        if a != b:
            changes.append(PoolChange(key[0], key[1], a, b))
    return PlanDiff(tuple(changes))
