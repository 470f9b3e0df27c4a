"""``meridian simulate``: replay a day of traffic on a simulated clock through the real autoscaler,
solver, reconciler and routing policies, and compare Meridian with baselines on the same trace.

Prints the comparison table (cost, SLO attainment, failed requests, TTFT percentiles per client
region) or, with ``--json``, the whole result; ``--plot DIR`` writes cost and SLO-attainment PNGs.
Progress goes to stderr. Exit 0 on success, 1 for a scenario that cannot be used."""

from __future__ import annotations

import argparse
import pathlib
import sys

from meridian import progress as progress_mod
from meridian.cli import output
from meridian.simulate import policies, report, runner, scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", default="default", metavar="default|FILE",
                        help="the built-in day ('default') or a YAML scenario file (docs/simulator.md)")
    parser.add_argument("--hours", type=float, default=None, help="simulated hours (default: the scenario's, 24)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: the scenario's)")
    parser.add_argument("--trace", metavar="NAME|FILE", default=None,
                        help="replay this trace for every traffic entry (shipped: azure-conv, azure-code, mooncake; "
                             "or a file: .csv Azure 2023/2024 or BurstGPT, .jsonl Mooncake), keeping the scenario's rates "
                             "and day shape")
    parser.add_argument("--policies", default=",".join(policies.DEFAULT), metavar="NAME[,NAME...]",
                        help=f"policies to compare (default: all): {', '.join(policies.POLICIES)}")
    parser.add_argument("--jobs", type=int, default=None,
                        help="processes to run policies in (default: the usable cores, at most 4)")
    parser.add_argument("--plot", metavar="DIR", default=None, help="write cost and SLO-attainment PNGs into DIR")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON on stdout (= -o json)")
    output.add_argument(parser)
    parser.add_argument("--print-scenario", action="store_true",
                        help="print the scenario as YAML (a starting point for your own) and exit")


class _Ticks:
    """Each policy's share of its ticks done, fed to one progress bar (a unit per policy)."""

    def __init__(self, bar: progress_mod.Progress, names: list[str]):
        self.bar = bar
        self.done = {n: 0.0 for n in names}

    def __call__(self, policy: str, done: int, total: int) -> None:
        self.done[policy] = done / max(1, total)
        self.bar.update(sum(self.done.values()),
                        note="  ".join(f"{n} {100 * f:3.0f}%" for n, f in self.done.items()))


def _error(exc: Exception) -> None:
    """One problem on the command's line; several, one per line under a count, each starting with
    its FILE:LINE as the scenario module writes them."""
    count = getattr(exc, "count", 1)
    if count > 1:
        print(f"meridian simulate: {count} problems:", str(exc), sep="\n", file=sys.stderr)
    else:
        print(f"meridian simulate: {exc}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    try:
        sc = scenario.load(args.scenario).with_overrides(hours=args.hours, seed=args.seed,
                                                                   trace=args.trace)
        if args.print_scenario:
            print(scenario.dump(sc), end="")  # YAML already: the scenario file itself
            return 0
        names = [n.strip() for n in args.policies.split(",") if n.strip()]
        if not names:
            raise scenario.ScenarioError("--policies: give at least one policy")
        for name in names:
            policies.get(name)
        if args.jobs is not None and args.jobs < 1:
            raise scenario.ScenarioError(f"--jobs must be >= 1, got {args.jobs}")
        if args.plot:
            _plot_dir(args.plot)
    except (scenario.ScenarioError, ValueError) as exc:
        _error(exc)
        return 1
    runner.quiet_components()
    try:
        with progress_mod.Progress("simulating", len(names), unit="policies") as bar:
            cmp = runner.run(sc, names, jobs=args.jobs, progress=_Ticks(bar, names))
    except scenario.ScenarioError as exc:
        _error(exc)
        return 1
    failed = 0
    if args.plot:
        from meridian.simulate import plot  # noqa: PLC0415  (matplotlib only when plots are asked for)

        try:
            paths = plot.write(cmp, args.plot)
            print(f"plots: {', '.join(str(p) for p in paths)}", file=sys.stderr)
        except OSError as exc:  # the run's report still comes out below
            print(f"meridian simulate: --plot {args.plot}: {exc}", file=sys.stderr)
            failed = 1
    output.emit(report.as_dict(cmp), "json" if args.json else args.output, lambda: report.text(cmp))
    return failed


def _plot_dir(path: str) -> None:
    """Make ``--plot``'s directory before the run, so a path that cannot be one fails in a second,
    not after a whole simulated day."""
    try:
        pathlib.Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise scenario.ScenarioError(f"--plot {path}: cannot make the directory ({exc.strerror or exc})") from None
