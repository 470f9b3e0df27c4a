"""``meridian agent --cluster cluster.yaml [--name CLUSTER]``: run one cluster's agent until
SIGTERM/SIGINT. A file may hold several Cluster documents; ``--name`` picks one.

Exit codes: 0 after a clean shutdown, 1 when the configuration is unusable (the message says what
to fix)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import time

from meridian import spec
from meridian import tls as meridian_tls

from agents import agent as agent_mod
from agents import config, stream


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", action="append", required=True, metavar="FILE",
                        help="spec file(s) holding the Cluster document (repeatable)")
    parser.add_argument("--name", help="which Cluster, when the files hold several")
    parser.add_argument("--state-dir", help="override spec.agent.state_dir")
    parser.add_argument("--on-exit", choices=["keep", "stop"], default="keep",
                        help="replicas at shutdown: keep serving (re-adopted by the next agent; default) or stop")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", default="text", choices=["text", "json"])


def _setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def run(args: argparse.Namespace) -> int:
    try:
        cluster = config.load_cluster(args.cluster, args.name)
        token = config.read_token(cluster)
        settings = config.replica_settings(cluster)
    except spec.SpecError as exc:
        for issue in exc.issues:
            print(str(issue), file=sys.stderr)
        return 1
    except config.ConfigError as exc:
        print(f"meridian agent: {exc}", file=sys.stderr)
        return 1
    if cluster.spec.scheduler.tls is not None:
        try:  # read and check the TLS files now: later they would fail every reconnect, vaguely
            stream.channel_credentials(cluster.spec.scheduler.tls)
        except meridian_tls.TlsFileError as exc:
            print(f"meridian agent: {exc}", file=sys.stderr)
            return 1
    _setup_logging(args.log_level, args.log_format)  # after validation: errors above go to stderr plainly
    state_dir = config.state_dir(cluster, args.state_dir)
    return asyncio.run(_serve(cluster, token, settings, state_dir, stop_replicas=args.on_exit == "stop"))


async def _serve(cluster, token, settings, state_dir, *, stop_replicas: bool) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    agent = agent_mod.build(cluster, token=token, state_dir=state_dir, replica_settings=settings, clock=time.time)
    try:
        await agent.run(stop)
    finally:
        await agent.shutdown(stop_replicas=stop_replicas)
    return 0
