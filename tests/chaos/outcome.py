"""One fault's run and what it measured: inject it under steady load, restore, wait for the fleet to
be whole, then judge the clients' records and the fleet's evidence.

- failed: requests that got no answer (non-streaming) or no first event (streaming);
- broken: streams that had started and did not end with ``[DONE]``;
- duplicates: requests two answers were generated for (the replicas' request logs);
- service recovery: until the last request the fault hurt ended (failed, broken, or a
  non-streaming answer slower than twice the baseline p99, at least a second more);
- fleet restored: until ``World.whole`` held again after the injection;
- lost / twice: applied specs missing or gone back, directives acted on twice or replicas started
  twice (the agents' logs), and what a fault's own check found."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable

from tests.chaos import load as load_mod
from tests.chaos import world as world_mod

BASELINE_S = 3.0  # steady load before the fault (its latency is the baseline)
TAIL_S = 2.0  # load on the restored fleet before the books close


@dataclasses.dataclass(frozen=True)
class Expect:
    """What a fault may cost. Failed requests, duplicates, anything lost or done twice: never."""

    broken_streams: int = 0  # at most: only where a serving replica dies or hangs
    service_s: float = 10.0  # the last request it hurt ended within this of the injection
    restored_s: float = 60.0  # the fleet whole again within this of the injection


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What a fault's own check may look at besides the world: the router's counters that moved
    meanwhile (``retries:<reason>``, ``upstream_errors:<kind>``) and when the fault went in."""

    router: dict[str, int]
    injected_unix: float


@dataclasses.dataclass(frozen=True)
class Fault:
    """A fault as data: how to inject it, how long to hold it under load, how to undo it (an
    operator's or the system's own remedy), an extra check, and what it may cost."""

    name: str
    what: str
    inject: Callable[[world_mod.World], Awaitable[object]]
    hold_s: float
    restore: Callable[[world_mod.World, object], Awaitable[None]] | None = None
    check: Callable[[world_mod.World, object, Evidence], Awaitable[list[str]]] | None = None
    expect: Expect = Expect()
    load: load_mod.LoadSpec = load_mod.STEADY
    changes_specs: bool = False


@dataclasses.dataclass
class Outcome:
    fault: Fault
    requests: int = 0
    streams: int = 0
    failed_unary: int = 0
    failed_streams: int = 0
    broken: int = 0
    duplicates: int = 0
    service_s: float = 0.0
    restored_s: float | None = None
    router: dict[str, int] = dataclasses.field(default_factory=dict)  # retries / upstream errors meanwhile
    problems: list[str] = dataclasses.field(default_factory=list)  # lost, twice, a fault's check
    samples: list[str] = dataclasses.field(default_factory=list)  # a few failures, for the message

    def violations(self) -> list[str]:
        e = self.fault.expect
        out = []
        if self.failed_unary:
            out.append(f"{self.failed_unary} non-streaming requests failed")
        if self.failed_streams:
            out.append(f"{self.failed_streams} streams failed before their first event")
        if self.broken > e.broken_streams:
            out.append(f"{self.broken} streams broken (at most {e.broken_streams})")
        if self.duplicates:
            out.append(f"{self.duplicates} requests answered twice")
        if self.restored_s is None or self.restored_s > e.restored_s:
            out.append(f"fleet not whole within {e.restored_s:g} s")
        if self.service_s > e.service_s:
            out.append(f"clients hurt for {self.service_s:.1f} s (at most {e.service_s:g})")
        return out + self.problems

    @property
    def passed(self) -> bool:
        return not self.violations()


async def run(world: world_mod.World, fault: Fault) -> Outcome:
    await world.wait_whole(120)
    await world.follow_leader()
    specs_before = await world.specs()
    twice_before = world.directives_twice()
    counters_before = await world.router_counters()
    load = await load_mod.Load(world.fleet.router_url, fault.load, fault.name).start()
    outcome = Outcome(fault)
    injected_at = time.monotonic() + BASELINE_S
    injected_unix = time.time() + BASELINE_S
    try:
        await asyncio.sleep(BASELINE_S)
        injected_at, injected_unix = time.monotonic(), time.time()
        token = await fault.inject(world)
        await asyncio.sleep(fault.hold_s)
        if fault.restore is not None:
            await fault.restore(world, token)
        try:
            await world.wait_whole(max(1.0, fault.expect.restored_s - (time.monotonic() - injected_at)) + 30)
            outcome.restored_s = time.monotonic() - injected_at
        except TimeoutError as exc:
            outcome.problems.append(str(exc))
        await world.follow_leader()
        after = await world.router_counters()
        outcome.router = {k: int(v - counters_before.get(k, 0)) for k, v in sorted(after.items())
                          if v - counters_before.get(k, 0) > 0}
        if fault.check is not None:
            outcome.problems.extend(await fault.check(world, token, Evidence(outcome.router, injected_unix)))
        await asyncio.sleep(TAIL_S)
    finally:
        records = await load.stop()
    _judge(outcome, records, injected_at)
    outcome.duplicates = len(world.served_twice({r.request_id for r in records}))
    specs_after = await world.specs()
    outcome.problems.extend(_lost(specs_before, specs_after, fault.changes_specs))
    twice = world.directives_twice()
    for kind in ("directives", "replicas"):
        new = sorted(set(twice[kind]) - set(twice_before[kind]))
        if new:
            outcome.problems.append(f"{kind} carried out twice: {new[:5]}")
    return outcome


def _judge(outcome: Outcome, records: list[load_mod.Record], injected_at: float) -> None:
    unary = [r for r in records if r.kind == "unary"]
    streams = [r for r in records if r.kind == "stream"]
    outcome.requests, outcome.streams = len(unary), len(streams)
    failed_unary = [r for r in unary if not r.ok]
    failed_streams = [r for r in streams if not r.ok and r.first_byte is None]
    broken = [r for r in streams if r.broken]
    outcome.failed_unary, outcome.failed_streams, outcome.broken = len(failed_unary), len(failed_streams), len(broken)
    outcome.samples = [f"{r.kind} {r.request_id}: {r.error}" for r in (failed_unary + failed_streams + broken)[:3]]
    baseline = sorted(r.latency_s for r in unary if r.ok and r.end < injected_at)
    p99 = baseline[min(len(baseline) - 1, int(len(baseline) * 0.99))] if baseline else 1.0
    slow_s = max(2 * p99, p99 + 1.0)
    hurt = [r for r in records if r.start >= injected_at - 1.0 and r.end > injected_at
            and (not r.ok or (r.kind == "unary" and r.latency_s > slow_s))]
    outcome.service_s = max((r.end - injected_at for r in hurt), default=0.0)


def _lost(before: list[tuple[str, str, int]], after: list[tuple[str, str, int]], changes: bool) -> list[str]:
    """Specs that vanished, appeared or went back a generation (or changed when nothing applied)."""
    b = {(k, n): g for k, n, g in before}
    a = {(k, n): g for k, n, g in after}
    out = []
    if set(b) != set(a):
        out.append(f"specs lost or added: before {sorted(b)} after {sorted(a)}")
    for key in set(a) & set(b):
        if a[key] < b[key] or (not changes and a[key] != b[key]):
            out.append(f"spec {key[0]}/{key[1]} generation {b[key]} -> {a[key]}")
    return out
