"""The comparison as text (a table per concern) and as JSON, with the verdict the issue asks for:
does Meridian beat every baseline on cost at equal or better SLO attainment, and does its saving
against the on-demand multi-region row meet SkyServe's headline (43% cheaper than on-demand)."""

from __future__ import annotations

import math
import os
import platform

from meridian import cost, tables
from meridian.simulate import attainable as attainable_mod
from meridian.simulate import bound as bound_mod
from meridian.simulate import excess
from meridian.simulate import metrics, policies, runner
from meridian.simulate import windows as windows_mod
from scheduler.control import floor as floor_mod

SKYSERVE_HEADLINE_SAVING = 0.43
# SkyServe's 43% is against the same service on on-demand replicas, its rules kept: here the
# on-demand multi-region row (the single-region one breaks isolation and max_rtt_ms).
SKYSERVE_HEADLINE_BASELINE = "od-multi-region"
# Attainment differences smaller than this are "equal": the analytic tails are not finer than that.
ATTAINMENT_TOLERANCE = 0.0005


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{100.0 * x:.2f}%"


def attainment_text(x: float) -> str:
    """An SLO attainment, rounded down: 100.00% only when every request met the SLO, never beside a
    miss or a failure that rounding would hide."""
    if x is None or math.isnan(x):
        return "-"
    return f"{math.floor(10_000.0 * x + 1e-9) / 100.0:.2f}%"


def _counts(values: list[float], total: float) -> list[str]:
    """Request counts rounded so that they add up to ``total`` rounded (the parts of a table's row
    never disagree with its total)."""
    return [f"{n:,.0f}" for n in cost.text.apportion(values, 0, total=round(total))]


def _ms(x: float) -> str:
    if x is None or math.isnan(x):
        return "-"
    return f"{x / 1000.0:.1f}s" if x >= 10_000 else f"{x:.0f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return tables.text(header, rows, right="numbers").splitlines()


def verdicts(cmp: runner.Comparison, reference: str = "meridian") -> list[dict]:
    """Per baseline: cost saving of ``reference`` against it and attainment difference, and whether
    the reference beats it (cheaper at equal or better attainment)."""
    ref = cmp.result(reference)
    if ref is None:
        return []
    out = []
    for r in cmp.results:
        if r.policy == reference:
            continue
        saving = cost.saving(r.cost_usd, ref.cost_usd)
        delta = ref.total.attainment - r.total.attainment
        item = {"baseline": r.policy, "saving": saving, "attainment_delta": delta,
                "beats": bool(saving > 0 and delta >= -ATTAINMENT_TOLERANCE),
                "on_demand_only": r.policy in policies.ON_DEMAND_ONLY}
        if cmp.floor is not None and r.cost_per_hour_usd > 0:
            # The most any rule-keeping policy could save against this baseline; a baseline below the
            # floor breaks the specs' rules, and no policy that keeps them can be cheaper than it.
            item["max_saving"] = cost.saving(r.cost_per_hour_usd, cmp.floor.usd_per_hour)
            item["below_floor"] = bool(r.cost_per_hour_usd < cmp.floor.usd_per_hour)
        out.append(item)
    return out


def headline_verdict(v: list[dict]) -> dict | None:
    """SkyServe's headline judged on its like-for-like row (``SKYSERVE_HEADLINE_BASELINE``): met when
    Meridian saves at least ``SKYSERVE_HEADLINE_SAVING`` of that row's cost and beats it (at equal or
    better SLO attainment); None when that row was not run. ``v``: ``verdicts(...)``."""
    item = next((i for i in v if i["baseline"] == SKYSERVE_HEADLINE_BASELINE), None)
    if item is None:
        return None
    return {"baseline": item["baseline"], "saving": item["saving"], "attainment_delta": item["attainment_delta"],
            "met": bool(item["beats"] and item["saving"] >= SKYSERVE_HEADLINE_SAVING)}


def headline_text(h: dict) -> str:
    """The verdict of ``headline_verdict`` in words (the report's and the bench's line)."""
    if h["met"]:
        word = "met"
    elif h["saving"] >= SKYSERVE_HEADLINE_SAVING:
        word = f"not met: the saving is there but at {100.0 * h['attainment_delta']:+.3f} pp SLO attainment"
    else:
        word = "not met"
    return (f"saving against {h['baseline']}: {100.0 * h['saving']:+.1f}% (SkyServe's headline: "
            f"{100 * SKYSERVE_HEADLINE_SAVING:.0f}% against on-demand at equal or better SLO attainment; {word})")


