"""``GET /v1/cost``: the bill, from what this scheduler knows (agents' pools and replicas, the
routers' traffic), computed by ``meridian.cost``; the bill since this node began leading; and the
specs' cost floor beside it (``scheduler.control.floor``, solved once per spec generation, off the
event loop). docs/scheduler.md lists the fields.

``?floor=wait`` waits for the floor (up to the solve time limit and a margin) instead of answering
``"status": "computing"`` while it is solved."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from meridian import cost, spec
from scheduler.control import billing, planner
from scheduler.control import floor as floor_mod
from scheduler.state import records

log = logging.getLogger("meridian.scheduler.admin.cost")
WAIT_MARGIN_S = 10.0


class FloorCache:
    """The cost floor of the applied specs, solved at most once per spec generation, one solve at a
    time (a solve runs on a worker thread and cannot be cut short; a newer generation waits for it)."""

    def __init__(self, time_limit_s: float, *, compute: Callable[..., floor_mod.Floor] = floor_mod.compute,
                 on_error: Callable[[str], None] = lambda where: None):
        self.time_limit_s = time_limit_s
        self._compute = compute
        self._on_error = on_error
        self._done: tuple[int, dict] | None = None
        self._running: tuple[int, asyncio.Task] | None = None

    def get(self, specs: planner.SpecView) -> dict:
        """The floor of ``specs`` when known; else ``{"status": "computing"}`` (a solve is started or
        under way) or why there is none."""
        if not specs.clusters:
            return {"status": "none", "usd_per_hour": None,
                    "reason": "no Cluster spec is applied: there is no fleet to bound"}
        if self._done is not None and self._done[0] == specs.generation:
            return self._done[1]
        if self._running is None or (self._running[1].done() and self._running[0] != specs.generation):
            task = asyncio.get_running_loop().create_task(self._solve(specs), name="cost-floor")
            self._running = (specs.generation, task)
        return {"status": "computing", "usd_per_hour": None,
                "reason": f"solving the floor of spec generation {specs.generation}"}

    async def wait(self, specs: planner.SpecView) -> dict:
        """The floor of ``specs``, waiting for its solve (bounded)."""
        deadline = asyncio.get_running_loop().time() + 2 * self.time_limit_s + WAIT_MARGIN_S
        while True:
            got = self.get(specs)
            if got["status"] != "computing" or asyncio.get_running_loop().time() >= deadline:
                return got
            await asyncio.wait({self._running[1]}, timeout=max(0.0, deadline - asyncio.get_running_loop().time()))

    async def _solve(self, specs: planner.SpecView) -> dict:
        try:
            floor = await asyncio.to_thread(self._compute, specs, time_limit_s=self.time_limit_s)
        except Exception as exc:  # noqa: BLE001 (any solver failure is reported in the answer, logged and counted)
            self._on_error("cost_floor")
            log.error("event=cost_floor_failed generation=%d error=%r", specs.generation, str(exc))
            result = {"status": "error", "usd_per_hour": None, "reason": f"the floor's solve failed: {exc}"}
        else:
            result = {"status": "ready", **floor.to_dict()}
        self._done = (specs.generation, result)
        return result


async def stored_specs(spec_store: records.SpecStore, fallback: planner.SpecView) -> planner.SpecView:
    """The applied specs as the store holds them (a standby's loop does not follow them; the floor
    is theirs); ``fallback`` when the stored set does not load."""
    gen = await spec_store.generation()
    if gen == fallback.generation:
        return fallback
    stored = await spec_store.all()
    try:
        return planner.SpecView.of(await asyncio.to_thread(records.spec_set, stored), gen)
    except spec.SpecError as exc:
        log.error("event=stored_specs_invalid where=cost generation=%d issues=%d", gen, len(exc.issues))
        return fallback


def document(fleet_bill: billing.FleetBill, window: cost.Window | None, tokens: dict[str, cost.Tokens], *,
             now_s: float, leader: bool, floor: dict, scale_down_delay_s: float) -> dict:
    """The ``GET /v1/cost`` answer."""
    lost = cost.document.of_bill(fleet_bill.unreachable, at_s=now_s)
    return {
        "leader": leader,
        "note": "" if leader else ("this node stands by and knows no fleet: ask the leader (GET /v1/status: "
                                   "current_leader.admin)"),
        "now": cost.document.of_bill(fleet_bill.reachable, at_s=now_s, tokens_per_s=tokens),
        "since": cost.document.of_window(window) if window is not None else None,
        "unreachable": {"clusters": list(fleet_bill.lost_clusters), "usd_per_hour": lost["usd_per_hour"],
                        "pools": lost["pools"],
                        "note": "lost clusters' pools as last reported: not in the bill (the scheduler no longer "
                                "hears from them; their cloud may still bill these nodes)"},
        "floor": floor,
        "pool_scale_down_delay_s": scale_down_delay_s,
    }
