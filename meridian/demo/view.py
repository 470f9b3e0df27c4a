"""The demo's live terminal view and its final report, rendered as text from the figures in
``meridian.demo.stats`` (no I/O here: the runner decides where the text goes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from meridian import cost
from meridian.demo import stats


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells[1:]]
    return "\n".join(lines)


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


def report(placement: Sequence[stats.PlacementRow], attainment: Sequence[stats.AttainmentRow],
           total: int, failed: int, timings: Mapping[str, float | None], events: Sequence[str],
           slas: Mapping[str, stats.Sla], failures: Sequence[tuple[str, int]] = (),
           cold: Sequence[stats.ColdStart] = (), bill: Mapping | None = None) -> str:
    """The end-of-run report (``bill``: the scheduler's ``GET /v1/cost`` answer at the end)."""
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
    out.append("SLA attainment (requests within the model's p99 TTFT and TPOT targets):")
    out.append(table(["model", "client region", "SLA TTFT/TPOT ms", "requests", "within SLA", "failed"],
                     [(a.model, a.region, _sla_text(slas.get(a.model)), a.requests, f"{a.attainment:.1%}", a.failed)
                      for a in attainment] or [("-",) * 6]))
    for c in cold:
        if c.ready_after_s is None:
            out.append(f"{c.model} started with no replica (scale to zero) and never answered: none of its "
                       f"{c.waited} request(s) got a replica")
            continue
        out.append(f"{c.model} started with no replica (scale to zero): its first answer came {c.ready_after_s:.1f} s "
                   f"after its first request; {c.waited} request(s) were sent before that answer, most waiting for "
                   f"a replica to start ({c.missed} of them outside the SLA, counted above)")
    out.append("")
    share = failed / total if total else 0.0
    out.append(f"requests: {total} sent, {failed} failed ({share:.2%})")
    for reason, count in failures:
        out.append(f"  {count:5d} x {reason}")
    for name, value in timings.items():
        out.append(f"{name}: {'not observed' if value is None else f'{value:.1f} s'}")
    if events:
        out.append("")
        out.append("timeline:")
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


def _sla_text(sla: stats.Sla | None) -> str:
    if sla is None:
        return "-"
    return f"{sla.ttft_ms:.0f}/{sla.tpot_ms:.0f}" if sla.tpot_ms else f"{sla.ttft_ms:.0f}/-"