def bill_lines(cmp: runner.Comparison) -> list[str]:
    """Each policy's bill over the run, split into the replicas' shares and the idle GPUs on paid
    nodes (``meridian.cost``), with its cost per million tokens served."""
    rows = []
    for r in cmp.results:
        b = r.bill
        if not b:
            continue
        shares, idle = cost.text.apportion([b["shares_usd"], b["idle_usd"]], 0, total=round(b["usd"]))
        unit = b["per_million_tokens"]["fleet"]["usd_per_million_tokens"]
        rows.append([r.policy, f"${round(b['usd']):,.0f}", f"${shares:,.0f}", f"${idle:,.0f}",
                     _pct(b["idle_usd"] / b["usd"] if b["usd"] > 0 else math.nan),
                     "-" if unit is None else f"${unit:,.2f}"])
    if not rows:
        return []
    return ["The bill over the run (shares: GPUs replicas held x their pool's price per GPU; idle: GPUs paid for "
            "and unused; shares + idle = cost):",
            *_table(["policy", "cost", "shares", "idle", "idle share", "$/M tokens"], rows)]


def floor_lines(cmp: runner.Comparison) -> list[str]:
    f = cmp.floor
    if f is None:
        return []
    lines = [floor_mod.headline(f.usd_per_hour, f.proven)]
    if f.unplaced:
        lines.append(f"  (the floor's own plan could not place: {', '.join(f.unplaced)})")
    ref = cmp.result("meridian")
    if ref is not None and f.usd_per_hour > 0:
        above = ref.cost_per_hour_usd - f.usd_per_hour
        lines.append(f"Meridian runs ${above:,.2f}/h above it ({100.0 * above / f.usd_per_hour:.1f}%): what "
                     f"serving the day's traffic costs beyond the rules.")
    return lines


def bound_lines(cmp: runner.Comparison) -> list[str]:
    """The demand-following bound, and how far above it Meridian runs."""
    b = cmp.bound
    if b is None:
        return []
    lines = [bound_mod.headline(b)]
    ref = cmp.result("meridian")
    if ref is not None and b.usd > 0:
        above = ref.cost_usd - b.usd
        lines.append(f"Meridian costs ${above:,.0f} above it over the run ({100.0 * above / b.usd:+.1f}% of the "
                     f"bound): what provisioning ahead of demand, headroom and faults cost.")
        split = above_bound(cmp)
        if split is not None:
            lines.append(excess.text(split))
        down = ref.stats.get("down_region_extra_usd", 0.0)
        if down >= excess.CENT:
            lines.append(f"Of Meridian's bill, {cost.text.money(down)} paid for nodes in regions while they were down, beyond the "
                         "pools' minimums: nodes it had there when a region went, which nobody can release until "
                         "it is back (the bound re-plans without them).")
        lines += fleet_lines(cmp)
    return lines


def fleet_against_bound(cmp: runner.Comparison, policy: str = "meridian") -> list[dict]:
    """Replica-hours per (deployment, GPU type, tier): ``policy``'s READY replicas against the
    demand-following bound's per-tick plans; empty without both."""
    r = cmp.result(policy)
    if cmp.bound is None or r is None or not cmp.bound.replica_hours:
        return []
    ran: dict[tuple[str, str, str], float] = {}
    for row in r.replica_hours():
        k = (row["deployment"], row["gpu_type"], row["tier"])
        ran[k] = ran.get(k, 0.0) + row["replica_hours"]
    return [{"deployment": d, "gpu_type": g, "tier": t, "replica_hours": round(ran.get((d, g, t), 0.0), 3),
             "bound_replica_hours": round(cmp.bound.replica_hours.get((d, g, t), 0.0), 3)}
            for d, g, t in sorted(set(ran) | set(cmp.bound.replica_hours))]


