"""``python -m runtime_adapter.emulator`` and ``meridian emulator``: run one emulated SGLang server.

Exit codes: 0 after a graceful exit (SIGTERM with nothing in flight) or SIGINT, 1 when the
configuration is invalid or the ``fail_startup`` fault fires, 134 for the crash fault."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

import prometheus_client
import pydantic

from runtime_adapter.emulator import config as config_mod
from runtime_adapter.emulator import server

log = logging.getLogger("runtime_adapter.emulator")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    config_mod.add_arguments(parser)


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        format="[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stdout,
                        force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def run(args: argparse.Namespace) -> int:
    try:
        cfg = config_mod.from_namespace(args)
    except (pydantic.ValidationError, ValueError) as exc:
        print(f"invalid emulator configuration: {exc}", file=sys.stderr)
        return 1
    _configure_logging(cfg.log_level)
    # SGLang exports in multiprocess mode, which has no *_created samples; match it.
    prometheus_client.disable_created_metrics()
    try:
        import uvloop  # optional: a faster event loop where installed
    except ImportError:
        uvloop = None
    try:
        if uvloop is not None:
            return uvloop.run(server.run_process(cfg))
        return asyncio.run(server.run_process(cfg))
    except server.ConfigError as exc:
        log.error("invalid emulator configuration: %s", exc)
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = config_mod.build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"ignoring flags the emulator does not model: {unknown}", file=sys.stderr)
    return run(args)
