"""``python -m bench.simulate``: the simulator's policy comparison on each scenario, synthetic and
replayed, against the demand-following bound and SkyServe's headline, and how long it takes here.

By default it runs the default day and the SkyServe-like day (``examples/scenarios/``), each with
its synthetic (Poisson, diurnal) traffic and with the Azure LLM conversation trace 2023 replayed
(``--trace``, tiled and shifted to each client region's local time, scaled to the same rates). Per
run: each policy's cost, SLO attainment over all requests and in its worst client region; Meridian
against the demand-following bound (target: within 10% at >= 99.5% SLO attainment in every client
region), against ``skyserve`` (target: cheaper at equal or higher attainment) and its saving against
``od-multi-region`` judged against SkyServe's published 43% (``report.headline_verdict``).
Each run is repeated over ``--seeds`` days (default 3: the scenario's seed and the next two), and
each scenario and traffic gets a line over its seeds (mean, range, on how many seeds each target
held): one seed's day can sit far from the others (the SkyServe-like fleet's seed 7 was $13/h
cheaper than seeds 8 and 9). ``--full`` adds ``meridian simulate``'s whole report per run."""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from collections.abc import Callable

from meridian import cost, progress
from meridian.simulate import attainable, defaults, excess, metrics, policies, report, runner, scenario

SCENARIOS = ("default", str(defaults.examples_dir() / "scenarios" / "skyserve-like.yaml"))
TRACE = "azure-conv"
BOUND_TARGET = 0.10  # Meridian within 10% of the demand-following bound
REGION_SLO_TARGET = metrics.REGION_TARGET_SHARE  # at >= 99.5% SLO attainment in every client region


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def min_region(r) -> tuple[str, float]:
    """The client region with the lowest SLO attainment of a result, and that attainment."""
    worst = min(r.regions.items(), key=lambda kv: (kv[1].attainment, kv[0]))
    return worst[0], worst[1].attainment


def summary(cmp: runner.Comparison, traffic: str) -> dict:
    """The bench's figures of one comparison (what the table and the JSON print)."""
    rows = []
    for r in cmp.results:
        region, worst = min_region(r)
        rows.append({"policy": r.policy, "cost_usd": r.cost_usd, "usd_per_hour": r.cost_per_hour_usd,
                     "slo": r.total.attainment, "min_region": region, "min_region_slo": worst,
                     "failed": r.total.failed})
    out: dict = {"scenario": cmp.scenario.name, "traffic": traffic, "seed": cmp.scenario.seed,
                 "hours": cmp.scenario.hours, "requests": cmp.requests, "rows": rows}
    mer, sky, od = (cmp.result(n) for n in ("meridian", "skyserve", "od-multi-region"))
    if cmp.bound is not None:
        out["bound_usd_per_hour"] = cmp.bound.usd_per_hour
        out["bound_proven"] = cmp.bound.proven
    if cmp.floor is not None:
        out["floor_usd_per_hour"] = cmp.floor.usd_per_hour
    if mer is not None and cmp.bound is not None and cmp.bound.usd > 0:
        above = mer.cost_usd / cmp.bound.usd - 1.0
        worst = min_region(mer)[1]
        out["meridian_above_bound"] = above
        split = report.above_bound(cmp)
        if split is not None:
            out["above_bound_split"] = split.to_dict()
        out["down_region_extra_usd"] = mer.stats.get("down_region_extra_usd", 0.0)
        out["bound_target_met"] = bool(above <= BOUND_TARGET and worst >= REGION_SLO_TARGET)
        # The same target against what the region can attain at all (attainable.py): 99.5% of the
        # requests any fleet of the scenario's clusters could serve within SLO.
        reach = attainable.by_region(cmp.attainable, mer)
        judged = {region: (g.attainment, reach.get(region, 1.0)) for region, g in mer.regions.items()}
        region, (att, can) = min(judged.items(), key=lambda kv: (kv[1][0] - REGION_SLO_TARGET * kv[1][1], kv[0]))
        out["worst_vs_attainable"] = {"region": region, "slo": att, "attainable": can}
        # Where the worst region missed: which windows, for what (the report's per-region lines).
        rm = next(m for m in metrics.region_misses(mer) if m.region == region)
        out["worst_region_misses"] = {"text": report.misses_text(rm), **rm.to_dict()}
        out["bound_target_met_vs_attainable"] = bool(
            above <= BOUND_TARGET and all(a >= REGION_SLO_TARGET * c for a, c in judged.values()))
    if mer is not None and sky is not None:
        out["saving_vs_skyserve"] = cost.saving(sky.cost_usd, mer.cost_usd)
        out["skyserve_target_met"] = bool(
            mer.cost_usd < sky.cost_usd and mer.total.attainment >= sky.total.attainment - report.ATTAINMENT_TOLERANCE
            and min_region(mer)[1] >= min_region(sky)[1] - report.ATTAINMENT_TOLERANCE)
    if mer is not None and od is not None:
        out["saving_vs_od_multi_region"] = cost.saving(od.cost_usd, mer.cost_usd)
        head = report.headline_verdict(report.verdicts(cmp))
        if head is not None:
            out["skyserve_headline"] = head
    return out