def fleet_lines(cmp: runner.Comparison) -> list[str]:
    """Where the distance to the bound sits: Meridian's replica-hours against the bound's fleet."""
    rows = fleet_against_bound(cmp)
    if not rows:
        return []
    body = [[r["deployment"], r["gpu_type"], r["tier"], f"{r['replica_hours']:,.1f}", f"{r['bound_replica_hours']:,.1f}",
             f"{r['replica_hours'] - r['bound_replica_hours']:+,.1f}"] for r in rows]
    return ["Replica-hours by deployment, GPU type and tier: Meridian's READY replicas against the bound's per-tick "
            "plans (replicas share nodes, so these are not dollars; headroom, spot credit, held replicas and "
            "re-placements show here):",
            *_table(["deployment", "GPU type", "tier", "meridian", "bound", "difference"], body)]


def above_bound(cmp: runner.Comparison, policy: str = "meridian") -> excess.AboveBound | None:
    """``policy``'s cost above the demand-following bound, split into its steady part and bursts
    (``excess``); None without the bound, the policy or its cost series."""
    r = cmp.result(policy)
    if cmp.bound is None or r is None or not cmp.bound.usd_by_tick or not r.series.get("cost_usd"):
        return None
    return excess.split(r.series["cost_usd"], cmp.bound.usd_by_tick, cmp.scenario.tick_s, metrics.SERIES_BUCKET_S,
                        cmp.scenario.start_utc_hour)


def text(cmp: runner.Comparison) -> str:
    sc = cmp.scenario
    lines = [f"Scenario {sc.name!r}: {sc.hours:g} h from {sc.start_utc_hour:g}:00 UTC, seed {sc.seed}, "
             f"tick {sc.tick_s:g} s, {cmp.requests:,} requests; {len(cmp.results)} policies in "
             f"{cmp.wall_s:.1f} s wall ({cmp.jobs} process(es)) on {_machine()}"]
    if sc.description:
        lines.append(sc.description)
    lines.append("")
    rows = []
    ref = cmp.result("meridian")
    for r in cmp.results:
        vs = "" if ref is None or r.policy == "meridian" else f"{100.0 * cost.saving(r.cost_usd, ref.cost_usd):+.1f}%"
        gpus = r.stats.get("gpus_mean", 0.0)
        spot = r.stats.get("spot_gpus_mean", 0.0) / gpus if gpus else math.nan
        rows.append([r.policy, r.routing, f"${r.cost_usd:,.0f}", f"${r.cost_per_hour_usd:,.2f}", vs,
                     attainment_text(r.total.attainment), f"{r.total.failed:,.0f}", _ms(r.total.ttft_p50_ms),
                     _ms(r.total.ttft_p99_ms), f"{gpus:.1f}", _pct(spot),
                     f"{r.stats.get('wall_s', 0.0):.1f}"])
    lines += _table(["policy", "routing", "cost", "$/h", "meridian saves", "SLO met", "failed", "TTFT p50 ms",
                     "TTFT p99 ms", "GPUs", "spot", "run s"], rows)
    lines.append(f"(cost: the bill, node-hours x price; meridian saves = {cost.SAVING_DEFINITION}, a share of that "
                 "row's cost; SLO met: share of all requests, failed ones included, rounded down; TTFT over "
                 "answered requests; spot: share of the GPUs billed)")
    lines += ["", *bill_lines(cmp)]
    regions = sorted({reg for r in cmp.results for reg in r.regions})
    lines += ["", "SLO attainment (share of the client region's requests) / failed requests (adding up to the "
                  "policy's total) / TTFT p50, p90, p99 (ms) per client region:"]
    rows = []
    for r in cmp.results:
        present = [reg for reg in regions if reg in r.regions]
        failed = _counts([r.regions[reg].failed for reg in present], r.total.failed)
        for reg, n in zip(present, failed, strict=True):
            g = r.regions[reg]
            rows.append([r.policy, reg, attainment_text(g.attainment), n, _ms(g.ttft_p50_ms),
                         _ms(g.ttft_p90_ms), _ms(g.ttft_p99_ms)])
    lines += _table(["policy", "client region", "SLO met", "failed", "p50", "p90", "p99"], rows)
    lines += ["", "Per deployment (SLO met: share of the deployment's requests / failed, adding up to the policy's "
                  "total):"]
    deps = sorted({d for r in cmp.results for d in r.deployments})
    rows = []
    for r in cmp.results:
        present = [d for d in deps if d in r.deployments]
        failed = dict(zip(present, _counts([r.deployments[d].failed for d in present], r.total.failed), strict=True))
        rows.append([r.policy, *[f"{attainment_text(r.deployments[d].attainment)} / {failed[d]}"
                                 if d in r.deployments else "-" for d in deps]])
    lines += _table(["policy", *deps], rows)
    if ref is not None:
        lines += ["", *region_lines(cmp, ref)]
    floor = floor_lines(cmp)
    if floor:
        lines += ["", *floor]
    lines += bound_lines(cmp)
    notes = [f"{r.policy}: {n}" for r in cmp.results for n in r.notes]
    if notes:
        lines += ["", *notes]
    v = verdicts(cmp)
    if v:
        lines += ["", "Meridian against each baseline (beats = cheaper at equal or better SLO attainment):"]
        for item in v:
            word = "beats" if item["beats"] else "does NOT beat"
            why = (" (below the specs' cost floor on average: it did not keep their rules throughout, and no "
                   "policy that does can be cheaper)" if item.get("below_floor") else "")
            lines.append(f"  {word} {item['baseline']}: saves {100.0 * item['saving']:+.1f}% of its cost, "
                         f"SLO attainment {100.0 * item['attainment_delta']:+.3f} pp{why}")
        od = [i for i in v if i["on_demand_only"]]
        if od:
            savings = ", ".join(f"{i['baseline']} {100 * i['saving']:.1f}%" for i in od)
            lines.append(f"  saving against the on-demand-only rows: {savings}")
        head = headline_verdict(v)
        if head is not None:
            lines.append(f"  {headline_text(head)}")
        if od and cmp.floor is not None:
            ceiling = ", ".join(f"{i['baseline']} {100 * i['max_saving']:.1f}%" for i in od if "max_saving" in i)
            lines.append(f"  the most any policy keeping the specs could save against them (cost floor): {ceiling}")
    return "\n".join(lines)


