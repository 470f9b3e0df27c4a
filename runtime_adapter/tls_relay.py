"""The replica's TLS: an HTTPS listener beside the engine that relays every request to the engine on
loopback, so the hop from routers to a replica is encrypted whatever network it crosses.

SGLang's own TLS flags are not relied on (their behaviour is unverified for 0.5.23); the engine
binds 127.0.0.1 only and this relay is the replica's one network-facing port. It is a byte relay,
not a proxy with opinions: method, path, query, headers (hop-by-hop ones dropped) and body go
through as they are, and the answer comes back chunk by chunk as the engine writes it (a token
stream is never buffered). A client that goes away closes the engine connection, which SGLang
treats as an abort. The certificate and key are the kernel's ``meridian.tls.ServerTls``: reloaded
when the files change (new connections get the new certificate, open ones keep theirs).

In a pod it runs inside ``serve``; beside a local engine (the agents' local backend) it is its own
process, ``python -m runtime_adapter relay`` (``main``), which the supervisor starts and watches as
it does the engine (``relay_process``). It is given the key file's path, never the key."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

import aiohttp
from aiohttp import web

from meridian import tls as tls_files

log = logging.getLogger("runtime_adapter.tls_relay")

# RFC 9110 7.6.1 hop-by-hop fields, plus the framing aiohttp sets itself on each side.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                        "transfer-encoding", "upgrade", "host", "content-length"})
CHUNK_BYTES = 64 * 1024


def _forward(headers) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}


class TlsRelay:
    """HTTPS on ``host:port`` relayed to ``upstream`` (``http://127.0.0.1:<engine port>``).
    ``start()`` listens (port 0: a free one, then in ``port``); ``stop()`` closes it."""

    def __init__(self, upstream: str, tls: tls_files.ServerTls, *, host: str, port: int,
                 session: aiohttp.ClientSession | None = None):
        self.upstream = upstream.rstrip("/")
        self.tls = tls
        self.host, self.port = host, port
        self._session = session
        self._own_session = session is None
        self._runner: web.AppRunner | None = None
        self._watch: asyncio.Task | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=0)  # bodies stream through: no size cap of our own
        app.router.add_route("*", "/{tail:.*}", self._relay)
        return app

    async def _relay(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = request.content if request.body_exists else None
        try:
            async with self._session.request(
                    request.method, self.upstream + request.rel_url.raw_path_qs, headers=_forward(request.headers),
                    data=body, allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)) as up:
                resp = web.StreamResponse(status=up.status, reason=up.reason, headers=_forward(up.headers))
                if up.content_length is not None and "chunked" not in up.headers.get("Transfer-Encoding", ""):
                    resp.content_length = up.content_length
                await resp.prepare(request)
                async for chunk in up.content.iter_chunked(CHUNK_BYTES):
                    await resp.write(chunk)
                await resp.write_eof()
                return resp
        except aiohttp.ClientConnectionError as exc:
            if request.transport is None or request.transport.is_closing():
                raise  # the client went away mid-answer: nothing to answer
            log.warning("event=relay_upstream_error path=%s error=%r", request.path, str(exc))
            return web.json_response({"error": "engine unreachable"}, status=502)

    async def start(self) -> None:
        if self._session is None:
            # No connection cap of our own (aiohttp's default is 100): the engine bounds its
            # concurrency itself (max_running_requests, its queue), a relay must not lower it.
            self._session = aiohttp.ClientSession(auto_decompress=False, connector=aiohttp.TCPConnector(limit=0))
        # handler_cancellation: a client that disconnects cancels its relay, closing the engine
        # connection (an abort, as when the client talks to the engine directly).
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.tls.context)
        await site.start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]
        self._watch = asyncio.create_task(self.tls.watch(), name="tls-reload")
        log.info("event=tls_relay_listening host=%s port=%d upstream=%s", self.host, self.port, self.upstream)

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._own_session and self._session is not None:
            await self._session.close()


EXIT_CONFIG = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m runtime_adapter relay",
                                     description="HTTPS on --host:--port relayed to an engine on loopback (--upstream); "
                                                 "the certificate and key are reloaded when their files change.")
    parser.add_argument("--upstream", required=True, help="the engine, http://127.0.0.1:PORT (loopback only)")
    parser.add_argument("--host", default="0.0.0.0", help="address the HTTPS port binds (default 0.0.0.0)")
    parser.add_argument("--port", type=int, required=True, help="the HTTPS port (the replica's endpoint)")
    parser.add_argument("--tls-cert-file", required=True, metavar="FILE", help="PEM certificate chain, leaf first")
    parser.add_argument("--tls-key-file", required=True, metavar="FILE",
                        help="its unencrypted PEM key (a path: the key never goes on a command line)")
    parser.add_argument("--tls-reload-interval-s", type=float, default=5.0,
                        help="how often the files are checked for a change (default 5)")
    parser.add_argument("--replica-id", default="replica", help="for logs")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def check_args(args: argparse.Namespace) -> str | None:
    """Why these settings cannot run (naming the flag), or None."""
    if not 1 <= args.port <= 65535:
        return f"--port {args.port} is out of range; valid: 1..65535"
    if not args.upstream.startswith(("http://127.", "http://localhost:", "http://[::1]:")):
        return f"--upstream {args.upstream!r} must be the engine on loopback (http://127.0.0.1:PORT)"
    if args.tls_reload_interval_s <= 0:
        return "--tls-reload-interval-s must be > 0"
    try:
        tls_files.read_key_pair(args.tls_cert_file, args.tls_key_file, cert_setting="--tls-cert-file",
                                key_setting="--tls-key-file")
    except tls_files.TlsFileError as exc:
        return str(exc)
    return None


async def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; 0 then, 1 when the port cannot be bound."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tls = tls_files.ServerTls(args.tls_cert_file, args.tls_key_file, reload_interval_s=args.tls_reload_interval_s)
    relay = TlsRelay(args.upstream, tls, host=args.host, port=args.port)
    try:
        await relay.start()
    except OSError as exc:
        log.error("event=relay_bind_failed replica=%s host=%s port=%d error=%r", args.replica_id, args.host,
                  args.port, str(exc))
        await relay.stop()
        return 1
    try:
        await stop.wait()
    finally:
        log.info("event=tls_relay_stopping replica=%s port=%d", args.replica_id, relay.port)
        await relay.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, force=True,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    problem = check_args(args)
    if problem is not None:
        log.error("event=config_error replica=%s error=%r", args.replica_id, problem)
        print(f"runtime_adapter relay: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    return asyncio.run(run(args))


__all__ = ["TlsRelay", "check_args", "main", "run"]
