"""``make bench`` / ``python -m bench``: run every benchmark in one go and write one Markdown report
with every figure and the machine it ran on (default ``bench/out/report.md``).

Each benchmark is its own module (``python -m bench.<name>``) printing its figures side by side
with its peer; this runner only sequences them, shows progress, and collects their output."""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import platform
import subprocess
import sys
import time

from bench import common

BENCHES = {
    "emulator": "SGLang emulator: sustainable request rate of one process (is it a bottleneck?)",
    "router": "Router: Meridian vs sglang-router vs direct, short and streaming requests; prefix-aware routing "
              "on Mooncake's trace against sglang-router's cache_aware and an ideal router",
    "solver": "Placement solver: the 10-s plan against the best known plan and the best proven bound (one "
              "objective), the gap on the changeable part, greedy baseline, incremental re-solve",
    "simulate": "Simulator: policy comparison over a simulated day (cost, SLO attainment, failures)",
}


def machine() -> list[str]:
    cpu = common.cpu_model()
    mem_gib = "?"
    try:
        kb = next(int(line.split()[1]) for line in pathlib.Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
        mem_gib = f"{kb / 1024 / 1024:.0f}"
    except (OSError, StopIteration):
        pass
    return [f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
            f"- CPU: {cpu}, {os.cpu_count()} cores; memory {mem_gib} GiB",
            f"- OS: {platform.platform()}; Python {platform.python_version()}",
            f"- load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(BENCHES), help=f"comma list of: {', '.join(BENCHES)}")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/out/report.md"))
    parser.add_argument("--timeout-s", type=float, default=3600,
                        help="per benchmark (bench.simulate runs 12 simulated days: 15-40 min on 2 cores)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHES)}")
    sections = ["# Meridian benchmark report", "", "## Machine", "", *machine(), ""]
    failed = []
    for i, name in enumerate(names, start=1):
        print(f"[{i}/{len(names)}] bench.{name}: {BENCHES[name]} ...", flush=True)
        t0 = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-m", f"bench.{name}"], capture_output=True, text=True,
                                  timeout=args.timeout_s)
            output, rc = proc.stdout + (("\n" + proc.stderr) if proc.returncode else ""), proc.returncode
        except subprocess.TimeoutExpired as exc:
            output, rc = f"{exc.stdout or ''}\n(timed out after {args.timeout_s:.0f} s)", -1
        took = time.monotonic() - t0
        print(output.rstrip(), flush=True)
        print(f"[{i}/{len(names)}] bench.{name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {took:.0f} s", flush=True)
        if rc != 0:
            failed.append(name)
        sections += [f"## {name}", "", BENCHES[name] + f" (`python -m bench.{name}`, {took:.0f} s)", "",
                     "```", output.rstrip(), "```", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(sections) + "\n")
    print(f"report written to {args.out}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
