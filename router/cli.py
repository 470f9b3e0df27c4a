"""``meridian router``: run the global OpenAI-compatible endpoint.

Exit codes: 0 after a clean stop, 1 on invalid configuration (every problem printed with its field)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import signal
import sys

import pydantic
import uvloop

from router import auth, config as config_mod, policies
from router.app import Router

log = logging.getLogger("meridian.router")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML file of router settings (flags override it)")
    parser.add_argument("--listen", help="HOST:PORT to serve on (default 127.0.0.1:8080)")
    parser.add_argument("--workers", type=int, help="processes sharing the port with SO_REUSEPORT (default 1)")
    parser.add_argument("--metrics-port", type=int,
                        help="serve /metrics on this port (not on the client port); worker i on this port + i "
                             "(default 0: on the client port)")
    parser.add_argument("--router-id", help="name in logs and reports (default hostname-port)")
    parser.add_argument("--region", help="client region this router serves (a latency-map region)")
    parser.add_argument("--trusted-region-header",
                        help="header set by your edge with the client's region (e.g. x-meridian-client-region)")
    parser.add_argument("--latency-map", action="append", dest="latency_map_files",
                        help="LatencyMap spec file with RTT overrides (repeatable)")
    parser.add_argument("--scheduler", dest="scheduler_address", help="HOST:PORT of the scheduler's RoutingService")
    parser.add_argument("--scheduler-token-file", metavar="PATH",
                        help="file holding the token presented to the scheduler (default: the environment "
                             "variable MERIDIAN_ROUTER_SCHEDULER_TOKEN)")
    parser.add_argument("--scheduler-tls-ca-file", metavar="PEM",
                        help="CA bundle that signed the scheduler's certificate: connect over TLS (default: plaintext)")
    parser.add_argument("--scheduler-tls-cert-file", metavar="PEM",
                        help="client certificate, for a scheduler that requires mutual TLS")
    parser.add_argument("--scheduler-tls-key-file", metavar="PEM", help="unencrypted private key of the client certificate")
    parser.add_argument("--scheduler-tls-server-name", metavar="NAME",
                        help="verify the scheduler's certificate against NAME instead of the --scheduler host")
    parser.add_argument("--tls-cert-file", metavar="PEM",
                        help="certificate chain to serve HTTPS with (with --tls-key-file); reloaded when it changes")
    parser.add_argument("--tls-key-file", metavar="PEM", help="unencrypted private key of --tls-cert-file")
    parser.add_argument("--upstream-tls-ca-file", metavar="PEM",
                        help="CA bundle that signed the certificates of https:// replicas (default: system trust)")
    parser.add_argument("--upstream-tls-cert-file", metavar="PEM",
                        help="client certificate for https:// replicas that require mutual TLS")
    parser.add_argument("--upstream-tls-key-file", metavar="PEM", help="unencrypted key of --upstream-tls-cert-file")
    parser.add_argument("--upstream-tls-server-name", metavar="NAME",
                        help="verify every https:// replica's certificate against NAME instead of its address "
                             "(replicas sharing one certificate at changing pod IPs)")
    parser.add_argument("--routes-file", help="static routing table (YAML) to run without a scheduler")
    parser.add_argument("--lkg-store", choices=["file", "redis", "none"], help="where the last-known-good table lives")
    parser.add_argument("--lkg-path", help="last-known-good table file")
    parser.add_argument("--redis-url", help="redis://host:port/db for shared rate limits, API keys, LKG table")
    parser.add_argument("--api-keys-file", help="YAML file of hashed API keys")
    parser.add_argument("--api-keys-in-redis", action="store_true", default=None,
                        help="look API keys up in Redis (hash meridian:router:apikeys)")
    parser.add_argument("--rate-limit-rps", type=float, dest="default_rate_limit_rps",
                        help="default requests/s per API key (0: unlimited)")
    parser.add_argument("--rate-limit-burst", type=int, dest="default_rate_limit_burst",
                        help="default burst per API key")
    parser.add_argument("--policy", help=f"default routing policy: {', '.join(policies.names())} (default latency)")
    parser.add_argument("--max-body-bytes", type=int, help="largest request body accepted (413 beyond)")
    parser.add_argument("--max-header-line-bytes", type=int,
                        help="longest request line or header line accepted (431 beyond; default 8190)")
    parser.add_argument("--max-headers", type=int, help="most headers in a request (431 beyond; default 100)")
    parser.add_argument("--max-concurrent-streams-per-key", type=int, dest="default_max_concurrent_streams",
                        help="streaming requests one API key may have open at once (429 beyond; default 0: unlimited)")
    parser.add_argument("--request-timeout-s", type=float, help="deadline of one request, upper bound")
    parser.add_argument("--max-in-flight-per-replica", type=int, help="admission limit per model = this x replicas")
    parser.add_argument("--queue-size-per-model", type=int, help="requests that may wait for admission per model")
    parser.add_argument("--upstream-api-key-file", metavar="PATH",
                        help="file holding the API key sent to replicas, SGLang's --api-key (default: the "
                             "environment variable MERIDIAN_UPSTREAM_API_KEY)")
    parser.add_argument("--no-health-checks", action="store_true", help="disable active /health checks")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--hash-key", action="store_true",
                        help="read an API key from stdin (one line) and print its stored, hashed form; exit")


def _overrides(args: argparse.Namespace) -> dict:
    out = {k: getattr(args, k, None) for k in (
        "workers", "metrics_port", "router_id", "region", "trusted_region_header", "scheduler_address", "scheduler_token_file",
        "scheduler_tls_ca_file", "scheduler_tls_cert_file", "scheduler_tls_key_file", "scheduler_tls_server_name",
        "tls_cert_file", "tls_key_file",
        "upstream_tls_ca_file", "upstream_tls_cert_file", "upstream_tls_key_file", "upstream_tls_server_name",
        "max_header_line_bytes",
        "max_headers", "default_max_concurrent_streams",
        "routes_file", "lkg_store", "lkg_path", "redis_url", "api_keys_file", "api_keys_in_redis",
        "default_rate_limit_rps", "default_rate_limit_burst", "policy", "max_body_bytes", "request_timeout_s",
        "max_in_flight_per_replica", "queue_size_per_model", "upstream_api_key_file", "log_level")}
    if args.latency_map_files:
        out["latency_map_files"] = tuple(args.latency_map_files)
    if args.listen:
        host, _, port = args.listen.rpartition(":")
        out["listen_host"] = host or "0.0.0.0"
        out["listen_port"] = port
    if args.no_health_checks:
        out["health"] = {"enabled": False}
    return out


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")


async def serve(cfg: config_mod.RouterConfig) -> None:
    """Run one router instance until SIGTERM/SIGINT."""
    router = Router(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await router.start()
    try:
        await stop.wait()
    finally:
        log.info("event=router_stopping router_id=%s", router.router_id)
        await router.stop()


def _worker(cfg_json: str, index: int) -> None:
    cfg = config_mod.RouterConfig.model_validate_json(cfg_json)
    # Each worker has its own /metrics port (metrics_port + index): a scrape of the shared port
    # reaches one worker at random.
    cfg = cfg.model_copy(update={"router_id": f"{cfg.effective_router_id}-w{index}",
                                 "metrics_port": cfg.metrics_port + index if cfg.metrics_port else 0})
    setup_logging(cfg.log_level)
    uvloop.run(serve(cfg))


def run(args: argparse.Namespace) -> int:
    if args.hash_key:
        # From stdin, never argv: a key on the command line shows in `ps` to every local user.
        key = sys.stdin.readline().strip()
        if not key:
            print("meridian router --hash-key: give the API key on stdin, e.g. "
                  "`meridian router --hash-key < key.txt`", file=sys.stderr)
            return 1
        print(auth.hash_key(key))
        return 0
    try:
        cfg = config_mod.load(args.config, _overrides(args))
    except (pydantic.ValidationError, ValueError, OSError) as exc:
        print(f"meridian router: invalid configuration:\n{exc}", file=sys.stderr)
        return 1
    setup_logging(cfg.log_level)
    if cfg.workers == 1:
        uvloop.run(serve(cfg))
        return 0
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(cfg.model_dump_json(), i), name=f"router-w{i}")
             for i in range(cfg.workers)]
    for p in procs:
        p.start()

    def forward(signum, frame):
        for p in procs:
            if p.is_alive():
                p.terminate()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for p in procs:
        p.join()
    return 0 if all(p.exitcode == 0 for p in procs) else 1
