"""Figures the demo shows and reports, computed from the traffic recorder and the scheduler's and
router's status documents (pure functions: data in, rows out)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from meridian.demo import sla as sla_mod
from meridian.demo import traffic


@dataclasses.dataclass(frozen=True)
class RegionRow:
    region: str
    rps: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    failed: int
    total: int


def region_rows(records: Iterable[traffic.Record], window_s: float) -> list[RegionRow]:
    by_region: dict[str, list[traffic.Record]] = {}
    for r in records:
        by_region.setdefault(r.region, []).append(r)
    rows = []
    for region in sorted(by_region):
        recs = by_region[region]
        ttfts = [r.ttft_s * 1000 for r in recs if r.ok and r.ttft_s is not None]
        rows.append(RegionRow(region, len(recs) / window_s if window_s > 0 else 0.0,
                              traffic.percentile(ttfts, 50), traffic.percentile(ttfts, 99),
                              sum(1 for r in recs if not r.ok), len(recs)))
    return rows


def progress_line(records: Iterable[traffic.Record], window_s: float, warming: Iterable[str] = ()) -> str:
    """The demo's progress line: per model, each client region's rate and TTFT p99 over the window;
    a model in ``warming`` (its cold start: no answer yet) is named, its requests kept out."""
    by_model: dict[str, list[traffic.Record]] = {}
    for r in records:
        by_model.setdefault(r.model, []).append(r)
    cold = set(warming)
    parts = []
    for model in sorted(set(by_model) | cold):
        if model in cold:
            parts.append(f"{model}: cold start, no answer yet ({sum(1 for r in by_model.get(model, []) if not r.ok)} failed in the window)")
            continue
        rows = region_rows(by_model[model], window_s)
        parts.append(f"{model}: " + ", ".join(f"{r.region} {r.rps:.1f}rps p99 {r.ttft_p99_ms or 0:.0f}ms"
                                                for r in rows))
    return "; ".join(parts) or "no requests yet"


@dataclasses.dataclass(frozen=True)
class PlacementRow:
    model: str
    cloud: str
    region: str
    cluster: str
    gpu_type: str
    tier: str
    replicas: int
    gpus: int
    cost_per_hour_usd: float


def placement_rows(bill_now: Mapping) -> list[PlacementRow]:
    """Replicas by (model, cluster, pool) with their share of the bill, from the scheduler's bill
    (``GET /v1/cost``'s ``now``: ``meridian.cost`` prices them; lost clusters are not in it)."""
    rows = [PlacementRow(s["model"], s["cloud"], s["region"], s["cluster"], s["gpu_type"], s["tier"], s["replicas"],
                         s["gpus"], s["usd_per_hour"]) for s in bill_now.get("shares", [])]
    return sorted(rows, key=lambda r: (r.model, r.cloud, r.region, r.cluster, r.gpu_type, r.tier))


@dataclasses.dataclass(frozen=True)
class ClusterRow:
    cluster: str
    cloud: str
    region: str
    up: bool
    gpus_used: int
    gpus_total: int
    replicas_ready: int
    cost_per_hour_usd: float


def cluster_rows(status: Mapping, bill_now: Mapping | None = None) -> list[ClusterRow]:
    """A row per cluster; its $/h is its nodes' part of the scheduler's bill (0 for a lost cluster,
    which the bill leaves out)."""
    usd = {r["key"]: r["usd_per_hour"] for r in (bill_now or {}).get("by", {}).get("cluster", [])}
    out = []
    for c in status.get("clusters", []):
        pools = c.get("pool_details", [])
        total = sum(p.get("nodes_current", 0) * p.get("gpus_per_node", 0) for p in pools)
        free = sum(p.get("gpus_free", 0) for p in pools)
        out.append(ClusterRow(c.get("cluster_id", ""), c.get("cloud", ""), c.get("region", ""),
                              bool(c.get("connected")) and not c.get("lost"), total - free, total,
                              int(c.get("replicas", {}).get("ready", 0)), usd.get(c.get("cluster_id", ""), 0.0)))
    return out


def replicas_by_model_region(status: Mapping) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for c in status.get("clusters", []):
        if c.get("lost"):
            continue
        for r in c.get("replica_details", []):
            if r.get("state") == "ready":
                model = r.get("served_model_name") or r.get("deployment")
                out.setdefault(model, {}).setdefault(c.get("region", ""), 0)
                out[model][c.get("region", "")] += 1
    return out


@dataclasses.dataclass(frozen=True)
class ColdStart:
    """A model that started with no replica (scale to zero) and was scaled up by its first requests."""

    model: str
    ready_after_s: float | None  # from its first request to its first answer; None: never answered
    waited: int  # requests sent before the first answer (all of them when none came)
    missed: int  # of those, the ones outside the SLA
    first_answer_s: float | None = None  # wall time of the first answer


def cold_starts(records: Iterable[traffic.Record], models: Iterable[str], targets: Mapping[str, sla_mod.Target],
                reach: sla_mod.ReachLog) -> list[ColdStart]:
    """For each model of ``models`` (those with no replica when traffic began): how long its first
    requests waited. A replica was up by the first answer, so requests sent before it waited."""
    by_model: dict[str, list[traffic.Record]] = {}
    for r in records:
        by_model.setdefault(r.model, []).append(r)
    out = []
    for model in sorted(set(models)):
        mine = by_model.get(model, [])
        if not mine:
            continue
        answers = [r.started_s + r.ttft_s for r in mine if r.ok and r.ttft_s is not None]
        first_answer = min(answers) if answers else None
        early = [r for r in mine if first_answer is None or r.started_s < first_answer]
        target = targets.get(model)
        missed = sum(1 for r in early if target is None or sla_mod.judge(r, target, reach.at(r.started_s, model, r.region)))
        ready = None if first_answer is None else first_answer - min(r.started_s for r in mine)
        out.append(ColdStart(model, ready, len(early), missed, first_answer))
    return out


def failed_between(records: Iterable[traffic.Record], since: float, until: float | None = None) -> list[traffic.Record]:
    """Failed requests started at or after ``since`` (wall seconds) and before ``until`` (None: any time)."""
    return [r for r in records if not r.ok and r.started_s >= since and (until is None or r.started_s < until)]


def failure_reasons(records: Iterable[traffic.Record], top: int = 5) -> list[tuple[str, int]]:
    """The most common failure messages (first 90 characters), with counts."""
    counts: dict[str, int] = {}
    for r in records:
        if not r.ok:
            key = r.error[:90]
            counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
