"""The demo's SLA judgement, request by request and client region by client region (pure: records,
the scheduler's status polls and the scripted events in, rows out; ``view`` prints them).

A request is within its model's SLA when it succeeded, its TTFT is within ``ttft_p99_ms`` (an
embedding's TTFT is its whole answer's arrival), its TPOT within ``tpot_p99_ms`` and, when the model
has a ``max_rtt_ms``, a READY replica was within that RTT of the request's client region when it
started (the router keeps a region's requests on those while any is healthy; the demo cannot see
which replica answered, so the nearest ready one at that moment stands for it). Each request falls
in the first window that holds its start: a model's cold start (scale from zero, until its first
answer), the traffic spike, the region lost (until its capacity is re-placed), the spot preemption
wave (until the plan is carried out again), or else steady state. A model's cold start, per client
region, lasts until a replica within that region's reach is ready (and, for a model scaled to zero,
until its first answer): the autoscaler learns a region's traffic from its first requests. Every
miss gets a cause: failed (with its error), max_rtt, ttft or tpot."""

from __future__ import annotations

import bisect
import collections
import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from meridian import latency
from meridian.demo import traffic

STEADY = "steady"
# Below this share of steady-state requests within SLA a region gets a line saying why.
TARGET_SHARE = 0.99


@dataclasses.dataclass(frozen=True)
class Target:
    """One model's SLA as the demo judges it. ``prefill_ms``: the capacity model's prefill of the
    workload's mean prompt, by GPU type; ``headroom_ms``: what the plan keeps free of the TTFT."""

    ttft_ms: float
    tpot_ms: float | None
    max_rtt_ms: float | None = None
    prefill_ms: Mapping[str, float] = dataclasses.field(default_factory=dict)
    headroom_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class Window:
    """A stretch of the run that is not steady state: [start_s, end_s) in wall seconds; the models
    and client regions it applies to (empty: all)."""

    name: str
    start_s: float
    end_s: float
    models: frozenset[str] = frozenset()
    regions: frozenset[str] = frozenset()

    def holds(self, record: traffic.Record) -> bool:
        return (self.start_s <= record.started_s < self.end_s and (not self.models or record.model in self.models)
                and (not self.regions or record.region in self.regions))


