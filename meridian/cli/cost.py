"""``meridian cost``: what the fleet bills, from the scheduler's ``GET /v1/cost``: the bill now
(node-hours x price as the clouds bill, idle GPUs included), each model's and team's share and the
idle GPUs apart, by cloud and tier, cost per million tokens served, the bill since the scheduler
leads, and the specs' cost floor beside it (a bound, not a bill). ``-o json|yaml`` prints the
whole document (docs/scheduler.md lists its fields). Exit 0, or 1 when the scheduler is unreachable."""

from __future__ import annotations

import argparse
import sys

from meridian import cost
from meridian.cli import apply as apply_cmd
from meridian.cli import output
from scheduler.admin import client as admin_client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--by", default="model,team,cloud,tier", metavar="DIMS",
                        help=f"tables to print, comma-separated, of {', '.join(cost.DIMS)} (default "
                             "model,team,cloud,tier)")
    parser.add_argument("--no-floor-wait", action="store_true",
                        help="do not wait for the cost floor's solve (it shows as computing)")
    apply_cmd.add_connection_arguments(parser)


def render(doc: dict, dims: list[str]) -> str:
    """The text of a ``GET /v1/cost`` answer."""
    lines = []
    if doc.get("note"):
        lines += [f"note: {doc['note']}", ""]
    lines.append(cost.text.report(doc["now"], doc.get("floor"), dims=dims))
    since = doc.get("since")
    if since and since.get("hours", 0) > 0:
        lines += ["", *cost.text.headline(since, what="Billed since this scheduler leads")]
    lost = doc.get("unreachable") or {}
    if lost.get("clusters"):
        lines += ["", f"Not in the bill: {', '.join(lost['clusters'])} (lost; last reported "
                      f"{cost.text.money(lost['usd_per_hour'])}/h of nodes, which their cloud may still bill)"]
    lines += ["", f"Idle nodes are given back after {doc.get('pool_scale_down_delay_s', 0):g} s "
                  "(the scheduler's pool_scale_down_delay_s), down to each pool's nodes_min."]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    dims = [d.strip() for d in args.by.split(",") if d.strip()]
    unknown = [d for d in dims if d not in cost.DIMS]
    if unknown:
        print(f"meridian cost: --by {','.join(unknown)}: not a dimension; use {', '.join(cost.DIMS)}", file=sys.stderr)
        return 2
    try:
        doc = apply_cmd.connect(args).cost(wait_floor=not args.no_floor_wait)
    except admin_client.AdminError as exc:
        return apply_cmd.report_error(exc, args.output)
    output.emit(doc, args.output, lambda: render(doc, dims))
    return 0
