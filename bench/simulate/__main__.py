"""``python -m bench.simulate``: the simulator's policy comparison and how long it takes here.

Runs ``meridian simulate``'s comparison (every policy on the same trace and seed) and prints the
table, the verdicts, the wall and CPU time, and the machine. ``--seeds N`` repeats the day with N
seeds and adds each policy's mean and range of cost and SLO attainment, since one day's cost
differences between close policies depend on the path the autoscaler and the faults take."""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time

from meridian import progress
from meridian.simulate import policies, report, runner, scenario


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.simulate", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="default")
    parser.add_argument("--hours", type=float, default=None)
    parser.add_argument("--seeds", type=int, default=1, help="days to simulate with seeds seed..seed+N-1")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--policies", default=",".join(policies.DEFAULT))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    runner.quiet_components()
    base = scenario.load(args.scenario).with_overrides(hours=args.hours)
    names = [n for n in args.policies.split(",") if n]
    runs = []
    for i in progress.track(range(max(1, args.seeds)), "bench.simulate: days", unit="seeds"):
        sc = base.with_overrides(seed=base.seed + i)
        wall, cpu = time.perf_counter(), _cpu_s()
        cmp = runner.run(sc, names, jobs=args.jobs)
        runs.append((cmp, time.perf_counter() - wall, _cpu_s() - cpu))
    if args.json:
        json.dump({"runs": [{**report.as_dict(c, include_series=False), "cpu_s": round(cpu, 2)}
                            for c, _, cpu in runs]}, sys.stdout)
        print()
        return 0
    for cmp, wall, cpu in runs:
        print(report.text(cmp))
        print(f"\ntime: {wall:.1f} s wall, {cpu:.1f} s CPU for {len(names)} policies x {cmp.scenario.hours:g} "
              f"simulated hours (seed {cmp.scenario.seed}, {cmp.jobs} process(es))\n")
    if len(runs) > 1:
        print(f"Over {len(runs)} seeds (mean [min .. max]):")
        for name in names:
            costs = [c.result(name).cost_per_hour_usd for c, _, _ in runs]
            att = [100.0 * c.result(name).total.attainment for c, _, _ in runs]
            print(f"  {name:20s} ${statistics.mean(costs):7.2f}/h [{min(costs):.2f} .. {max(costs):.2f}]   "
                  f"SLO met {statistics.mean(att):6.2f}% [{min(att):.2f} .. {max(att):.2f}]")
        beats = {}
        for c, _, _ in runs:
            for v in report.verdicts(c):
                beats.setdefault(v["baseline"], []).append(v["beats"])
        for baseline, wins in beats.items():
            print(f"  meridian beats {baseline} on {sum(wins)}/{len(wins)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