def lines(s: dict) -> list[str]:
    head = f"{s['scenario']} / {s['traffic']} (seed {s['seed']}, {s['requests']:,} requests)"
    rows = [[r["policy"], f"${r['usd_per_hour']:,.2f}", report.attainment_text(r["slo"]),
             f"{report.attainment_text(r['min_region_slo'])} ({r['min_region']})", f"{r['failed']:,.0f}"]
            for r in s["rows"]]
    out = [head, *report._table(["policy", "$/h", "SLO met (all)", "SLO met, worst client region", "failed"], rows)]
    if "bound_usd_per_hour" in s:
        out.append(f"  demand-following bound ${s['bound_usd_per_hour']:,.2f}/h"
                   f"{'' if s['bound_proven'] else ' (not proven on every tick)'}; cost floor "
                   f"${s.get('floor_usd_per_hour', float('nan')):,.2f}/h")
    if "meridian_above_bound" in s:
        out.append(f"  meridian vs the bound: {100 * s['meridian_above_bound']:+.1f}% (target: within "
                   f"{100 * BOUND_TARGET:.0f}% at >= {100 * REGION_SLO_TARGET:.1f}% in every client region): "
                   f"{'met' if s['bound_target_met'] else 'NOT met'}")
    if "above_bound_split" in s:
        a = s["above_bound_split"]
        hours = ", ".join(f"{h['utc_hour']:02d}:00 ${h['usd']:,.0f}" for h in a["hours"])
        share = f"{100 * a['burst_usd'] / a['usd']:.0f}%" if a["usd"] > 0 else "-"
        out.append(f"  meridian above the bound: ${a['usd']:,.0f} = steady ${a['steady_usd']:,.0f} (up to the median "
                   f"5-minute distance, ${a['median_usd_per_hour']:,.2f}/h) + bursts ${a['burst_usd']:,.0f} ({share}); "
                   f"costliest hours (UTC): {hours or '-'}")
    if s.get("down_region_extra_usd", 0.0) >= excess.CENT:
        out.append(f"  of meridian's bill, {cost.text.money(s['down_region_extra_usd'])} paid for nodes in regions "
                   "while they were down, beyond the pools' minimums (the bound re-plans without them)")
    if "worst_vs_attainable" in s:
        w = s["worst_vs_attainable"]
        out.append(f"  against what is attainable (the share of requests any fleet of these clusters could serve within "
                   f"SLO): worst {w['region']} {report.attainment_text(w['slo'])} of "
                   f"{report.attainment_text(w['attainable'])} attainable; target within {100 * BOUND_TARGET:.0f}% of "
                   f"the bound at >= {100 * REGION_SLO_TARGET:.1f}% of the attainable share in every client region: "
                   f"{'met' if s['bound_target_met_vs_attainable'] else 'NOT met'}")
    if s.get("worst_region_misses", {}).get("windows"):
        m = s["worst_region_misses"]
        out.append(f"  {m['client_region']}'s misses ({m['missed']:,.0f} of {m['requests']:,.0f} requests), by window: "
                   f"{m['text']}")
    if "saving_vs_skyserve" in s:
        out.append(f"  meridian vs skyserve: saves {100 * s['saving_vs_skyserve']:+.1f}% of its cost (target: "
                   f"cheaper at equal or higher SLO attainment, all and worst region): "
                   f"{'met' if s['skyserve_target_met'] else 'NOT met'}")
    if "skyserve_headline" in s:
        out.append(f"  {report.headline_text(s['skyserve_headline'])}")
    return out


