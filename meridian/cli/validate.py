"""``meridian validate FILE...``: check spec files as one set; print every error with its file,
line, field path and a suggestion. Exit 0 when valid, 1 when not.

``--cost-floor`` also prints the least any fleet that keeps the specs' rules can cost per hour, and
the plan that costs it (``scheduler.control.floor``): what the rules alone commit to, before traffic."""

from __future__ import annotations

import argparse
import json
import sys

from meridian import spec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="YAML spec files (several documents each)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text")
    parser.add_argument("--cost-floor", action="store_true",
                        help="also solve for the cheapest fleet the specs' rules allow (needs the Cluster specs)")


def run(args: argparse.Namespace) -> int:
    try:
        result = spec.load_files(args.files)
    except spec.SpecError as exc:
        if args.output == "json":
            json.dump({"valid": False, "errors": [i.to_dict() for i in exc.issues]}, sys.stdout, indent=2)
            print()
        else:
            for issue in exc.issues:
                print(str(issue), file=sys.stderr)
            print(f"{len(exc.issues)} error(s) in {len({i.file for i in exc.issues})} file(s)", file=sys.stderr)
        return 1
    floor = None
    if args.cost_floor:
        if not result.of_kind("Cluster"):
            print("--cost-floor needs the Cluster specs (their pools are what a fleet can be made of) among the "
                  "files", file=sys.stderr)
            return 1
        from scheduler.control import floor as floor_mod  # noqa: PLC0415 (the solver only when asked)
        from scheduler.control import planner  # noqa: PLC0415

        floor = floor_mod.compute(planner.SpecView.of(result, 1))
    if args.output == "json":
        docs = [{"file": d.file, "line": d.line, "kind": d.kind, "name": d.name} for d in result.documents]
        out = {"valid": True, "documents": docs}
        if floor is not None:
            out["cost_floor"] = floor.to_dict()
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        for d in result.documents:
            print(f"{d.file}:{d.line}: {d.kind}/{d.name} valid")
        print(f"{len(result.documents)} document(s) valid")
        if floor is not None:
            print(_render_floor(floor))
    return 0


def _render_floor(floor) -> str:
    from scheduler.control import floor as floor_mod  # noqa: PLC0415 (loaded by the caller already)

    how = "proven optimal" if floor.proven else "the solver's lower bound; its plan costs " \
                                               f"${floor.plan_usd_per_hour:,.2f}/h"
    lines = [f"Cost floor: ${floor.usd_per_hour:,.2f}/h ({how}): no fleet that serves every deployment's minimum "
             f"replicas and keeps these rules ({floor_mod.RULES}) costs less, whatever the traffic. Its plan:"]
    for key, n in floor.nodes.items():
        on = ", ".join(f"{d} x{r}" for (d, k), r in sorted(floor.placement.items()) if k == key)
        lines.append(f"  {key}: {n} node(s){': ' + on if on else ' (pool minimum)'}")
    if floor.unplaced:
        lines.append(f"  ! no pool can hold the minimum of: {', '.join(floor.unplaced)}")
    return "\n".join(lines)
