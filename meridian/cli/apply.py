"""``meridian apply -f FILE...``: send spec files to the scheduler's admin API. They are validated
there as part of the whole stored set; a rejected apply changes nothing and lists every problem
(file:line: field: message). An SLA that no declared capacity can meet from some client region is
refused the same way unless ``--allow-unmet-sla`` accepts it (then it is a warning). ``--wait``
then waits (with a progress bar) until the applied deployments' replicas are ready
(``meridian.cli.wait``). Exit 0 applied (and ready), 1 rejected, unreachable or not ready in time."""

from __future__ import annotations

import argparse
import sys

from meridian.cli import output
from meridian.cli import wait as wait_mod
from scheduler.admin import client as admin_client


def add_connection_arguments(parser: argparse.ArgumentParser, outputs: tuple[str, ...] = output.FORMATS,
                             default: str | None = "text") -> None:
    parser.add_argument("--server", help=f"admin API URL (default ${admin_client.URL_ENV} or "
                                         f"{admin_client.DEFAULT_URL})")
    parser.add_argument("--token-file", help=f"admin token file (default ${admin_client.TOKEN_ENV})")
    parser.add_argument("--ca-file", help=f"CA bundle that signed an https:// scheduler's certificate (default "
                                          f"${admin_client.CA_ENV}, else the system's)")
    output.add_argument(parser, default, outputs)


def connect(args: argparse.Namespace) -> admin_client.AdminClient:
    client = admin_client.AdminClient.from_args(args.server, args.token_file, getattr(args, "ca_file", None))
    if client.warning:
        print(f"warning: {client.warning}", file=sys.stderr)
    return client


def report_error(exc: admin_client.AdminError, fmt: str | None) -> int:
    """The API's error: as data on stdout for json/yaml, else every issue and the error on stderr."""
    if output.structured(fmt):
        output.emit({"error": str(exc), "status": exc.status, **exc.body}, fmt, lambda: None)
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
    parser.add_argument("--wait", action="store_true",
                        help="then wait until every applied deployment's replicas are ready (a progress bar)")
    parser.add_argument("--wait-timeout-s", type=float, default=600.0, metavar="S",
                        help="how long --wait waits before exiting 1 (default 600)")
    add_connection_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        client = connect(args)
        result = client.apply(client.read_files(args.files), allow_unmet_sla=args.allow_unmet_sla)
        ready = None
        if args.wait:
            names = [i["name"] for i in result["applied"] if i["kind"] == "ModelDeployment"]
            ready = wait_mod.wait(client, names, args.wait_timeout_s)
            result = {**result, "ready": ready.to_dict()}
    except admin_client.AdminError as exc:
        return report_error(exc, args.output)

    def text() -> str:
        for warning in result.get("warnings", []):
            print(f"warning: {warning}", file=sys.stderr)
        return "\n".join(f"{i['kind']}/{i['name']} {i['action']}" for i in result["applied"]) or None

    output.emit(result, args.output, text)
    if ready is not None and not ready.done:
        print(f"not ready after {args.wait_timeout_s:g} s: {'; '.join(ready.missing())}", file=sys.stderr)
        return 1
    return 0
