"""A bill over a window of time: bills of the moment integrated as the clouds bill them, each held
from when it was observed until the next one (node-hours x price, with nodes joining and leaving).

``Meter.add(bill, hours)`` adds one piece; ``Meter.observe(at_s, bill)`` is the same for a caller
sampling the fleet (the scheduler, the demo): the bill observed at ``at_s`` holds until the next
observation (or the window's end). Tokens served are integrated beside the money, so a window knows
its cost per million tokens. ``window`` gives the result: the same ``Part`` pieces as a bill of the
moment, in $, replica-hours and GPU-hours."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping

from meridian.cost import bill as bill_mod


@dataclasses.dataclass(frozen=True)
class Tokens:
    """Tokens served: a rate (per second) beside a bill of the moment, a count over a window."""

    prompt: float = 0.0
    completion: float = 0.0

    @property
    def total(self) -> float:
        return self.prompt + self.completion

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(self.prompt + other.prompt, self.completion + other.completion)


@dataclasses.dataclass(frozen=True)
class PoolTotal:
    """One pool over a window: node-hours and $ (``usd`` = its replicas' shares + ``idle_usd``)."""

    where: bill_mod.Where
    node_hours: float
    gpu_hours: float
    held_gpu_hours: float
    usd: float
    idle_usd: float


@dataclasses.dataclass(frozen=True)
class Window:
    start_s: float
    end_s: float
    hours: float  # hours covered by bills (from the first observation to the end)
    pools: tuple[PoolTotal, ...]
    parts: tuple[bill_mod.Part, ...]
    tokens: Mapping[str, Tokens]  # by served model

    @property
    def usd(self) -> float:
        return sum(p.usd for p in self.pools)

    @property
    def shares_usd(self) -> float:
        return sum(p.usd for p in self.parts if p.owner is not None)

    @property
    def idle_usd(self) -> float:
        return sum(p.usd for p in self.parts if p.owner is None)

    @property
    def usd_per_hour(self) -> float:
        """The window's mean bill per hour (0 for an empty window)."""
        return self.usd / self.hours if self.hours > 0 else 0.0


class Meter:
    """Integrates bills of the moment over time. Not thread-safe; one owner."""

    def __init__(self, start_s: float = 0.0):
        self.start_s = start_s
        self.hours = 0.0
        self._pools: dict[str, list] = {}  # key -> [where, node_hours, gpu_hours, held_gpu_hours, usd, idle_usd]
        self._parts: dict[tuple[str, bill_mod.Owner | None], list] = {}  # -> [where, replica_h, gpu_h, usd]
        self._tokens: dict[str, Tokens] = {}
        self._last: tuple[float, bill_mod.Bill, Mapping[str, Tokens]] | None = None

    def add(self, bill: bill_mod.Bill, hours: float, tokens_per_s: Mapping[str, Tokens] | None = None) -> None:
        """``bill`` held for ``hours``, serving ``tokens_per_s`` (by model) meanwhile."""
        if hours <= 0:
            return
        self.hours += hours
        for line in bill.pools:
            w = line.pool.where
            acc = self._pools.setdefault(w.key, [w, 0.0, 0.0, 0.0, 0.0, 0.0])
            acc[1] += line.pool.nodes * hours
            acc[2] += line.gpus * hours
            acc[3] += line.gpus_held * hours
            acc[4] += line.usd * hours
            acc[5] += line.idle_usd * hours
        for p in bill.parts:
            acc = self._parts.setdefault((p.where.key, p.owner), [p.where, 0.0, 0.0, 0.0])
            acc[1] += p.replicas * hours
            acc[2] += p.gpus * hours
            acc[3] += p.usd * hours
        seconds = hours * 3600.0
        for model, rate in (tokens_per_s or {}).items():
            self._tokens[model] = self._tokens.get(model, Tokens()) + Tokens(rate.prompt * seconds,
                                                                                rate.completion * seconds)

    def observe(self, at_s: float, bill: bill_mod.Bill, tokens_per_s: Mapping[str, Tokens] | None = None) -> None:
        """A bill sampled at ``at_s``: the previous one held until now, this one holds from now on. The
        first observation starts the window (when the meter was made with no start time)."""
        if self._last is None:
            if self.hours == 0 and not self.start_s:
                self.start_s = at_s
        else:
            last_at, last_bill, last_tokens = self._last
            self.add(last_bill, (at_s - last_at) / 3600.0, last_tokens)
        self._last = (at_s, bill, dict(tokens_per_s or {}))

    def window(self, end_s: float | None = None) -> Window:
        """The window from the start until ``end_s`` (default: the last observation); the last
        observed bill counts until ``end_s``. The meter itself is not changed."""
        meter = self
        if self._last is not None and end_s is not None and end_s > self._last[0]:
            meter = copy.deepcopy(self)
            last_at, last_bill, last_tokens = self._last
            meter.add(last_bill, (end_s - last_at) / 3600.0, last_tokens)
        if end_s is None:
            end_s = self._last[0] if self._last is not None else self.start_s + self.hours * 3600.0
        pools = tuple(PoolTotal(*acc) for _, acc in sorted(meter._pools.items()))
        parts = tuple(bill_mod.Part(acc[0], owner, acc[1], acc[2], acc[3])
                      for (_, owner), acc in sorted(meter._parts.items(), key=_part_order))
        return Window(meter.start_s, end_s, meter.hours, pools, parts, dict(meter._tokens))


def _part_order(item: tuple[tuple[str, bill_mod.Owner | None], list]) -> tuple:
    (key, owner), _ = item
    return (key, owner is None, owner or bill_mod.Owner("", ""))
