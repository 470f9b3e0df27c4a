"""``meridian demo``: the whole system on one machine, on loopback, with no cloud account and no
GPU (see meridian/demo/run.py for the story it tells). Exit 0 when the run completed."""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import signal
import sys

from meridian.demo import fleet as fleet_mod
from meridian.demo import run as demo_run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = demo_run.DemoOptions()
    parser.add_argument("--duration", type=float, default=d.duration_s, metavar="SECONDS",
                        help=f"length of the traffic phase (default {d.duration_s:.0f}; start-up and report add ~30 s)")
    parser.add_argument("--rps", type=float, default=d.base_rps_per_region, metavar="N",
                        help=f"requests/s per client region before the spike (default {d.base_rps_per_region})")
    parser.add_argument("--spike", type=float, default=d.spike_factor, metavar="X",
                        help=f"traffic multiplier in na-east during the spike (default {d.spike_factor:g})")
    parser.add_argument("--lose", default="", metavar="CLUSTER",
                        help="cluster to lose mid-run (default: the one with the most ready replicas)")
    parser.add_argument("--replace-wait", type=float, default=d.replace_wait_s, metavar="SECONDS",
                        help="after the traffic, wait up to this long for the lost region's capacity to be re-placed "
                             f"if it is not yet, so the report can time it (default {d.replace_wait_s:.0f}; 0: do not "
                             "wait)")
    parser.add_argument("--k8s-clusters", default=d.k8s_clusters, metavar="N|NAME,...",
                        help="run these clusters' replicas as pods through the kubernetes backend, each on a fake "
                             "Kubernetes of its own with the sim cloud's nodes: a number N (the first N clusters of "
                             "examples/clusters.yaml) or cluster names, comma-separated (default: none)")
    parser.add_argument("--scale-down-delay", type=float, default=d.pool_scale_down_delay_s, metavar="SECONDS",
                        help="the scheduler's pool_scale_down_delay_s in the demo: idle nodes are given back after "
                             f"this (default {d.pool_scale_down_delay_s:g}; the scheduler's own default, 300, "
                             "outlasts the demo)")
    parser.add_argument("--no-live", action="store_true", help="print a progress line every 10 s instead of the live view")
    parser.add_argument("--workdir", type=pathlib.Path, help="keep logs, state and configs here (default: a temp dir, removed)")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def run(args: argparse.Namespace) -> int:
    if args.duration < 20:
        print("meridian demo: --duration must be at least 20 seconds", file=sys.stderr)
        return 2
    try:
        fleet_mod.resolve_k8s_clusters(fleet_mod.EXAMPLES / "clusters.yaml", args.k8s_clusters)
    except ValueError as exc:
        print(f"meridian demo: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level, format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    opts = demo_run.DemoOptions(duration_s=args.duration, base_rps_per_region=args.rps, spike_factor=args.spike,
                                live=not args.no_live, workdir=args.workdir, keep_workdir=args.workdir is not None,
                                seed=args.seed, lose_cluster=args.lose, replace_wait_s=args.replace_wait,
                                k8s_clusters=args.k8s_clusters,
                                pool_scale_down_delay_s=args.scale_down_delay)
    return asyncio.run(_main(opts))


async def _main(opts: demo_run.DemoOptions) -> int:
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    # Ctrl-C and SIGTERM cancel the run; the demo's finally blocks stop every process.
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return await demo_run.demo(opts)
    except asyncio.CancelledError:
        print("\ninterrupted: everything stopped", file=sys.stderr)
        return 130
    except TimeoutError as exc:
        print(f"meridian demo: {exc}", file=sys.stderr)
        return 1
