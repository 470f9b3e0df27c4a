"""What a restarted agent does with each pod of its cluster it finds (pure: the pod in, a decision
out). The pods are the records: a valid placement annotation means the pod is this cluster's
replica and keeps serving (static stability: pods outlive the agent); a pod without one is an
orphan and is deleted; a pod that records a drain this agent had begun is deleted with what is
left of the drain's deadline; a pod already ending is tracked until it is gone."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Literal

from agents.backends import base
from agents.backends.kubernetes import manifest

Kind = Literal["adopt", "orphan", "finish_drain", "ending"]


@dataclasses.dataclass(frozen=True)
class Decision:
    kind: Kind
    placement: base.Placement | None = None
    directive_id: str = ""
    draining: bool = False  # the drain this agent began is recorded on the pod
    grace_s: int = 0  # for orphan / finish_drain: the deletion's grace period
    why: str = ""


def decide(pod: Mapping, *, now: float, stop_grace_s: int, default_grace_s: int) -> Decision:
    meta = pod.get("metadata") or {}
    placement = manifest.read_placement(pod)
    if placement is None:
        return Decision("orphan", grace_s=default_grace_s, why="no valid placement record")
    directive_id = (meta.get("annotations") or {}).get(manifest.A_DIRECTIVE, "")
    drain = manifest.read_drain(pod)
    deleting = bool(meta.get("deletionTimestamp"))
    if drain is not None and not deleting:
        remaining = max(0.0, float(drain.get("deadline", 0) or 0) - now)
        return Decision("finish_drain", placement, directive_id, draining=True,
                        grace_s=math.ceil(remaining) + stop_grace_s, why=f"a drain began at {drain.get('began')}")
    phase = (pod.get("status") or {}).get("phase")
    if deleting or phase in ("Failed", "Succeeded"):
        why = "being deleted" if deleting else f"phase {phase}"
        return Decision("ending", placement, directive_id, draining=drain is not None, why=why)
    return Decision("adopt", placement, directive_id)


__all__ = ["Decision", "decide"]
