"""The router's client listener: an HTTP/1.1 server protocol on ``httptools`` (llhttp), with limits
on request heads and bodies, JSON answers to malformed requests, and optional TLS (``router.tls``).

Why its own protocol and not aiohttp's server: a request through aiohttp's server (building a
``web.Request``, dispatching it, preparing a ``web.Response``) measured 57 us of CPU against 12 us
for the same request answered by a protocol on httptools (one process, wrk, this machine), and
that difference was most of the router's cost per short request (docs/router.md, "CPU time per
request"). What this module does, per connection:

- parses requests as bytes arrive; a request is handed to the handler once its body is complete
  (the router relays whole bodies); requests a client pipelines wait their turn, and reading
  pauses while more than a few wait;
- runs each request's handler as a task; the client closing the connection cancels it (how the
  proxy learns to close the replica's connection, which is how SGLang learns to abort);
- keeps connections alive per HTTP/1.1 (``Connection: close`` and HTTP/1.0 end them) and closes
  one idle for ``keepalive_timeout_s``; answers ``Expect: 100-continue``; ``HEAD`` gets the head.

Limits, each answered with the router's OpenAI-shaped JSON error, counted (``on_bad_request``),
logged at debug and followed by closing the connection: a request line or header line over
``max_header_line_bytes`` or more than ``max_headers`` headers (431; a head is never buffered beyond
about their product), a body over ``max_body_bytes`` whether declared or chunked (413, refused as
soon as it is known, never buffered beyond the limit), bytes that are not HTTP (400; TLS sent to a
plaintext port is named as such).

TLS: the listening socket's context has an SNI callback that hands each new connection the
current context, so a rotated certificate is served to new connections at once while open ones
keep theirs (``router.tls``)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable

import httptools
from multidict import CIMultiDict

from meridian import waits
from router import errors
from router.responses import Response, StreamResponse

log = logging.getLogger("meridian.router.listener")

__all__ = ["HeadLimits", "Listener", "Request", "listen"]

# Requests a client may pipeline before the listener stops reading its connection.
_MAX_QUEUED = 8
_SWEEP_S = 1.0
# On shutdown, a request still being received is waited for only while its bytes keep coming.
_STALLED_S = 1.0
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

_NO_HEADERS: CIMultiDict = CIMultiDict()

Handler = Callable[["Request"], Awaitable["Response | StreamResponse"]]


@dataclasses.dataclass(frozen=True)
class HeadLimits:
    max_header_line_bytes: int = 8190
    max_headers: int = 100


class Request:
    """One complete request, as the handler sees it."""

    __slots__ = ("body", "connection", "extra_head", "headers", "keep_alive", "match_info", "method", "path",
                 "raw_path", "version")

    def __init__(self, method: str, raw_path: str, headers: CIMultiDict, body: bytes, version: str,
                 keep_alive: bool, connection: _Connection):
        self.method = method
        self.raw_path = raw_path
        self.path = raw_path.split("?", 1)[0]
        self.headers = headers
        self.body = body
        self.version = version
        self.keep_alive = keep_alive
        self.connection = connection
        self.match_info: dict[str, str] = {}
        # Header lines (bytes) every answer to this request carries, whoever builds it (CORS).
        self.extra_head = b""


def _id_line(rid: str) -> bytes:
    """The ``X-Request-Id`` header line of an answer the listener writes itself (none without an id)."""
    return b"X-Request-Id: " + rid.encode("ascii") + b"\r\n" if rid else b""


class _Refusal:
    """An error the listener answers itself, with the header lines the request's head called for
    (``Listener.extra_head``: CORS), empty when the head was not read."""

    __slots__ = ("error", "extra")

    def __init__(self, error: errors.ApiError, extra: bytes):
        self.error = error
        self.extra = extra


class _Refused(Exception):
    """Raised from a parser callback: the request breaks a limit; answer ``error`` and close."""

    def __init__(self, error: errors.ApiError):
        super().__init__(error.message)
        self.error = error


def _line_too_long(limits: HeadLimits) -> errors.ApiError:
    return errors.ApiError(431, f"A request line or header line is longer than {limits.max_header_line_bytes} "
                                f"bytes; send shorter headers", code="request_header_fields_too_large")


def _malformed(exc: Exception, first: bytes) -> errors.ApiError:
    if first[:1] == b"\x16":
        detail = ("the bytes look like a TLS handshake: HTTPS sent to a plaintext port; use http:// here, "
                  "or serve TLS (tls_cert_file, tls_key_file)")
    else:
        detail = str(exc)[:200] or type(exc).__name__
    return errors.ApiError(400, f"Malformed HTTP request: {detail}", code="bad_http_request")


# After an error response, how long the rest of what the client sends is read and dropped before
# the connection closes: closing with unread data resets it (RST), which can destroy the answer
# before the client or a load balancer has read it (RFC 9112, 9.6).
_LINGER_S = 2.0
# ... and at most this much of it: a flood past it is cut off at once.
_LINGER_BYTES = 4 << 20


class _Connection(asyncio.Protocol):
    """One client connection (see the module's docstring)."""

    def __init__(self, listener: Listener):
        self._listener = listener
        self._limits = listener.limits
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self.peer = ""
        self._queue: collections.deque = collections.deque()
        self._task: asyncio.Task | None = None
        self._closed = False
        self._refused = False
        self._reading_paused = False
        self._write_paused = False
        self._drain: asyncio.Future | None = None
        self.streaming: StreamResponse | None = None
        self.idle_since = time.monotonic()
        self._first = b""
        self._head_bytes = 0
        self._final = False  # answer what was read, then close (an Upgrade request)
        self._discarded = 0
        self._new_message()

    def _new_message(self) -> None:
        self._url = b""
        self._headers: list[tuple[str, str]] = []
        self._parsed: CIMultiDict = _NO_HEADERS
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._trailers = 0
        self._in_head = False

    # ------------------------------------------------------------ transport events

    def connection_made(self, transport) -> None:
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else ""
        self._listener.connections.add(self)

    def connection_lost(self, exc) -> None:
        self._closed = True
        self._listener.connections.discard(self)
        if self._task is not None:
            self._task.cancel()
        self._queue.clear()
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_exception(ConnectionResetError("the client closed the connection"))
        self._drain = None

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_result(None)
        self._drain = None

    def data_received(self, data: bytes) -> None:
        if self._refused:
            # An error was answered: what follows is read and dropped (_LINGER_S, _LINGER_BYTES).
            self._discarded += len(data)
            if self._discarded > _LINGER_BYTES and self._transport is not None:
                self._transport.close()
            return
        self.idle_since = time.monotonic()
        if not self._first:
            self._first = data[:1]
        if self._in_head or not self._url:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # The request was delivered without the upgrade (a server may ignore Upgrade); the
            # protocol it asks for is not served, so the connection ends after the answer.
            self._final = True
            self._pause_reading()
            return
        except httptools.HttpParserCallbackError as exc:
            refused = exc.__context__
            if isinstance(refused, _Refused):
                self._refuse(refused.error)
                return
            raise
        except httptools.HttpParserError as exc:
            self._refuse(_malformed(exc, self._first))
            return
        if self._in_head and self._head_bytes > self._head_cap():
            self._refuse(errors.ApiError(
                431, f"The request head exceeds {self._head_cap()} bytes; send shorter headers",
                code="request_header_fields_too_large"))

    def _head_cap(self) -> int:
        limits = self._limits
        return limits.max_header_line_bytes * (limits.max_headers + 2)

    # ------------------------------------------------------------ parser callbacks

    def on_message_begin(self) -> None:
        self._new_message()
        self._in_head = True

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self._limits.max_header_line_bytes:
            raise _Refused(_line_too_long(self._limits))

    def on_header(self, name: bytes, value: bytes) -> None:
        limits = self._limits
        if len(name) + len(value) + 2 > limits.max_header_line_bytes:
            raise _Refused(_line_too_long(limits))
        if not self._in_head:
            # A trailer of a chunked body: counted against the limit, not kept.
            self._trailers += 1
            if self._trailers > limits.max_headers:
                raise _Refused(errors.ApiError(
                    431, f"The request has more than {limits.max_headers} trailers; send fewer",
                    code="request_header_fields_too_large"))
            return
        if len(self._headers) >= limits.max_headers:
            raise _Refused(errors.ApiError(
                431, f"The request has more than {limits.max_headers} headers; send fewer",
                code="request_header_fields_too_large"))
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        headers = self._parsed = CIMultiDict(self._headers)
        length = headers.get("Content-Length")
        limit = self._listener.max_body_bytes
        if length is not None and length.isdigit() and int(length) > limit:
            raise _Refused(errors.too_large(limit))
        if self._parser.should_upgrade() and ((length is not None and length != "0")
                                              or "Transfer-Encoding" in headers):
            # The parser hands back the bytes after the head of an Upgrade request instead of its
            # body: a request with one is refused rather than served without it.
            raise _Refused(errors.ApiError(
                400, "A request with a body cannot ask to upgrade the protocol; send it without "
                     "the Upgrade header", code="bad_http_request"))
        expect = headers.get("Expect")
        if (expect is not None and expect.lower() == "100-continue" and self._task is None and not self._queue
                and self._parser.get_http_version() != "1.0"):
            self._transport.write(_CONTINUE)  # type: ignore[union-attr]

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self._listener.max_body_bytes:
            raise _Refused(errors.too_large(self._listener.max_body_bytes))
        self._body.append(body)

    def on_message_complete(self) -> None:
        parser = self._parser
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        headers = self._parsed
        request = Request(parser.get_method().decode("latin-1"), self._url.decode("latin-1"), headers, body,
                          parser.get_http_version(), parser.should_keep_alive(), self)
        self._new_message()
        self._queue.append(request)
        if self._task is None:
            self._next()
        elif len(self._queue) >= _MAX_QUEUED:
            self._pause_reading()

    # ------------------------------------------------------------ serving

    def _next(self) -> None:
        item = self._queue.popleft()
        if self._reading_paused and len(self._queue) < _MAX_QUEUED // 2:
            self._resume_reading()
        if isinstance(item, _Refusal):
            self._write_error(item)
            return
        self._task = self._listener.loop.create_task(self._serve(item))

    async def _serve(self, request: Request) -> None:
        listener = self._listener
        keep_alive = request.keep_alive
        try:
            try:
                resp = await listener.handler(request)
                if isinstance(resp, StreamResponse):
                    if not resp.ended:
                        if not resp.prepared:
                            await resp.prepare(request)
                        await resp.write_eof()
                    keep_alive = keep_alive and resp.keep_alive
                elif not self._closed:
                    keep_alive = keep_alive and not self.closing
                    self._transport.write(resp.encode(keep_alive=keep_alive,  # type: ignore[union-attr]
                                                      head_only=request.method == "HEAD",
                                                      extra=request.extra_head))
            except (ConnectionError, asyncio.CancelledError):
                raise
            except Exception:
                rid = listener.new_id()
                log.exception("event=handler_failed method=%s path=%s request_id=%s", request.method,
                              request.path[:200], rid)
                if self.streaming is not None and self.streaming.head_sent:
                    # Mid-stream: no status can be sent any more; the cut tells the client.
                    self.abort()
                    return
                if not self._closed:
                    self._transport.write(errors.ApiError(  # type: ignore[union-attr]
                        500, "The router failed on this request; retry", type_="server_error",
                        code="internal_error").response().encode(
                            keep_alive=False, extra=request.extra_head + _id_line(rid)))
                keep_alive = False
        except ConnectionError:
            keep_alive = False
        except asyncio.CancelledError:
            return  # the connection was lost
        finally:
            self._task = None
            self.streaming = None
            self.idle_since = time.monotonic()
        if self._closed:
            return
        if not keep_alive or self.closing:
            self._transport.close()  # type: ignore[union-attr]
            self._closed = True
        elif self._queue:
            self._next()

    async def send(self, data: bytes) -> None:
        """Write ``data``; wait while the client's socket is backed up. Raises ConnectionResetError
        once the client has gone."""
        if self._closed or self._transport.is_closing():  # type: ignore[union-attr]
            raise ConnectionResetError("the client closed the connection")
        self._transport.write(data)  # type: ignore[union-attr]
        if self._write_paused:
            if self._drain is None:
                self._drain = self._listener.loop.create_future()
            await self._drain

    def _refuse(self, error: errors.ApiError) -> None:
        """Stop reading this connection; answer ``error`` after what is being served, then close."""
        self._refused = True
        self._pause_reading()
        self._listener.on_bad_request(error.status, error.code or "")
        listener = self._listener
        rid = listener.new_id()
        log.debug("event=bad_http_request status=%d code=%s remote=%s request_id=%s detail=%s", error.status,
                  error.code, self.peer, rid, error.message)
        extra = listener.extra_head(self._parsed) if listener.extra_head is not None and self._parsed is not _NO_HEADERS \
            else b""
        refusal = _Refusal(error, extra + _id_line(rid))
        if self._task is None and not self._queue:
            self._write_error(refusal)
        else:
            self._queue.append(refusal)

    def _write_error(self, refusal: _Refusal) -> None:
        if self._closed:
            return
        transport = self._transport
        transport.write(refusal.error.response().encode(keep_alive=False, extra=refusal.extra))  # type: ignore[union-attr]
        self._closed = True
        if not transport.can_write_eof():  # type: ignore[union-attr]
            transport.close()  # type: ignore[union-attr]
            return
        # Lingering close: end our side, read and drop what the client still sends, close once it
        # has closed its side or after _LINGER_S.
        transport.write_eof()  # type: ignore[union-attr]
        transport.resume_reading()  # type: ignore[union-attr]
        self._listener.loop.call_later(_LINGER_S, transport.close)  # type: ignore[union-attr]

    def _pause_reading(self) -> None:
        if not self._reading_paused and not self._closed:
            self._reading_paused = True
            self._transport.pause_reading()  # type: ignore[union-attr]

    def _resume_reading(self) -> None:
        if self._reading_paused and not self._closed and not self._refused:
            self._reading_paused = False
            self._transport.resume_reading()  # type: ignore[union-attr]

    @property
    def closing(self) -> bool:
        """The listener is stopping, or the client asked for a protocol upgrade: this connection
        ends after the response being served."""
        return self._listener.closing or self._final

    @property
    def serving(self) -> bool:
        """Serving a request or holding queued ones (received whole)."""
        return self._task is not None or bool(self._queue)

    @property
    def busy(self) -> bool:
        """Serving a request, holding queued ones, or in the middle of receiving one."""
        return self.serving or (not self._closed and not self._refused and (self._in_head or bool(self._url)))

    def close(self) -> None:
        if not self._closed and self._transport is not None:
            self._transport.close()
            self._closed = True

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()
        self._closed = True


class Listener:
    """The listening sockets, their connections and the sweeper that closes idle ones."""

    def __init__(self, handler: Handler, *, limits: HeadLimits, max_body_bytes: int,
                 on_bad_request: Callable[[int, str], None], keepalive_timeout_s: float,
                 extra_head: Callable[[CIMultiDict], bytes] | None = None, new_id: Callable[[], str] | None = None):
        self.handler = handler
        # An id for each answer the listener writes itself (X-Request-Id, and the debug log line);
        # "" without one: neither header nor id then.
        self.new_id: Callable[[], str] = new_id or str
        # Header lines for an answer the listener writes itself (a 413 past the head), from the
        # request's headers; the handler sets ``Request.extra_head`` for the answers it gives.
        self.extra_head = extra_head
        self.limits = limits
        self.max_body_bytes = max_body_bytes
        self.on_bad_request = on_bad_request
        self.keepalive_timeout_s = keepalive_timeout_s
        self.connections: set[_Connection] = set()
        self.closing = False
        self.loop = asyncio.get_running_loop()
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task | None = None

    @property
    def sockets(self):
        return self._server.sockets if self._server is not None else ()

    async def start(self, host: str, port: int, *, ssl_context: ssl.SSLContext | None, reuse_port: bool,
                    backlog: int) -> None:
        self._server = await self.loop.create_server(lambda: _Connection(self), host, port, ssl=ssl_context,
                                                     backlog=backlog, reuse_port=reuse_port or None)
        for sock in self._server.sockets:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sweeper = self.loop.create_task(self._sweep(), name="listener-idle-sweeper")

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(_SWEEP_S)
            limit = time.monotonic() - self.keepalive_timeout_s
            # Idle: nothing being served and no byte for the timeout, a request half received
            # included (a client that stalls mid-head or mid-body holds a socket and its buffered
            # head for nothing: slowloris).
            for conn in [c for c in self.connections if not c.serving and c.idle_since < limit]:
                conn.close()

    def close(self) -> None:
        """Stop accepting; close the connections that are not serving a request."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for conn in [c for c in self.connections if not c.busy]:
            conn.close()

    async def shutdown(self, timeout_s: float) -> None:
        """After ``close``: wait up to ``timeout_s`` for the requests being served, then cut the rest."""
        self.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(
                c.serving or (c.busy and time.monotonic() - c.idle_since < _STALLED_S) for c in self.connections):
            # A request being received is waited for while its bytes keep coming; a stalled one is not.
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            conn.abort()
        if self._sweeper is not None:
            await waits.cancelled(self._sweeper)
            self._sweeper = None


async def listen(handler: Handler, host: str, port: int, *, limits: HeadLimits, max_body_bytes: int,
                 on_bad_request: Callable[[int, str], None], keepalive_timeout_s: float = 75.0,
                 ssl_context: ssl.SSLContext | None = None, reuse_port: bool = False,
                 backlog: int = 2048, extra_head: Callable[[CIMultiDict], bytes] | None = None,
                 new_id: Callable[[], str] | None = None) -> Listener:
    """Serve ``handler`` on ``host:port``; ``await listener.shutdown(...)`` to stop."""
    listener = Listener(handler, limits=limits, max_body_bytes=max_body_bytes, on_bad_request=on_bad_request,
                        keepalive_timeout_s=keepalive_timeout_s, extra_head=extra_head, new_id=new_id)
    await listener.start(host, port, ssl_context=ssl_context, reuse_port=reuse_port, backlog=backlog)
    return listener
