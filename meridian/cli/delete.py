"""``meridian delete KIND NAME``: remove an applied spec (refused, with the reasons, when the specs
left would not validate, e.g. a region another document uses goes with a LatencyMap)."""

from __future__ import annotations

import argparse

from meridian.cli import apply as apply_cmd
from meridian.cli import output
from scheduler.admin import client as admin_client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind")
    parser.add_argument("name")
    apply_cmd.add_connection_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        result = apply_cmd.connect(args).delete(args.kind, args.name)
    except admin_client.AdminError as exc:
        return apply_cmd.report_error(exc, args.output)
    output.emit(result, args.output, lambda: f"{result['deleted']['kind']}/{result['deleted']['name']} deleted")
    return 0