@dataclasses.dataclass(frozen=True)
class Count:
    """Requests of one window, those within SLA, and the misses by cause."""

    requests: int = 0
    within: int = 0
    misses: Mapping[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Nearest:
    """The nearest READY replica of a model to a client region at one moment."""

    rtt_ms: float
    region: str
    gpu_type: str


class ReachLog:
    """The nearest READY replica of every model to every client region, poll by poll."""

    def __init__(self, latency_map: latency.LatencyMap):
        self._lmap = latency_map
        self._times: list[float] = []
        self._nearest: list[dict[tuple[str, str], Nearest]] = []

    def add(self, at_s: float, status: Mapping, regions: Mapping[str, Iterable[str]]) -> None:
        """One status poll at wall time ``at_s``; ``regions``: model -> its client regions."""
        ready: dict[str, list[tuple[str, str]]] = {}
        for c in status.get("clusters", []):
            if c.get("lost"):
                continue
            pools = {p.get("pool_id"): p.get("gpu_type", "") for p in c.get("pool_details", [])}
            for r in c.get("replica_details", []):
                if r.get("state") == "ready":
                    model = r.get("served_model_name") or r.get("deployment")
                    ready.setdefault(model, []).append((c.get("region", ""), pools.get(r.get("pool_id"), "")))
        out: dict[tuple[str, str], Nearest] = {}
        for model, clients in regions.items():
            for client in clients:
                best = None
                for where, gpu in ready.get(model, []):
                    try:
                        rtt = self._lmap.rtt_ms(client, where)
                    except latency.UnknownRegion:
                        continue
                    if best is None or rtt < best.rtt_ms:
                        best = Nearest(rtt, where, gpu)
                if best is not None:
                    out[(model, client)] = best
        self._times.append(at_s)
        self._nearest.append(out)

    def at(self, t_s: float, model: str, region: str) -> Nearest | None:
        """The nearest ready replica at the last poll at or before ``t_s`` (the first poll before any)."""
        if not self._times:
            return None
        i = max(0, bisect.bisect_right(self._times, t_s) - 1)
        return self._nearest[i].get((model, region))

    def first_within(self, model: str, region: str, target: Target) -> float | None:
        """The first poll at which a ready replica was within the region's reach (max_rtt_ms, and
        RTT + prefill + headroom within the TTFT target), or None."""
        for t, nearest in zip(self._times, self._nearest, strict=True):
            if within_reach(nearest.get((model, region)), target):
                return t
        return None


    def back_within(self, model: str, region: str, target: Target, since: float, until: float) -> float | None:
        """After a fault at ``since``: ``since`` when the region kept a ready replica within its reach
        at every poll up to ``until`` (nothing to wait for); else the first later poll at which one was
        within reach again, or None when none came back."""
        lapsed = False
        for t, nearest in zip(self._times, self._nearest, strict=True):
            if t < since:
                continue
            ok = within_reach(nearest.get((model, region)), target)
            if not lapsed:
                if ok:
                    if t > until:
                        return since
                    continue
                lapsed = True
            elif ok:
                return t
        return None if lapsed else since


def within_reach(nearest: Nearest | None, target: Target) -> bool:
    """Whether that replica is within the SLA's reach, as the placement judges it."""
    if nearest is None:
        return False
    if target.max_rtt_ms is not None and nearest.rtt_ms > target.max_rtt_ms:
        return False
    return nearest.rtt_ms + target.prefill_ms.get(nearest.gpu_type, 0.0) + target.headroom_ms <= target.ttft_ms


def judge(record: traffic.Record, target: Target, nearest: Nearest | None) -> str:
    """"" when ``record`` is within its SLA, else its cause: failed, max_rtt, ttft or tpot."""
    if not record.ok or record.ttft_s is None:
        return "failed"
    if target.max_rtt_ms is not None and (nearest is None or nearest.rtt_ms > target.max_rtt_ms):
        return "max_rtt"
    if record.ttft_s * 1000 > target.ttft_ms:
        return "ttft"
    if target.tpot_ms is not None and record.completion_tokens > 1:
        tpot_ms = (record.total_s - record.ttft_s) * 1000 / (record.completion_tokens - 1)
        if tpot_ms > target.tpot_ms:
            return "tpot"
    return ""


def window_of(record: traffic.Record, windows: Sequence[Window]) -> str:
    return next((w.name for w in windows if w.holds(record)), STEADY)


@dataclasses.dataclass(frozen=True)
class RegionSla:
    """One model and client region over the run: steady-state requests and those within SLA, the
    same per window, the causes of steady-state misses, TTFT p50/p99 of steady-state answers, the
    nearest ready replica (median RTT over the steady-state requests) and, when steady-state
    attainment is under ``TARGET_SHARE``, ``why`` in one line from these figures."""

    model: str
    region: str
    steady: int
    steady_within: int
    windows: Mapping[str, Count]
    misses: Mapping[str, int]
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    nearest: Nearest | None
    expected_ms: float | None
    failed: int = 0
    why: str = ""

    @property
    def steady_share(self) -> float | None:
        return self.steady_within / self.steady if self.steady else None

    @property
    def requests(self) -> int:
        return self.steady + sum(c.requests for c in self.windows.values())

    @property
    def within(self) -> int:
        return self.steady_within + sum(c.within for c in self.windows.values())


def per_region(records: Iterable[traffic.Record], targets: Mapping[str, Target], windows: Sequence[Window],
               reach: ReachLog, host: str = "", notes: Mapping[tuple[str, str], str] | None = None) -> list[RegionSla]:
    """A ``RegionSla`` per (model, client region) with requests; ``host``: how the machine was
    loaded (named in a line that blames the time beyond network and prefill on it); ``notes``:
    (model, region) -> what the scheduler's plan says of that region (an unmet SLA's reason)."""
    groups: dict[tuple[str, str], list[traffic.Record]] = {}
    for r in records:
        groups.setdefault((r.model, r.region), []).append(r)
    out = []
    for (model, region), recs in sorted(groups.items()):
        target = targets.get(model)
        if target is None:
            continue
        steady = steady_within = 0
        windows_count: dict[str, list] = {}
        misses: collections.Counter = collections.Counter()
        ttfts: list[float] = []
        rtts: list[Nearest] = []
        errors: collections.Counter = collections.Counter()
        for r in recs:
            nearest = reach.at(r.started_s, model, region)
            cause = judge(r, target, nearest)
            name = window_of(r, windows)
            if name != STEADY:
                acc = windows_count.setdefault(name, [0, 0, collections.Counter()])
                acc[0] += 1
                acc[1] += not cause
                if cause:
                    acc[2][cause] += 1
                continue
            steady += 1
            steady_within += not cause
            if cause:
                misses[cause] += 1
            if cause == "failed":
                errors[r.error[:90]] += 1
            if r.ok and r.ttft_s is not None:
                ttfts.append(r.ttft_s * 1000)
            if nearest is not None:
                rtts.append(nearest)
        near = sorted(rtts, key=lambda n: n.rtt_ms)[len(rtts) // 2] if rtts else None
        expected = near.rtt_ms + target.prefill_ms.get(near.gpu_type, 0.0) if near is not None else None
        row = RegionSla(model, region, steady, steady_within,
                        {k: Count(v[0], v[1], dict(v[2])) for k, v in windows_count.items()},
                        dict(misses), traffic.percentile(ttfts, 50), traffic.percentile(ttfts, 99), near, expected,
                        sum(1 for r in recs if not r.ok))
        why = _why(row, target, errors, host)
        note = (notes or {}).get((model, region))
        if why and note:
            why += f"; the scheduler's plan says: {note}"
        out.append(dataclasses.replace(row, why=why))
    return out


def _why(row: RegionSla, target: Target, errors: collections.Counter, host: str) -> str:
    share = row.steady_share
    if share is None or share >= TARGET_SHARE or not row.misses:
        return ""
    cause, count = max(row.misses.items(), key=lambda kv: (kv[1], kv[0]))
    head = (f"{row.model}/{row.region}: {row.steady - row.steady_within} of {row.steady} steady-state requests "
            f"outside the SLA; most ({count}) ")
    near = row.nearest
    if cause == "failed":
        top = ", ".join(f"{n} x {e}" for e, n in errors.most_common(2))
        return head + f"failed: {top}"
    if cause == "max_rtt":
        if near is None:
            where = "no replica was ready"
        elif near.rtt_ms <= target.max_rtt_ms:  # one is in reach now: it was not ready when they came
            where = (f"one in reach is ready at the end ({near.region}, {near.rtt_ms:g} ms away), so they came while "
                     "none was (a preemption or loss, before its replacement was ready)")
        else:
            where = f"the nearest ready replica is {near.rtt_ms:g} ms away ({near.region})"
        return head + f"had no ready replica within max_rtt_ms {target.max_rtt_ms:g}: {where}"
    if cause == "tpot":
        return head + f"broke the TPOT target {target.tpot_ms:g} ms"
    # TTFT: set what the network and the prefill take against what the requests took.
    if near is None or row.expected_ms is None:
        return head + f"took longer than the TTFT target {target.ttft_ms:g} ms with no replica ready"
    budget = target.ttft_ms - row.expected_ms
    text = (head + f"took longer than the TTFT target {target.ttft_ms:g} ms: the nearest ready replica "
            f"({near.gpu_type} in {near.region}) is {near.rtt_ms:g} ms away and its prefill "
            f"{target.prefill_ms.get(near.gpu_type, 0.0):.1f} ms, leaving {budget:.0f} ms (the plan keeps "
            f"{target.headroom_ms:g} ms of it free)")
    if row.ttft_p50_ms is not None:
        over = row.ttft_p50_ms - row.expected_ms
        tail = row.ttft_p99_ms - row.expected_ms if row.ttft_p99_ms is not None else over
        text += (f"; the median request took {row.ttft_p50_ms:.0f} ms (p99 {row.ttft_p99_ms:.0f} ms), "
                 f"{over:.0f} ms ({tail:.0f} ms at p99) beyond the network and the prefill")
        where = f" on {host}" if host else ""
        if over > budget:
            text += (f": more than the {budget:.0f} ms left, spent in the demo's own hops (client SDK, edge router, "
                     f"emulator, all on this machine){where}")
        else:
            text += (f": the median fits, the tail does not: the demo's own processes stall{where} (a replica "
                     "nearer than this one would not remove that)")
    return text


@dataclasses.dataclass(frozen=True)
class FailureGroup:
    """Failed requests of one window, model, client region and error, with when they started
    (seconds from ``t0``)."""

    window: str
    model: str
    region: str
    error: str
    count: int
    first_s: float
    last_s: float


def failures(records: Iterable[traffic.Record], windows: Sequence[Window], t0: float) -> list[FailureGroup]:
    """Every failed request, grouped by (window, model, client region, error), in time order."""
    groups: dict[tuple[str, str, str, str], list[float]] = {}
    for r in records:
        if not r.ok:
            groups.setdefault((window_of(r, windows), r.model, r.region, r.error[:90]), []).append(r.started_s - t0)
    out = [FailureGroup(*key, len(ts), min(ts), max(ts)) for key, ts in groups.items()]
    return sorted(out, key=lambda g: (g.first_s, g.window, g.model, g.region))