def _span(values: list[float], fmt: Callable[[float], str]) -> str:
    """Mean and range of ``values`` in ``fmt``: 'mean (lo..hi)', or the one value."""
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(sum(values) / len(values))} ({fmt(min(values))}..{fmt(max(values))})"


def over_seeds(runs: list[dict]) -> dict:
    """One scenario and traffic over its seeds' summaries: Meridian's mean $/h, its distance to the
    bound, its worst client region and on how many seeds each target held."""
    mer = [next(r for r in s["rows"] if r["policy"] == "meridian") for s in runs
           if any(r["policy"] == "meridian" for r in s["rows"])]
    out: dict = {"scenario": runs[0]["scenario"], "traffic": runs[0]["traffic"],
                 "seeds": [s["seed"] for s in runs]}
    if mer:
        out["meridian_usd_per_hour"] = [r["usd_per_hour"] for r in mer]
        out["meridian_slo"] = [r["slo"] for r in mer]
        out["meridian_min_region_slo"] = [r["min_region_slo"] for r in mer]
    for key in ("bound_usd_per_hour", "meridian_above_bound", "saving_vs_skyserve", "saving_vs_od_multi_region"):
        vals = [s[key] for s in runs if key in s]
        if vals:
            out[key] = vals
    split = [(s["above_bound_split"], s["hours"]) for s in runs if "above_bound_split" in s]
    if split:
        out["steady_above_bound_usd_per_hour"] = [a["steady_usd"] / hours for a, hours in split]
        out["burst_above_bound_usd_per_hour"] = [a["burst_usd"] / hours for a, hours in split]
    for key in ("bound_target_met", "bound_target_met_vs_attainable", "skyserve_target_met"):
        vals = [s[key] for s in runs if key in s]
        if vals:
            out[key] = f"{sum(vals)}/{len(vals)}"
    heads = [s["skyserve_headline"]["met"] for s in runs if "skyserve_headline" in s]
    if heads:
        out["skyserve_headline_met"] = f"{sum(heads)}/{len(heads)}"
    return out


def _usd(v: float) -> str:
    return f"${v:,.2f}"


def _signed_pct(v: float) -> str:
    return f"{100 * v:+.1f}%"