def region_lines(cmp: runner.Comparison, ref: metrics.RunResult) -> list[str]:
    """Meridian per deployment and client region: steady state apart from the windows, what the
    misses were, and every failure by cause, window and hour."""
    names = [w.name for w in windows_mod.from_scenario(cmp.scenario)]
    lines = [f"Meridian per deployment and client region (SLO: TTFT, TPOT and max_rtt_ms; steady state = outside "
             f"{len(names)} window(s), each until {windows_mod.RECOVERY_MIN:g} min after its fault or spike ends: "
             f"{', '.join(names) or 'none'}):"]
    views = metrics.region_view(ref)
    reach = cmp.attainable
    rows = [[v.deployment, v.region, f"{v.requests:,.0f}", attainment_text(v.attainment),
             attainment_text(reach[(v.deployment, v.region)].share) if (v.deployment, v.region) in reach else "-",
             f"{v.steady_requests:,.0f}",
             attainment_text(v.steady_attainment), attainment_text(v.window_attainment),
             ", ".join(f"{c} {x:.2%}" for c, x in sorted(v.steady_misses.items(), key=lambda kv: -kv[1])[:2]
                       if x >= 0.00005) or "-"]
            for v in views]
    lines += _table(["deployment", "client region", "requests", "SLO met", "attainable", "steady", "steady SLO met",
                     "in windows", "steady misses"], rows)
    target = metrics.REGION_TARGET_SHARE
    short = sorted(((k, r) for k, r in reach.items() if r.share < target), key=lambda kv: kv[0])
    lines += [f"  attainable: the share any fleet of the scenario's clusters could serve within SLO (the best pool within "
              f"reach, idle); under {100 * target:g}% for {d}/{region}: {_reach_text(r)}" for (d, region), r in short]
    low = [v.why for v in views if v.why]
    lines += ([f"Under {metrics.TARGET_SHARE:.0%} of steady-state requests within SLO, and why:"]
              + [f"  {w}" for w in low]) if low else [f"Every deployment and client region: at least "
                                                     f"{metrics.TARGET_SHARE:.0%} of steady-state requests within SLO."]
    lines += misses_lines(cmp, ref)
    counts = cost.text.apportion([n for *_, n in ref.failures], 0, total=round(ref.total.failed))
    moments = [(c, w, h, n) for (c, w, h, _), n in zip(ref.failures, counts, strict=True) if n > 0]
    if moments:
        lines += [f"Meridian's failed requests by cause, window and hour of the day (UTC from the start; "
                  f"{round(ref.total.failed):,} in all):"]
        lines += _table(["cause", "window", "hour", "requests"],
                        [[c, w, f"{(cmp.scenario.start_utc_hour + h) % 24:02.0f}:00", f"{n:,.0f}"]
                         for c, w, h, n in moments])
    return lines


