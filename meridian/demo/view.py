"""The demo's live terminal view and its final report, rendered as text from the figures in
``meridian.demo.stats`` (no I/O here: the runner decides where the text goes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meridian import cost, tables
from meridian.demo import sla, stats


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    return tables.text(headers, rows)


def bill_line(bill: Mapping | None) -> str:
    """The bill in one line, labelled: the bill, its shares and idle part, and the floor beside it."""
    if not bill or not bill.get("now"):
        return "bill: not known yet"
    total, shares, idle = cost.text.split(bill["now"])
    floor = (bill.get("floor") or {}).get("usd_per_hour")
    beside = f"   cost floor {cost.text.money(floor)}/h (a bound, not a bill)" if floor is not None else ""
    return (f"bill {cost.text.money(total)}/h (nodes x price) = replicas' shares {cost.text.money(shares)}/h "
            f"+ idle GPUs {cost.text.money(idle)}/h{beside}")


def bill_short(bill: Mapping | None) -> str:
    """The bill and its idle part, for a progress line."""
    if not bill or not bill.get("now"):
        return "bill -"
    total, _, idle = cost.text.split(bill["now"])
    return f"bill {cost.text.money(total)}/h (idle GPUs {cost.text.money(idle)}/h)"


def frame(elapsed_s: float, duration_s: float, phase: str, status: Mapping, regions: Sequence[stats.RegionRow],
          events: Sequence[str], bill: Mapping | None = None) -> str:
    """One screen of the live view (``bill``: the scheduler's ``GET /v1/cost`` answer)."""
    clusters = stats.cluster_rows(status, (bill or {}).get("now"))
    out = [f"Meridian demo  t={elapsed_s:5.0f}s / {duration_s:.0f}s   phase: {phase}   "
           f"routing v{status.get('routing_version', '-')}", bill_line(bill), ""]
    total = cost.text.split(bill["now"])[0] if bill and bill.get("now") else None
    usd = cost.text.apportion([c.cost_per_hour_usd for c in clusters], total=total)
    out.append(table(["cluster", "cloud", "region", "up", "GPUs used/total", "ready", "bill $/h"],
                     [(c.cluster, c.cloud, c.region, "yes" if c.up else "LOST", f"{c.gpus_used}/{c.gpus_total}",
                       c.replicas_ready, f"{u:,.2f}") for c, u in zip(clusters, usd, strict=True)]))
    out.append("")
    by_model = stats.replicas_by_model_region(status)
    out.append(table(["model", "ready replicas by region"],
                     [(m, ", ".join(f"{r}:{n}" for r, n in sorted(regs.items()))) for m, regs in sorted(by_model.items())]
                     or [("-", "none yet")]))
    out.append("")
    out.append(table(["client region", "req/s", "TTFT p50 ms", "TTFT p99 ms", "failed"],
                     [(r.region, f"{r.rps:.1f}", _ms(r.ttft_p50_ms), _ms(r.ttft_p99_ms), r.failed) for r in regions]))
    if events:
        out.append("")
        out.append("events:")
        out.extend(f"  {e}" for e in events[-6:])
    return "\n".join(out)


def report(placement: Sequence[stats.PlacementRow], regions: Sequence[sla.RegionSla],
           total: int, failed: int, timings: Mapping[str, float | None], events: Sequence[str],
           targets: Mapping[str, sla.Target], failures: Sequence[tuple[str, int]] = (),
           cold: Sequence[stats.ColdStart] = (), bill: Mapping | None = None,
           windows: Sequence[sla.Window] = (), failed_groups: Sequence[sla.FailureGroup] = (),
           t0: float = 0.0) -> str:
    """The end-of-run report (``bill``: the scheduler's ``GET /v1/cost`` answer at the end; ``t0``: the
    wall time traffic started, for the windows' times)."""
    out = ["", "=" * 78, "Meridian demo report", "=" * 78, "",
           "Placement at the end (share: the GPUs held x their pool's price per GPU, a part of the bill):"]
    shares = cost.text.split(bill["now"])[1] if bill and bill.get("now") else None
    usd = cost.text.apportion([p.cost_per_hour_usd for p in placement], total=shares)
    out.append(table(["model", "cloud", "region", "cluster", "GPU", "tier", "replicas", "GPUs", "share $/h"],
                     [(p.model, p.cloud, p.region, p.cluster, p.gpu_type, p.tier, p.replicas, p.gpus, f"{u:,.2f}")
                      for p, u in zip(placement, usd, strict=True)] or [("-",) * 9]))
    out.append(f"{sum(p.gpus for p in placement)} GPUs held in {len({p.region for p in placement})} regions on "
               f"{len({p.cloud for p in placement})} clouds")
    out += ["", *bill_lines(bill), ""]
    out.append("SLA per model and client region (each request judged by its model's TTFT and TPOT targets and, "
               "with max_rtt_ms, a ready replica within it; steady state = outside the windows below):")
    out.append(table(["model", "client region", "SLA TTFT/TPOT/RTT ms", "steady", "within SLA", "all requests",
                      "within SLA", "failed", "TTFT p50/p99 ms", "nearest replica"],
                     [(r.model, r.region, _sla_text(targets.get(r.model)), r.steady, _share(r.steady_within, r.steady),
                       r.requests, _share(r.within, r.requests), r.failed,
                       f"{_ms(r.ttft_p50_ms)}/{_ms(r.ttft_p99_ms)}",
                       f"{r.nearest.gpu_type} {r.nearest.region} {r.nearest.rtt_ms:g} ms" if r.nearest else "-")
                      for r in regions] or [("-",) * 10]))
    low = [r for r in regions if r.why]
    if low:
        out.append(f"Regions under {sla.TARGET_SHARE:.0%} of steady-state requests within SLA, and why:")
        out.extend(f"  {r.why}" for r in low)
    else:
        out.append(f"Every model and client region: at least {sla.TARGET_SHARE:.0%} of steady-state requests "
                   "within SLA.")
    for c in cold:
        if c.ready_after_s is None:
            out.append(f"{c.model} started with no replica (scale to zero) and never answered: none of its "
                       f"{c.waited} request(s) got a replica")
            continue
        out.append(f"{c.model} started with no replica (scale to zero): its first answer came {c.ready_after_s:.1f} s "
                   f"after its first request; {c.waited} request(s) were sent before that answer, most waiting for "
                   f"a replica to start ({c.missed} of them outside the SLA, counted in its cold-start window)")
    if windows:
        out.append("")
        out.append("Windows (not steady state; t from the start of traffic; a request counts in the first that holds "
                   "it):")
        by_name: dict[str, list[sla.Window]] = {}
        for w in windows:
            by_name.setdefault(w.name, []).append(w)
        for name, ws in by_name.items():
            n, ok, misses = _window_counts(regions, name)
            ends = ", ".join(f"{_who(w)} {w.end_s - t0:.1f} s" for w in ws if _who(w))
            span = f"t={min(w.start_s for w in ws) - t0:.1f}-{max(w.end_s for w in ws) - t0:.1f} s"
            why = ", ".join(f"{k} {v}" for k, v in sorted(misses.items(), key=lambda kv: -kv[1]))
            out.append(f"  {name}: {span}{' (ends: ' + ends + ')' if ends and len(ws) > 1 else ''}: {n} request(s), "
                       f"{_share(ok, n)} within SLA{' (misses: ' + why + ')' if why else ''}")
    out.append("")
    share = failed / total if total else 0.0
    out.append(f"requests: {total} sent, {failed} failed ({share:.2%})")
    for reason, count in failures:
        out.append(f"  {count:5d} x {reason}")
    if failed_groups:
        out.append("Every failed request, by window, model, client region and error (t from the start of traffic):")
        out.append(table(["window", "model", "client region", "failed", "started t=", "error"],
                         [(g.window, g.model, g.region, g.count,
                           f"{g.first_s:.1f} s" if g.count == 1 else f"{g.first_s:.1f}-{g.last_s:.1f} s", g.error)
                          for g in failed_groups]))
    for name, value in timings.items():
        out.append(f"{name}: {'not observed' if value is None else f'{value:.1f} s'}")
    if events:
        out.append("")
        out.append("timeline (t = seconds since traffic started, as everywhere in this report; setup is "
                   "before 0):")
        out.extend(f"  {e}" for e in events)
    return "\n".join(out)


def bill_lines(bill: Mapping | None) -> list[str]:
    """The bill at the end (which figure is the bill, its shares and idle part under it, by model and
    team), the floor beside it, and what the run billed since the scheduler leads."""
    if not bill or not bill.get("now"):
        return ["bill: the scheduler did not answer GET /v1/cost"]
    out = cost.text.headline(bill["now"], bill.get("floor"), what="Bill at the end")
    out += ["", "By model:", cost.text.table(bill["now"], "model"), "", "By team:", cost.text.table(bill["now"], "team"),
            "", "By cluster:", cost.text.table(bill["now"], "cluster"), ""]
    since = bill.get("since")
    if since and since.get("hours", 0) > 0:
        out += cost.text.headline(since, what="Billed over the run (since the scheduler took the lead)")
    lost = bill.get("unreachable") or {}
    if lost.get("clusters"):
        out.append(f"Not in the bill: {', '.join(lost['clusters'])} (lost; its nodes, last reported at "
                   f"{cost.text.money(lost['usd_per_hour'])}/h, may still bill at its cloud)")
    out.append(f"Idle nodes are given back after {bill.get('pool_scale_down_delay_s', 0):g} s idle "
               "(pool_scale_down_delay_s), down to each pool's nodes_min.")
    return out


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _window_counts(regions: Sequence[sla.RegionSla], name: str) -> tuple[int, int, dict[str, int]]:
    counts = [r.windows[name] for r in regions if name in r.windows]
    misses: dict[str, int] = {}
    for c in counts:
        for k, v in c.misses.items():
            misses[k] = misses.get(k, 0) + v
    return sum(c.requests for c in counts), sum(c.within for c in counts), misses


def _who(w: sla.Window) -> str:
    models = "/".join(sorted(w.models))
    regions = "/".join(sorted(w.regions))
    return f"{models}{' ' + regions if regions else ''}"


def _sla_text(target: sla.Target | None) -> str:
    if target is None:
        return "-"
    parts = [f"{target.ttft_ms:.0f}", f"{target.tpot_ms:.0f}" if target.tpot_ms else "-",
             f"{target.max_rtt_ms:.0f}" if target.max_rtt_ms else "-"]
    return "/".join(parts)
