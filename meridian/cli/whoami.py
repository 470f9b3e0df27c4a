"""``meridian whoami``: the principal the admin token stands for, its role and what it may do."""

from __future__ import annotations

import argparse

from meridian.cli import apply as apply_cmd
from meridian.cli import output
from scheduler.admin import client as admin_client


def add_arguments(parser: argparse.ArgumentParser) -> None:
    apply_cmd.add_connection_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        me = apply_cmd.connect(args).whoami()
    except admin_client.AdminError as exc:
        return apply_cmd.report_error(exc, args.output)
    teams = f" (teams {', '.join(me['teams'])})" if me.get("teams") else ""
    output.emit(me, args.output, lambda: f"{me['name']}: role {me['role']}{teams}; may {me['may']}")
    return 0
