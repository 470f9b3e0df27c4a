"""``meridian validate FILE...``: check spec files as one set; print every error with its file,
line, field path and a suggestion. Exit 0 when valid, 1 when not.

With Cluster specs among the files, it also judges every deployment's SLA per client region
against the capacity they declare (``scheduler.solver.feasibility``: the solver's own filters,
the capacity model and the latency map): each region gets the best option or the nearest miss,
and an SLA no declared capacity can meet is an error (``--allow-unmet-sla`` accepts it knowingly:
a warning, exit 0), as ``meridian apply`` refuses it. Those judgements are the scheduler's (the
``scheduler`` extra, with OR-Tools): they are imported only when there is capacity to judge, so
validating policies and deployments alone needs the kernel only.

Likely mistakes that are not errors (``meridian.spec.advisories``: a throughput profile measured on
another workload than the one declared) are printed as warnings; they do not change the exit status.

``--cost-floor`` also prints the least any fleet that keeps the specs' rules can cost per hour, and
the plan that costs it (``scheduler.control.floor``): what the rules alone commit to, before traffic."""

from __future__ import annotations

import argparse
import sys

from types import ModuleType

from meridian import spec
from meridian.cli import output
from meridian.spec import advisories


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="YAML spec files (several documents each), or directories of them (*.yaml, *.yml)")
    output.add_argument(parser)
    parser.add_argument("--cost-floor", action="store_true",
                        help="also solve for the cheapest fleet the specs' rules allow (needs the Cluster specs)")
    parser.add_argument("--allow-unmet-sla", action="store_true",
                        help="accept an SLA no declared capacity can meet from some client region (a warning, "
                             "not an error)")


def run(args: argparse.Namespace) -> int:
    files = spec.expand_paths(args.files)
    if not files:
        print(f"no spec files in {', '.join(args.files)} (a directory's *.yaml and *.yml files are read)",
              file=sys.stderr)
        return 1
    try:
        result = spec.load_files(files)
    except spec.SpecError as exc:
        if output.structured(args.output):
            output.emit({"valid": False, "errors": [i.to_dict() for i in exc.issues]}, args.output, lambda: None)
        else:
            for issue in exc.issues:
                print(str(issue), file=sys.stderr)
            print(f"{len(exc.issues)} error(s) in {len({i.file for i in exc.issues})} file(s)", file=sys.stderr)
        return 1
    if not result.documents:
        print(f"no documents in {', '.join(files)}: nothing to validate (an empty file, or only comments)",
              file=sys.stderr)
        return 1
    if args.cost_floor and not result.of_kind("Cluster"):
        print("--cost-floor needs the Cluster specs (their pools are what a fleet can be made of) among the "
              "files", file=sys.stderr)
        return 1
    advice = advisories.advisories(result)
    verdicts, unmet, floor = None, [], None
    if result.of_kind("Cluster"):
        floor_mod, planner, feasibility = _solver()
        view = planner.SpecView.of(result, 1)
        verdicts = feasibility.check_documents(view.deployments.values(), view.clusters.values(), view.policy,
                                               view.latency_map)
        unmet = feasibility.issues(verdicts or [], result.documents)
        if args.cost_floor:
            floor = floor_mod.compute(view)
    failed = bool(unmet) and not args.allow_unmet_sla
    if output.structured(args.output):
        docs = [{"file": d.file, "line": d.line, "kind": d.kind, "name": d.name} for d in result.documents]
        out = {"valid": not failed, "documents": docs,
               "sla": None if verdicts is None else [v.to_dict() for v in verdicts]}
        if unmet:
            out["errors" if failed else "warnings"] = [i.to_dict() for i in unmet]
        if advice:
            out["warnings"] = out.get("warnings", []) + [i.to_dict() for i in advice]
        if floor is not None:
            out["cost_floor"] = floor.to_dict()
        output.emit(out, args.output, lambda: None)
        return 1 if failed else 0
    for d in result.documents:
        print(f"{d.file}:{d.line}: {d.kind}/{d.name} valid")
    print(f"{len(result.documents)} document(s) valid")
    if verdicts is None:
        print("SLA not judged: no Cluster spec among the files declares capacity")
    else:
        print("SLA per deployment and client region (the declared clusters, the capacity model, the latency map):")
        headroom = feasibility.problem.SolverSettings().ttft_headroom_ms
        for v in verdicts:
            sla = view.deployments[v.deployment].spec.sla
            print(f"  {v.deployment}/{v.client_region}: {feasibility.summary(v, sla, headroom)}")
    for issue in advice:
        print(f"warning: {issue}", file=sys.stderr)
    for v in verdicts or []:
        for line in v.warnings():
            print(f"warning: {line}", file=sys.stderr)
    for issue in unmet:
        print(f"{'' if failed else 'warning: '}{issue}", file=sys.stderr)
    if failed:
        print(f"{len(unmet)} SLA error(s): no declared capacity meets them (--allow-unmet-sla accepts them)",
              file=sys.stderr)
    if floor is not None:
        print(_render_floor(floor, floor_mod.RULES))
    return 1 if failed else 0


def _solver() -> tuple[ModuleType, ModuleType, ModuleType]:
    """The scheduler's floor, spec view and feasibility modules (optional heavy dependency: the
    ``scheduler`` extra), or exit 2 saying what to install."""
    try:
        from scheduler.control import floor, planner
        from scheduler.solver import feasibility
    except ImportError as exc:
        print(f"meridian validate: judging SLAs against Cluster specs needs the scheduler's solver "
              f"(pip install 'meridian[scheduler]'): {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    return floor, planner, feasibility


def _render_floor(floor, rules: str) -> str:
    """The cost floor (a ``scheduler.control.floor.Floor``; ``rules``: the rules it keeps) as the lines
    validate prints."""
    how = "proven optimal" if floor.proven else "the solver's lower bound; its plan costs " \
                                               f"${floor.plan_usd_per_hour:,.2f}/h"
    lines = [f"Cost floor: ${floor.usd_per_hour:,.2f}/h ({how}): no fleet that serves every deployment's minimum "
             f"replicas and keeps these rules ({rules}) costs less, whatever the traffic. Its plan:"]
    for key, n in floor.nodes.items():
        on = ", ".join(f"{d} x{r}" for (d, k), r in sorted(floor.placement.items()) if k == key)
        lines.append(f"  {key}: {n} node(s){': ' + on if on else ' (pool minimum)'}")
    for reason in floor.reasons:
        lines.append(f"  ! cannot place: {reason}")
    return "\n".join(lines)
