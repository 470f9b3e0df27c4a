"""Entry point: ``meridian <command> ...``. Exit codes: 0 success/valid, 1 invalid input or a failed
operation, 2 usage error.

Subcommands are registered by name -> module; a module is imported only when its command runs, so
``meridian validate`` does not pay for loading the solver or the cloud SDKs."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "validate": ("meridian.cli.validate", "validate spec files (all errors at once)"),
    "schema": ("meridian.cli.schema", "print the JSON Schema of every spec kind"),
    "router": ("router.cli", "run the global OpenAI-compatible router (latency-aware, failing over)"),
    "emulator": ("runtime_adapter.emulator.cli", "run an SGLang-compatible emulator (no GPU needed)"),
    "agent": ("agents.cli", "run one cluster's agent (--cluster FILE [--name CLUSTER])"),
    "scheduler": ("meridian.cli.scheduler", "run a scheduler node (gRPC, admin API, control loop)"),
    "apply": ("meridian.cli.apply", "apply spec files to the scheduler (-f FILE)"),
    "get": ("meridian.cli.get", "list applied specs or print one (get [KIND [NAME]])"),
    "delete": ("meridian.cli.delete", "delete an applied spec (delete KIND NAME)"),
    "plan": ("meridian.cli.plan", "dry run: placement, diff, cost before/after, SLA risks (-f FILE)"),
    "state": ("meridian.cli.state", "back up or restore the scheduler's state store (state export|import FILE)"),
    "status": ("meridian.cli.status", "the scheduler's view: leadership, clusters and replicas, the plan"),
    "whoami": ("meridian.cli.whoami", "the admin token's principal, role and what it may do"),
    "token": ("meridian.cli.token", "make a token (new) or print its stored form (hash, from stdin)"),
    "cost": ("meridian.cli.cost", "the bill: per model, team, cloud and tier, idle GPUs apart, $/M tokens, cost floor"),
    "demo": ("meridian.cli.demo", "run the whole system on this machine: clusters, traffic, failures, report"),
    "simulate": ("meridian.cli.simulate", "simulate a day of traffic and compare Meridian with baselines"),
}

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def register(name: str, module: str, help_text: str) -> None:
    """Add a subcommand (used by components as they land)."""
    COMMANDS[name] = (module, help_text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="meridian", description="Run LLM inference on GPUs from several clouds as one pool.")
    parser.add_argument("--version", action="version", version=f"meridian {importlib.import_module('meridian').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if not argv:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if argv[0] in ("-h", "--help", "--version"):
        try:
            parser.parse_args(argv or ["--help"])
        except SystemExit as exc:
            return int(exc.code or 0)
    name = argv[0]
    if name not in COMMANDS:
        try:
            parser.parse_args(argv)
        except SystemExit:
            return EXIT_USAGE
        return EXIT_USAGE
    module = importlib.import_module(COMMANDS[name][0])
    sub = argparse.ArgumentParser(prog=f"meridian {name}", description=COMMANDS[name][1])
    module.add_arguments(sub)
    try:
        args = sub.parse_args(argv[1:])
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
