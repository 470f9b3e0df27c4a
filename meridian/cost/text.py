"""A cost document (``meridian.cost.document``) as text: the bill's lines, each labelled so a reader
knows which figure is the bill, and its tables by model, team, cloud and tier (``meridian.tables``).
``meridian cost``, the demo and the simulator print with this.

Amounts are shown in cents, apportioned (largest remainder) so that every printed column adds up to
the printed total, as the exact figures do."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from meridian import tables

IDLE_LABEL = "(idle GPUs)"
TOTAL_LABEL = "bill"


def apportion(values: Sequence[float], digits: int = 2, total: float | None = None) -> list[float]:
    """``values`` rounded to ``digits`` so that they sum to ``total`` (default: their own rounded sum),
    by the largest remainder: the rounding of the parts never disagrees with the rounding of the whole."""
    if not values:
        return []
    scale = 10 ** digits
    exact = [v * scale for v in values]
    floors = [math.floor(x + 1e-9) for x in exact]
    target = round((sum(values) if total is None else total) * scale)
    left = target - sum(floors)
    order = sorted(range(len(values)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:max(0, left)]:
        floors[i] += 1
    return [f / scale for f in floors]


def split(doc: Mapping) -> tuple[float, float, float]:
    """The bill, its shares and its idle part as printed (cents; shares + idle = bill)."""
    bill = doc["usd_per_hour"] if _per_hour(doc) else doc["usd"]
    shares = doc["shares_usd_per_hour"] if _per_hour(doc) else doc["shares_usd"]
    idle = doc["idle_usd_per_hour"] if _per_hour(doc) else doc["idle_usd"]
    shown = apportion([shares, idle], total=bill)
    return round(bill, 2), shown[0], shown[1]


def money(x: float) -> str:
    return f"${x:,.2f}"


def _per_hour(doc: Mapping) -> bool:
    return doc.get("kind") != "window"


def headline(doc: Mapping, floor: Mapping | None = None, *, what: str = "Bill now") -> list[str]:
    """The bill in three labelled lines (the bill; of it, the replicas' shares and the idle GPUs),
    then the cost per million tokens and the cost floor when given (a bound, not a bill)."""
    bill, shares, idle = split(doc)
    if _per_hour(doc):
        lines = [f"{what}: {money(bill)}/h: every billed node, node-hours x price as the clouds bill "
                 f"({doc['nodes']} node(s), {doc['gpus']} GPU(s){_pending(doc)})",
                 f"  of which replicas' shares: {money(shares)}/h ({doc['gpus_held']} GPU(s) held x their "
                 "pool's price per GPU)",
                 f"  and idle GPUs on paid nodes: {money(idle)}/h ({doc['idle_gpus']} GPU(s))"]
    else:
        lines = [f"{what}: {money(bill)} over {duration(doc['hours'])} (a mean of {money(doc['usd_per_hour'])}/h): "
                 f"every billed node, node-hours x price ({doc['node_hours']:,.3f} node-hours)",
                 f"  of which replicas' shares: {money(shares)} ({doc['held_gpu_hours']:,.3f} GPU-hours held)",
                 f"  and idle GPUs on paid nodes: {money(idle)} "
                 f"({doc['gpu_hours'] - doc['held_gpu_hours']:,.3f} GPU-hours)"]
    fleet = doc.get("per_million_tokens", {}).get("fleet", {})
    if fleet.get("usd_per_million_tokens") is not None:
        lines.append(f"  per million tokens served: {money(fleet['usd_per_million_tokens'])} (the bill over "
                     f"{_tokens_text(doc)})")
    if floor is not None:
        lines += floor_lines(floor)
    return lines


def floor_lines(floor: Mapping) -> list[str]:
    """The cost floor, labelled as a bound (not a bill), or why there is none."""
    if floor.get("usd_per_hour") is not None:
        return [f"{floor.get('summary') or 'Cost floor: ' + money(floor['usd_per_hour']) + '/h'} (a bound, not a bill)"]
    if floor.get("status"):
        return [f"Cost floor: {floor['status']}{': ' + floor['reason'] if floor.get('reason') else ''}"]
    return []


def duration(hours: float) -> str:
    """A window's length in words: seconds under two minutes, minutes under two hours, else hours."""
    seconds = hours * 3600
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{hours:,.1f} h"


def _pending(doc: Mapping) -> str:
    n = doc.get("nodes_pending", 0)
    return f", {n} of the nodes still provisioning" if n else ""


def _tokens_text(doc: Mapping) -> str:
    fleet = doc["per_million_tokens"]["fleet"]
    if _per_hour(doc):
        return f"{fleet['tokens_per_s']:,.0f} tokens/s"
    return f"{fleet['tokens']:,.0f} tokens"


def table(doc: Mapping, dim: str) -> str:
    """The bill by ``dim``: for model, deployment and team the replicas' shares, then the idle GPUs,
    which are nobody's; for cloud, tier, region, cluster and GPU type each row with its idle part.
    Either way the last row is the bill, and every column adds up to it as printed."""
    now = _per_hour(doc)
    rows = doc["by"][dim]
    owner = dim in ("model", "deployment", "team")
    amount, idle_key = ("usd_per_hour", "idle_usd_per_hour") if now else ("usd", "idle_usd")
    gpus_key, idle_gpus_key = ("gpus", "idle_gpus") if now else ("gpu_hours", "idle_gpu_hours")
    bill, shares, idle = split(doc)
    idle_gpus = doc["idle_gpus"] if now else doc["gpu_hours"] - doc["held_gpu_hours"]
    count = _count if now else _hours
    t = tables.table([dim.replace("_", " "), "GPUs" if now else "GPU-hours", "$/h" if now else "$", "share"],
                     right="numbers")
    per_model = owner and dim == "model"
    if per_model:
        t.add_column("tokens/s" if now else "tokens", justify="right")
        t.add_column("$/M tokens", justify="right")
    if not owner:
        t.add_column("idle GPUs" if now else "idle GPU-hours", justify="right")
        t.add_column("idle $/h" if now else "idle $", justify="right")
    if owner:
        usd = apportion([r[amount] for r in rows], total=shares) + [idle]
        whole = [r[amount] for r in rows] + [doc[idle_key]]
    else:
        usd = apportion([r[amount] for r in rows], total=bill)
        whole = [r[amount] for r in rows]
        idles = apportion([r[idle_key] for r in rows], total=idle)
    pct = apportion([100 * x / doc[amount] for x in whole], 1, total=100.0) if doc[amount] > 0 else [None] * len(whole)
    units = {m["model"]: m for m in doc.get("per_million_tokens", {}).get("models", [])}
    tokens_key = "tokens_per_s" if now else "tokens"
    for i, r in enumerate(rows):
        cells = [r["key"] or "-", count(r[gpus_key]), f"{usd[i]:,.2f}", _pct(pct[i])]
        if per_model:
            u = units.get(r["key"], {})
            cells += [f"{u.get(tokens_key, 0):,.0f}", _per_million(u.get("usd_per_million_tokens"))]
        if not owner:
            cells += [count(r[idle_gpus_key]), f"{idles[i]:,.2f}"]
        t.add_row(*cells, end_section=not owner and i == len(rows) - 1)
    if owner:
        cells = [IDLE_LABEL, count(idle_gpus), f"{idle:,.2f}", _pct(pct[-1])]
        t.add_row(*cells, *(["", ""] if per_model else []), end_section=True)
    total = [TOTAL_LABEL, count(doc[gpus_key]), f"{bill:,.2f}", _pct(100.0 if doc[amount] > 0 else None)]
    if per_model:
        fleet = doc["per_million_tokens"]["fleet"]
        total += [f"{fleet.get(tokens_key, 0):,.0f}", _per_million(fleet.get("usd_per_million_tokens"))]
    if not owner:
        total += [count(idle_gpus), f"{idle:,.2f}"]
    t.add_row(*total)
    return tables.render(t)


def _count(x: float) -> str:
    return f"{x:,.0f}"


def _hours(x: float) -> str:
    return f"{x:,.3f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _per_million(x: float | None) -> str:
    return "-" if x is None else money(x)


def report(doc: Mapping, floor: Mapping | None = None, *, dims: Sequence[str] = ("model", "team", "cloud", "tier"),
           what: str = "Bill now") -> str:
    """The headline, then a table per dimension."""
    out = headline(doc, floor, what=what)
    for dim in dims:
        out += ["", f"By {dim.replace('_', ' ')}:", table(doc, dim)]
    return "\n".join(out)
