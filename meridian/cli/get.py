"""``meridian get [KIND [NAME]]``: list applied specs, or print one (YAML by default)."""

from __future__ import annotations

import argparse
import datetime
import json
import sys

import yaml

from meridian.cli import apply as apply_cmd
from scheduler.admin import client as admin_client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", nargs="?", help="ModelDeployment, CapacityPolicy, Cluster, LatencyMap (or "
                                               "deployment, policy, cluster, latencymap)")
    parser.add_argument("name", nargs="?")
    apply_cmd.add_connection_arguments(parser, ("text", "json", "yaml"), default=None)


def run(args: argparse.Namespace) -> int:
    try:
        client = apply_cmd.connect(args)
        if args.name:
            item = client.get(args.kind, args.name)
            if (args.output or "yaml") == "json":
                json.dump(item["document"], sys.stdout, indent=2)
                print()
            else:
                print(yaml.safe_dump(item["document"], sort_keys=False), end="")
            return 0
        result = client.list(args.kind)
    except admin_client.AdminError as exc:
        return apply_cmd.report_error(exc, "json" if args.output == "json" else "text")
    if args.output == "json":
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    if args.output == "yaml":
        print(yaml.safe_dump_all([i["document"] for i in result["items"]], sort_keys=False), end="")
        return 0
    rows = [("KIND", "NAME", "GENERATION", "UPDATED", "SOURCE")]
    for i in result["items"]:
        when = datetime.datetime.fromtimestamp(i["updated_at"], datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
        rows.append((i["kind"], i["name"], str(i["generation"]), when, i.get("source", "")))
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return 0
