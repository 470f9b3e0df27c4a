"""``meridian scheduler``: run a scheduler node (gRPC for agents and routers, the admin API, the
control loop). One node: the default SQLite state. HA: several nodes with ``--state redis://...``;
one leads, the others stand by and take over within ``lease_ttl_s`` + ``standby_poll_interval_s``.

Any knob of the scheduler's config can be set with ``--set KEY=VALUE`` (docs/scheduler.md lists
them); the common ones have their own flags."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

import pydantic
import uvloop
import yaml

from meridian import spec
from scheduler import config as config_mod
from scheduler import service as service_mod
from scheduler.admin import client as admin_client
from scheduler.admin import specs as admin_specs
from scheduler.server import auth

log = logging.getLogger("meridian.scheduler.cli")
STATE_URL_ENV = "MERIDIAN_STATE_URL"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grpc-address", help="host:port for agents and routers (default 127.0.0.1:7070)")
    parser.add_argument("--admin-address", help="host:port of the admin API and /metrics (default 127.0.0.1:7071)")
    parser.add_argument("--advertise-grpc-address", metavar="HOST:PORT",
                        help="the address standbys redirect agents to while this node leads (default: "
                             "--grpc-address); with TLS, a name the certificate holds (e.g. a StatefulSet pod's DNS "
                             "name, not its IP)")
    parser.add_argument("--state", dest="state_url",
                        help="sqlite://PATH (default) or redis://HOST:PORT/DB for HA (else $MERIDIAN_STATE_URL, which "
                             "keeps a Redis password off the command line)")
    parser.add_argument("--namespace", help="key prefix in a shared store (default 'default')")
    parser.add_argument("--id", dest="scheduler_id", help="this node's id (default host-pid)")
    parser.add_argument("--tokens-file", help="YAML file of cluster tokens and router tokens")
    parser.add_argument("--admin-token-file", help="admin bearer token file (else MERIDIAN_ADMIN_TOKEN)")
    parser.add_argument("--tls-cert-file", metavar="PEM",
                        help="certificate chain of the gRPC port; with --tls-key-file serves TLS (default: plaintext)")
    parser.add_argument("--tls-key-file", metavar="PEM", help="unencrypted private key of --tls-cert-file")
    parser.add_argument("--tls-client-ca-file", metavar="PEM",
                        help="CA bundle that signs agents' and routers' certificates: requires them (mutual TLS)")
    parser.add_argument("--admin-tls-cert-file", metavar="PEM",
                        help="certificate chain of the admin API; with --admin-tls-key-file serves HTTPS, reloaded "
                             "when the files change (default: plain HTTP)")
    parser.add_argument("--admin-tls-key-file", metavar="PEM", help="unencrypted private key of --admin-tls-cert-file")
    parser.add_argument("-f", "--apply", dest="apply_files", action="append", default=[], metavar="FILE",
                        help="spec file or directory to apply at start (validated first; repeatable)")
    parser.add_argument("--apply-missing", dest="seed_files", action="append", default=[], metavar="FILE",
                        help="spec file or directory whose documents are applied at start only for kinds the store "
                             "holds none of (a starter set: once a policy or deployment is applied, restarts leave "
                             "that kind alone); seeds that do not validate are logged and skipped (repeatable)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="any config knob, e.g. --set heartbeat_interval_s=2 (repeatable)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def build_config(args: argparse.Namespace) -> config_mod.SchedulerConfig:
    values: dict[str, object] = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        if key not in config_mod.SchedulerConfig.model_fields:
            hint = spec.base.closest(key, list(config_mod.SchedulerConfig.model_fields))
            raise ValueError(f"--set {key}: unknown setting" + (f"; did you mean {hint!r}?" if hint else ""))
        values[key] = value
    if not getattr(args, "state_url", None) and os.environ.get(STATE_URL_ENV):
        values["state_url"] = os.environ[STATE_URL_ENV]
    for key in ("grpc_address", "admin_address", "advertise_grpc_address", "state_url", "namespace", "scheduler_id", "tokens_file",
                "admin_token_file", "tls_cert_file", "tls_key_file", "tls_client_ca_file", "admin_tls_cert_file",
                "admin_tls_key_file"):
        if getattr(args, key, None):
            values[key] = getattr(args, key)
    return config_mod.SchedulerConfig(**values)


def _read(paths: list[str]) -> list[tuple[str, str]]:
    """(file, text) of each file, directories expanded; raises OSError naming the file."""
    texts = []
    for path in admin_client.expand_paths(paths):
        try:
            with open(path) as fh:
                texts.append((path, fh.read()))
        except OSError as exc:
            raise OSError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return texts


def _seeds(texts: list[tuple[str, str]], kinds_stored: set[str]) -> list[tuple[str, str]]:
    """Each file of ``texts`` reduced to its documents of a kind the store has none of (the others'
    lines blanked, so errors keep the file's own lines); files left with none are dropped.
    Raises SpecError for a file that does not parse."""
    out = []
    for file, text in texts:
        docs = spec.loader.read_documents(text, file)
        nodes = [n for n in yaml.compose_all(text, Loader=yaml.SafeLoader) if n is not None]
        lines = text.splitlines()
        keep = False
        for doc, node in zip(docs, nodes, strict=True):
            if isinstance(doc, dict) and str(doc.get("kind")) in kinds_stored:
                for i in range(node.start_mark.line, min(node.end_mark.line + 1, len(lines))):
                    if not lines[i].startswith("---"):
                        lines[i] = ""
            else:
                keep = True
        if keep:
            out.append((file, "\n".join(lines) + "\n"))
    return out


async def apply_at_start(svc: service_mod.SchedulerService, apply_files: list[str],
                         seed_files: list[str] | None = None) -> bool:
    """``--apply`` files (validated with the stored set, replacing what they name; a problem is
    fatal: False after printing it, nothing applied) and, from ``--apply-missing`` files, the
    documents of each kind the store holds none of (a starter set: once an operator has applied a
    policy or a deployment, restarts leave that kind alone, deleted documents included). Seeds
    that do not validate with the rest are logged and skipped, not fatal: a restart must not fail
    on a starter file the store has outgrown."""
    try:
        texts = _read(list(apply_files))
        seed_texts = _read(list(seed_files or []))
        stored = await svc.spec_store.all()
        kinds = {s.kind for s in stored} | {h.kind for h in admin_specs.declared(texts)}  # -f wins over a seed
        seeds = _seeds(seed_texts, kinds)
        proposal = admin_specs.propose(stored, texts) if texts else None
    except OSError as exc:
        print(str(exc), file=sys.stderr)
        return False
    except spec.SpecError as exc:
        for issue in exc.issues:
            print(str(issue), file=sys.stderr)
        return False
    if seeds:
        try:
            proposal = admin_specs.propose(stored, texts + seeds)
        except spec.SpecError as exc:
            log.warning("event=seed_specs_skipped files=%s errors=%r", ",".join(f for f, _ in seeds),
                        [str(i) for i in exc.issues][:20])
    if proposal is None:
        return True
    done = await svc.spec_store.apply(proposal.submitted, svc.clock.now())
    for kind, name, action in done:
        log.info("event=applied_at_start kind=%s name=%s action=%s", kind, name, action)
    return True


async def _serve(config: config_mod.SchedulerConfig, apply_files: list[str], seed_files: list[str] | None = None) -> int:
    svc = service_mod.SchedulerService(config)
    if not await apply_at_start(svc, apply_files, seed_files):
        await svc.store.close()
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await svc.start()
    try:
        await stop.wait()
    finally:
        clean = await svc.stop()
    if not clean:
        # A shutdown step was left behind (logged as event=stop_overran): asyncio would wait for
        # it for ever at exit, so the process ends here, its lease already released.
        log.error("event=exit_forced reason='a shutdown step was left behind'")
        logging.shutdown()
        os._exit(1)
    return 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    try:
        config = build_config(args)
    except (ValueError, pydantic.ValidationError) as exc:
        errors = exc.errors(include_url=False) if isinstance(exc, pydantic.ValidationError) else None
        if errors:
            for e in errors:
                field = ".".join(str(p) for p in e["loc"])
                message = e["msg"].removeprefix("Value error, ")
                print(f"scheduler config: {field + ': ' if field else ''}{message}", file=sys.stderr)
        else:
            print(f"scheduler config: {exc}", file=sys.stderr)
        return 1
    try:
        return uvloop.run(_serve(config, args.apply_files, args.seed_files))
    except (auth.CredentialError, OSError, ValueError) as exc:
        print(f"scheduler: {exc}", file=sys.stderr)
        return 1