def seed_lines(a: dict) -> list[str]:
    seeds = a["seeds"]
    out = [f"{a['scenario']} / {a['traffic']}, over seeds {seeds[0]}-{seeds[-1]} (mean (range)):"]
    if "meridian_usd_per_hour" in a:
        out.append(f"  meridian {_span(a['meridian_usd_per_hour'], _usd)}/h; SLO met (all) "
                   f"{_span(a['meridian_slo'], report.attainment_text)}; worst client region "
                   f"{_span(a['meridian_min_region_slo'], report.attainment_text)}")
    if "bound_usd_per_hour" in a:
        out.append(f"  demand-following bound {_span(a['bound_usd_per_hour'], _usd)}/h; meridian "
                   f"vs the bound {_span(a['meridian_above_bound'], _signed_pct)}")
    if "steady_above_bound_usd_per_hour" in a:
        out.append(f"  meridian above the bound, per hour of the run: steady "
                   f"{_span(a['steady_above_bound_usd_per_hour'], _usd)}/h + bursts "
                   f"{_span(a['burst_above_bound_usd_per_hour'], _usd)}/h")
    held = [f"{label} {a[key]}" for key, label in (
        ("bound_target_met", "within 10% of the bound at >= 99.5% per region"),
        ("bound_target_met_vs_attainable", "the same against the attainable share"),
        ("skyserve_target_met", "cheaper than skyserve at equal or higher SLO attainment"),
        ("skyserve_headline_met", "SkyServe's 43% headline")) if key in a]
    if "saving_vs_skyserve" in a:
        out.append(f"  saves {_span(a['saving_vs_skyserve'], _signed_pct)} against skyserve, "
                   f"{_span(a.get('saving_vs_od_multi_region', [math.nan]), _signed_pct)} against "
                   "od-multi-region (SkyServe's published saving: 43%)")
    if held:
        out.append(f"  seeds on which each target held: {'; '.join(held)}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", default=None, metavar="default|FILE",
                        help="scenario(s) to run (default: the default day and examples/scenarios/skyserve-like.yaml)")
    parser.add_argument("--trace", default=TRACE, help=f"trace replayed beside the synthetic day (default {TRACE}; "
                                                        "'none': synthetic only)")
    parser.add_argument("--no-synthetic", action="store_true", help="run the trace replay only")
    parser.add_argument("--hours", type=float, default=None)
    parser.add_argument("--seeds", type=int, default=3,
                        help="days to simulate per scenario and traffic, with seeds seed..seed+N-1 (default 3)")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--policies", default=",".join(policies.DEFAULT))
    parser.add_argument("--full", action="store_true", help="print meridian simulate's whole report per run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    runner.quiet_components()
    names = [n for n in args.policies.split(",") if n]
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    results = []
    groups = []
    for name in args.scenario or SCENARIOS:
        kinds = (*(() if args.no_synthetic else ("synthetic",)), *(() if args.trace == "none" else (args.trace,)))
        for traffic in kinds:
            base = scenario.load(name).with_overrides(hours=args.hours,
                                                      trace=None if traffic == "synthetic" else traffic)
            group = []
            for i in progress.track(range(args.seeds), f"bench.simulate: {name} / {traffic}", unit="seeds"):
                sc = base.with_overrides(seed=base.seed + i)
                print(f"running {sc.name} / {traffic} seed {sc.seed} ...", file=sys.stderr, flush=True)
                wall, cpu = time.perf_counter(), _cpu_s()
                cmp = runner.run(sc, names, jobs=args.jobs)
                s = summary(cmp, traffic)
                s.update(wall_s=round(time.perf_counter() - wall, 1), cpu_s=round(_cpu_s() - cpu, 1),
                         load_avg=[round(x, 2) for x in os.getloadavg()],
                         bound_solve_s=round(cmp.bound.solve_s, 1) if cmp.bound else None)
                results.append((cmp, s))
                group.append(s)
                if not args.json:
                    if args.full:
                        print(report.text(cmp), end="\n\n")
                    print("\n".join(lines(s)))
                    print(f"  time: {s['wall_s']:.1f} s wall, {s['cpu_s']:.1f} s CPU (bound: {s['bound_solve_s']} s), "
                          f"load average {' '.join(map(str, s['load_avg']))}, on {report._machine()}\n", flush=True)
            groups.append(over_seeds(group))
    if not args.json and args.seeds > 1:
        print("Over the seeds (each scenario and traffic):\n")
        for a in groups:
            print("\n".join(seed_lines(a)) + "\n", flush=True)
    if args.json:
        json.dump({"runs": [s for _, s in results], "over_seeds": groups}, sys.stdout)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
