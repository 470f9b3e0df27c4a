"""``meridian apply -f FILE...``: send spec files to the scheduler's admin API. They are validated
there as part of the whole stored set; a rejected apply changes nothing and lists every problem
(file:line: field: message). An SLA that no declared capacity can meet from some client region is
refused the same way unless ``--allow-unmet-sla`` accepts it (then it is a warning). Exit 0
applied, 1 rejected or unreachable."""

from __future__ import annotations

import argparse
import json
import sys

from scheduler.admin import client as admin_client


def add_connection_arguments(parser: argparse.ArgumentParser, outputs: tuple[str, ...] = ("text", "json"),
                             default: str | None = "text") -> None:
    parser.add_argument("--server", help=f"admin API URL (default ${admin_client.URL_ENV} or "
                                         f"{admin_client.DEFAULT_URL})")
    parser.add_argument("--token-file", help=f"admin token file (default ${admin_client.TOKEN_ENV})")
    parser.add_argument("--ca-file", help=f"CA bundle that signed an https:// scheduler's certificate (default "
                                          f"${admin_client.CA_ENV}, else the system's)")
    parser.add_argument("-o", "--output", choices=list(outputs), default=default)


def connect(args: argparse.Namespace) -> admin_client.AdminClient:
    client = admin_client.AdminClient.from_args(args.server, args.token_file, getattr(args, "ca_file", None))
    if client.warning:
        print(f"warning: {client.warning}", file=sys.stderr)
    return client


def report_error(exc: admin_client.AdminError, output: str) -> int:
    if output == "json":
        json.dump({"error": str(exc), "status": exc.status, **exc.body}, sys.stdout, indent=2)
        print()
        return 1
    issues = exc.body.get("issues") or []
    for i in issues:
        where = f"{i['file']}:{i['line']}" if i.get("line") else i.get("file", "")
        field = f" {i['path']}:" if i.get("path") else ""
        print(f"{where}:{field} {i['message']}", file=sys.stderr)
    print(f"error: {exc}", file=sys.stderr)
    return 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", dest="files", action="append", required=True, metavar="FILE",
                        help="YAML spec file or directory of them (repeatable; several documents per file)")
    parser.add_argument("--allow-unmet-sla", action="store_true",
                        help="apply even when no declared capacity can meet a deployment's SLA from some client "
                             "region (it is reported as a warning)")
    add_connection_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        client = connect(args)
        result = client.apply(client.read_files(args.files), allow_unmet_sla=args.allow_unmet_sla)
    except admin_client.AdminError as exc:
        return report_error(exc, args.output)
    if args.output == "json":
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    for item in result["applied"]:
        print(f"{item['kind']}/{item['name']} {item['action']}")
    for warning in result.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    return 0
