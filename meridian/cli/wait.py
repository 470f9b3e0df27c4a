"""``meridian apply --wait``: after an apply, wait until every applied deployment has its replicas
ready, with a progress bar on stderr (``meridian.progress``) and a final line naming what is still
missing when the wait times out.

A deployment is ready when the replicas the agents report READY reach what it wants: the larger
of its ``min_replicas`` and what the scheduler's current plan places for it."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from meridian import progress as progress_mod
from scheduler.admin import client as admin_client


@dataclasses.dataclass(frozen=True)
class Readiness:
    """Replicas wanted and ready per deployment."""

    wanted: dict[str, int]
    ready: dict[str, int]

    @property
    def done(self) -> bool:
        return all(self.ready.get(d, 0) >= n for d, n in self.wanted.items())

    def missing(self) -> list[str]:
        return [f"{d}: {self.ready.get(d, 0)} of {n} replicas ready" for d, n in sorted(self.wanted.items())
                if self.ready.get(d, 0) < n]

    def to_dict(self) -> dict:
        return {d: {"wanted": n, "ready": self.ready.get(d, 0)} for d, n in sorted(self.wanted.items())}


def readiness(status: dict, minimums: dict[str, int]) -> Readiness:
    """From ``GET /v1/status``: the replicas ready per deployment of ``minimums``, and how many each
    wants (its minimum, or the plan's placement when that is larger). Pure."""
    placement = ((status.get("plan") or {}).get("placement")) or {}
    wanted = {d: max(m, sum(placement.get(d, {}).values())) for d, m in minimums.items()}
    ready = {d: 0 for d in minimums}
    for cluster in status.get("clusters", []):
        if cluster.get("lost"):
            continue
        for r in cluster.get("replica_details", []):
            if r.get("deployment") in ready and r.get("state") == "ready":
                ready[r["deployment"]] += 1
    return Readiness(wanted, ready)


def wait(client: admin_client.AdminClient, deployments: Sequence[str], timeout_s: float, *,
         interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> Readiness:
    """Poll the scheduler until ``deployments`` are ready or ``timeout_s`` passes; the last readiness."""
    minimums = {}
    for name in deployments:
        doc = client.get("ModelDeployment", name)["document"]
        minimums[name] = int(((doc.get("spec") or {}).get("scaling") or {}).get("min_replicas", 1))
    deadline = clock() + timeout_s
    with progress_mod.Progress("waiting for replicas", unit="replicas ready", clock=clock) as bar:
        while True:
            state = readiness(client.status(), minimums)
            bar.update(sum(min(state.ready[d], n) for d, n in state.wanted.items()), sum(state.wanted.values()),
                       note=", ".join(state.missing()))
            if state.done:
                return state
            if clock() >= deadline:
                bar.fail(f"timed out after {timeout_s:g} s")
                return state
            sleep(interval_s)
