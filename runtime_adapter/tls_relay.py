"""The replica's TLS: an HTTPS listener beside the engine that relays every request to the engine on
loopback, so the hop from routers to a replica is encrypted whatever network it crosses.

SGLang's own TLS flags are not relied on (their behaviour is unverified for 0.5.23); the engine
binds 127.0.0.1 only and this relay is the replica's one network-facing port. It is a byte relay,
not a proxy with opinions: method, path, query, headers (hop-by-hop ones dropped) and body go
through as they are, and the answer comes back chunk by chunk as the engine writes it (a token
stream is never buffered). A client that goes away closes the engine connection, which SGLang
treats as an abort. The certificate and key are the kernel's ``meridian.tls.ServerTls``: reloaded
when the files change (new connections get the new certificate, open ones keep theirs)."""

from __future__ import annotations

import asyncio
import logging

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
            self._session = aiohttp.ClientSession(auto_decompress=False)
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


__all__ = ["TlsRelay"]
