"""The router's client listener: aiohttp's HTTP protocol on a socket the router opens itself, with
limits on request heads, JSON answers to malformed requests, and optional TLS (``router.tls``:
the certificate is reloaded from its files when they change, open connections keep theirs).

Why not ``web.TCPSite``: aiohttp answers a request it cannot parse (a header line over the limit,
too many headers, HTTPS sent to an HTTP port) with a text/plain 400 and logs it at ERROR with a
traceback; a client can cause both at will. Here such a request gets the router's OpenAI-shaped
JSON error (431 for a head over the limits, 400 otherwise), is counted, and is logged at debug.

Head limits hold while the head is parsed (aiohttp's parser): a request line or header line of at
most ``max_header_line_bytes`` and at most ``max_headers`` headers, so one connection's head holds
at most about their product in memory. The body limit (``max_body_bytes``) is the proxy's (413).

TLS: the listening socket's context has an SNI callback that hands each new connection the
current context, so a rotated certificate is served to new connections at once while open ones
keep theirs (nothing is dropped). The files are checked for a change (size, mtime, inode) every
``reload_interval_s``; a pair that does not load (a half-written rotation) keeps the old one
serving, logged and counted, and is tried again next time."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import ssl
from collections.abc import Callable

from aiohttp import http_exceptions, web, web_protocol

from router import errors

log = logging.getLogger("meridian.router.listener")

__all__ = ["HeadLimits", "listen"]


@dataclasses.dataclass(frozen=True)
class HeadLimits:
    max_header_line_bytes: int = 8190
    max_headers: int = 100


def _bad_head(exc: http_exceptions.HttpProcessingError, limits: HeadLimits) -> errors.ApiError:
    if isinstance(exc, http_exceptions.LineTooLong):
        return errors.ApiError(431, f"A request line or header line is longer than {limits.max_header_line_bytes} "
                                    f"bytes; send shorter headers", code="request_header_fields_too_large")
    if "Too many headers" in str(exc.message):
        return errors.ApiError(431, f"The request has more than {limits.max_headers} headers; send fewer",
                               code="request_header_fields_too_large")
    detail = exc.message if isinstance(exc.message, str) and len(exc.message) < 200 else type(exc).__name__
    return errors.ApiError(400, f"Malformed HTTP request: {detail}", code="bad_http_request")


class _Protocol(web_protocol.RequestHandler):
    """aiohttp's request handler; malformed requests get a JSON error instead of a logged traceback."""

    __slots__ = ("_limits", "_on_bad_request")

    def __init__(self, manager: web.Server, *, on_bad_request: Callable[[int, str], None], limits: HeadLimits,
                 **kwargs):
        super().__init__(manager, max_line_size=limits.max_header_line_bytes,
                         max_field_size=limits.max_header_line_bytes, max_headers=limits.max_headers, **kwargs)
        self._on_bad_request = on_bad_request
        self._limits = limits

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status != 400 or not isinstance(exc, http_exceptions.HttpProcessingError):
            return super().handle_error(request, status, exc, message)  # a bug of ours: logged with traceback
        err = _bad_head(exc, self._limits)
        self._on_bad_request(err.status, err.code or "")
        log.debug("event=bad_http_request status=%d code=%s remote=%s detail=%s", err.status, err.code,
                  request.remote, exc.message)
        resp = err.response()
        resp.force_close()
        return resp


async def listen(runner: web.AppRunner, host: str, port: int, *, limits: HeadLimits,
                 on_bad_request: Callable[[int, str], None], ssl_context: ssl.SSLContext | None = None,
                 reuse_port: bool = False, backlog: int = 2048) -> asyncio.AbstractServer:
    """Serve ``runner``'s application on ``host:port`` (after ``runner.setup()``); close the returned
    server before ``runner.cleanup()``."""
    loop = asyncio.get_running_loop()
    manager = runner.server
    assert manager is not None, "runner.setup() first"

    def protocol() -> _Protocol:
        return _Protocol(manager, loop=loop, access_log=None, on_bad_request=on_bad_request, limits=limits)

    server = await loop.create_server(protocol, host, port, ssl=ssl_context, backlog=backlog,
                                      reuse_port=reuse_port or None)
    for sock in server.sockets:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return server
