"""``meridian state export FILE`` / ``meridian state import FILE``: back up a scheduler's state
store (SQLite or Redis: every spec, the directive log, the routing table and its version, rollout
records, traffic, counters) to one versioned JSON file, and restore it into an empty store.

The store is named as the scheduler names it: ``--state URL`` (else ``MERIDIAN_STATE_URL``, which
keeps a Redis password off the command line) and ``--namespace``. Import refuses a store that holds
anything unless ``--force``, and refuses while a scheduler holds the store's lease. Progress goes to
stderr, one summary line to stdout. The rules are in ``scheduler.state.backup``; docs/operations.md
says when to use it."""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys
import tempfile
import urllib.parse

import meridian
from meridian.cli import scheduler as scheduler_cmd
from scheduler import config as config_mod
from scheduler import state as state_mod
from scheduler.state import backup

STATE_URL_ENV = scheduler_cmd.STATE_URL_ENV


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, help_text in (("export", "write every collection and counter of the store to FILE ('-': stdout)"),
                            ("import", "restore FILE ('-': stdin) into an empty store (stop the schedulers first)")):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("file", metavar="FILE")
        p.add_argument("--state", dest="state_url", metavar="URL",
                       help=f"sqlite://PATH or redis://HOST:PORT/DB, as given to 'meridian scheduler --state' "
                            f"(else ${STATE_URL_ENV}; default {config_mod.SchedulerConfig.model_fields['state_url'].default})")
        p.add_argument("--namespace", default="default", help="the scheduler's --namespace (default 'default')")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress lines, only the summary")
        if name == "import":
            p.add_argument("--force", action="store_true",
                           help="replace what the store holds (default: refuse a store that is not empty)")


def redact(url: str) -> str:
    """``url`` without its password, for progress and summary lines."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _state_url(args: argparse.Namespace) -> str:
    return (args.state_url or os.environ.get(STATE_URL_ENV)
            or config_mod.SchedulerConfig.model_fields["state_url"].default)


def _write_atomic(path: str, text: str) -> None:
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, 0o600)  # a backup holds every spec and the directive log: readable by its owner only
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


async def _export(args: argparse.Namespace, url: str, say) -> int:
    store = state_mod.open_store(url, namespace=args.namespace)
    try:
        snapshot = await backup.export(store, namespace=args.namespace, meridian_version=meridian.__version__,
                                       source=redact(url), progress=say)
    finally:
        await store.close()
    text = snapshot.to_json() + "\n"
    if args.file == "-":
        sys.stdout.write(text)
        print(f"exported {snapshot.summary()} from {redact(url)} namespace {args.namespace}", file=sys.stderr)
    else:
        _write_atomic(args.file, text)
        print(f"exported {snapshot.summary()} from {redact(url)} namespace {args.namespace} to {args.file}")
    return 0


async def _import(args: argparse.Namespace, url: str, say) -> int:
    source = "<stdin>" if args.file == "-" else args.file
    try:
        text = sys.stdin.read() if args.file == "-" else pathlib.Path(args.file).read_text()
    except OSError as exc:
        print(f"{source}: cannot read: {exc.strerror or exc}", file=sys.stderr)
        return 1
    snapshot = backup.decode(text, source)
    if snapshot.namespace and snapshot.namespace != args.namespace:
        say(f"note: {source} was exported from namespace {snapshot.namespace!r}; importing into {args.namespace!r}")
    store = state_mod.open_store(url, namespace=args.namespace)
    try:
        written = await backup.restore(store, snapshot, force=args.force,
                                       target=f"{redact(url)} namespace {args.namespace}", progress=say)
    finally:
        await store.close()
    print(f"imported {written} keys ({snapshot.summary()}) from {source} into {redact(url)} namespace "
          f"{args.namespace}")
    return 0


def run(args: argparse.Namespace) -> int:
    url = _state_url(args)

    def say(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    try:
        return asyncio.run(_export(args, url, say) if args.action == "export" else _import(args, url, say))
    except backup.BackupError as exc:
        print(f"state {args.action}: {exc}", file=sys.stderr)
        return 1
    except (state_mod.StateError, ValueError, OSError) as exc:
        print(f"state {args.action}: {redact(url)}: {exc}", file=sys.stderr)
        return 1
