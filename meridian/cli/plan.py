"""``meridian plan -f FILE...``: a dry run. Shows the placement the scheduler would make with these
specs, the diff against what runs now, cost per hour before and after, and SLA risks. Nothing is
stored. Exit 0 with a report, 1 when the specs are invalid or the scheduler is unreachable."""

from __future__ import annotations

import argparse

from meridian.cli import apply as apply_cmd
from meridian.cli import output
from scheduler.admin import client as admin_client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", dest="files", action="append", default=[], metavar="FILE",
                        help="YAML spec file (repeatable); none: plan the specs already applied")
    apply_cmd.add_connection_arguments(parser)


def render(report: dict) -> str:
    lines = [f"Plan against the {report['basis']}: {report['status']} in {report['solve_time_s']:.2f} s"]
    cost = report["cost_per_hour_usd"]
    delta = cost["after"] - cost["before"]
    lines.append(f"Cost per hour: ${cost['before']:.2f} -> ${cost['after']:.2f} ({'+' if delta >= 0 else '-'}"
                 f"${abs(delta):.2f})")
    if report.get("cost_floor"):
        lines.append(report["cost_floor"]["summary"])
    lines.append("Placement:")
    for dep, pools in sorted(report["placement"].items()):
        lines.append(f"  {dep}: " + ", ".join(f"{p} x{n}" for p, n in sorted(pools.items())))
    if not report["placement"]:
        lines.append("  (nothing placed)")
    lines.append("Changes against now:")
    for c in report["diff"]:
        sign = "+" if c["delta"] > 0 else "-"
        lines.append(f"  {sign} {c['deployment']} on {c['pool']}: {c['current']} -> {c['target']}")
    if not report["diff"]:
        lines.append("  (none)")
    lines.append("SLA risks:")
    lines += [f"  ! {r}" for r in report["risks"]] or ["  (none found)"]
    if report.get("changes"):
        # A dry run changes nothing: its actions read "would create" / "would configure" / "unchanged".
        lines.append("Spec changes (not applied): " + ", ".join(f"{c['kind']}/{c['name']} {c['action']}"
                                                                for c in report["changes"]))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        client = apply_cmd.connect(args)
        report = client.plan(client.read_files(args.files))
    except admin_client.AdminError as exc:
        return apply_cmd.report_error(exc, args.output)
    output.emit(report, args.output, lambda: render(report))
    return 0