def misses_text(rm: metrics.RegionMisses, windows: int = 3, causes: int = 2) -> str:
    """Where a client region's misses were: ``windows`` windows, the most missed first, each with
    its missed requests and its ``causes`` leading causes as shares of that window's misses."""
    parts = []
    for w in rm.windows[:windows]:
        # A stream that fails mid-way is a failure of the window it fails in, but the window it
        # arrived in loses the credit it had: a miss without a cause of its own there.
        later = w.missed - sum(w.causes.values())
        reasons = {metrics.CAUSE_WORDS[c]: n for c, n in w.causes.items()}
        if later >= 0.5:
            reasons["failed mid-stream in a later window"] = later
        total = sum(reasons.values())
        top = [(c, n) for c, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:causes]
               if n >= 0.005 * total]  # none that rounds to 0%
        why = ", ".join(f"{c} {n / total:.0%}" for c, n in top) if total > 0 else "-"
        parts.append(f"{w.window} {w.missed:,.0f} of {w.requests:,.0f} ({why})")
    rest = len(rm.windows) - windows
    return "; ".join(parts) + (f"; {rest} more window(s)" if rest > 0 else "")


def misses_lines(cmp: runner.Comparison, ref: metrics.RunResult) -> list[str]:
    """The client regions under ``metrics.REGION_TARGET_SHARE`` of their requests within SLO, and
    in which windows and for what they missed it."""
    target = metrics.REGION_TARGET_SHARE
    reach = attainable_mod.by_region(cmp.attainable, ref) if cmp.attainable else {}
    low = [rm for rm in metrics.region_misses(ref) if rm.requests > 0 and rm.attainment < target]
    if not low:
        return [f"Every client region: at least {attainment_text(target)} of its requests within SLO."]
    lines = [f"Client regions under {attainment_text(target)} of their requests within SLO, and where they missed "
             f"it (missed requests by window, the most first, failed ones included; causes as shares of the "
             f"window's misses):"]
    for rm in low:
        can = reach.get(rm.region)
        within = f" (attainable {attainment_text(can)})" if can is not None and can < target else ""
        lines.append(f"  {rm.region} {attainment_text(rm.attainment)}{within}: {rm.missed:,.0f} of "
                     f"{rm.requests:,.0f} requests missed: {misses_text(rm)}")
    return lines


def _reach_text(r) -> str:
    if not r.pool:
        return "no pool within reach can serve it"
    rest = ("its longer prompts take longer to prefill there than the TTFT target leaves" if r.binding == "ttft"
            else "a lone request's TPOT there exceeds the TPOT target for the rest")
    return f"{attainment_text(r.share)} at best, on {r.gpu_type} ({r.pool}, {r.rtt_ms:.1f} ms away): {rest}"


def as_dict(cmp: runner.Comparison, include_series: bool = True) -> dict:
    results = []
    for r in cmp.results:
        d = r.to_dict()
        if not include_series:
            d.pop("series", None)
        results.append(d)
    return {"scenario": cmp.scenario.name, "description": cmp.scenario.description,
            "saving_definition": cost.SAVING_DEFINITION,
            "hours": cmp.scenario.hours, "seed": cmp.scenario.seed,
            "tick_s": cmp.scenario.tick_s, "requests": cmp.requests, "wall_s": round(cmp.wall_s, 2),
            "jobs": cmp.jobs, "machine": _machine(), "results": results,
            "floor": cmp.floor.to_dict() if cmp.floor is not None else None,
            "demand_bound": cmp.bound.to_dict() if cmp.bound is not None else None,
            "meridian_above_bound": split.to_dict() if (split := above_bound(cmp)) is not None else None,
            "meridian_fleet_against_bound": fleet_against_bound(cmp),
            "meridian_region_misses": [rm.to_dict() for rm in metrics.region_misses(ref)]
            if (ref := cmp.result("meridian")) is not None else [],
            "attainable": [{"deployment": d, "client_region": r, **reach.to_dict()}
                           for (d, r), reach in sorted(cmp.attainable.items())],
            "verdicts": [{k: (round(v, 5) if isinstance(v, float) else v) for k, v in item.items()}
                         for item in verdicts(cmp)],
            "skyserve_headline": headline_verdict(verdicts(cmp))}


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cores} core(s), {cpu}"
