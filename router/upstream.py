"""A small HTTP/1.1 client for the proxy hot path: keep-alive connection pools, one per replica.

Why not ``aiohttp.ClientSession``: on the 2-core bench machine, a bare aiohttp server relaying short
requests to nginx (wrk, 32 connections, 5 interleaved 6 s runs) served 7.1k requests/s best (6.4k
median) through ClientSession and 20.5k (16.0k) through this client; with other jobs loading the
machine, 4.8k (3.2k) against 9.3k (7.0k). ClientSession spends its time on URL building, cookie
jars, tracing hooks and timeout objects that a proxy to known replicas does not need. The router
still uses one ClientSession for everything off the hot path (health checks).

What is ours and what is not: this module owns the connections (pools, one request at a time per
connection, back-pressure, cancellation by closing). Responses are parsed by ``httptools`` (llhttp,
the parser of Node.js and uvicorn): status line, headers, framing by Content-Length or chunked
transfer-encoding (decoded there), interim 1xx responses, keep-alive rules and the rejection of
malformed or ambiguous responses (duplicate Content-Length, Content-Length with chunked) are all
llhttp's. It replaced a hand-written parser and costs less CPU per response (1.9 against 3.0 us for
a short JSON answer, 8.6 against 21.7 us for a 16-chunk SSE stream, fed in-process); end to end,
``python -m bench.router`` could not tell the two apart on the shared bench machine.

The one framing fact llhttp knows but httptools does not expose is whether a body ends at
connection close (httptools has no ``llhttp_finish``), so the headers that frame a body
(Content-Length, Transfer-Encoding) are noted as they pass: a body with neither ends, complete,
when the replica closes the connection.

Contract: one request at a time per connection (no pipelining). A connection goes back to its pool
only after its response was read completely and the server allowed keep-alive; otherwise it is
closed, which is also how an abandoned request is cancelled upstream (the replica sees the
connection close). Bytes the replica sends beyond the response, or while no request is in flight,
make the connection untrustworthy: it is closed.
"""

from __future__ import annotations

import asyncio
import collections
import time

import httptools

# Where a connection is in its current exchange.
_IDLE, _HEAD, _BODY, _DONE = range(4)
# What a reader waits for.
_WANT_HEAD, _WANT_ALL, _WANT_CHUNK = 1, 2, 3
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 1024 * 1024
# Streaming responses: stop reading from the replica while this much is waiting for a slow client.
PAUSE_ABOVE_BYTES = 1024 * 1024
_PARSER_ERRORS = (httptools.HttpParserError, httptools.HttpParserUpgrade)


class UpstreamError(Exception):
    """A replica could not be reached or broke the protocol.

    ``kind`` is one of ``connect`` (no connection), ``reset`` (connection lost mid-request),
    ``timeout`` (the request's deadline passed) or ``protocol`` (an unparseable response)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class _Unsolicited(Exception):
    """Raised inside the parser when a response starts that no request asked for."""


class Connection(asyncio.Protocol):
    """One keep-alive connection to a replica; ``httptools`` parses what it receives.

    After ``send``: ``status`` and ``content_type`` are set once the final response head arrived
    (``read_head``), ``keep_alive`` says whether the replica allows another request on it, and
    ``complete`` whether the whole body was received."""

    __slots__ = (
        "pool", "transport", "closed", "idle_since", "received_any", "status", "content_type",
        "keep_alive", "_parser", "_state", "_framed", "_head_size", "_body", "_body_size", "_exc",
        "_waiter", "_want", "_paused", "_streaming",
    )

    def __init__(self, pool: Pool):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future | None = None
        # One parser for the connection's life: llhttp starts the next message after a complete
        # one, and a connection whose parser failed is closed, never reused.
        self._parser = httptools.HttpResponseParser(self)
        self._clear()

    def _clear(self) -> None:
        self.received_any = False
        self.status = 0
        self.content_type = b""
        self.keep_alive = True
        self._state = _IDLE
        self._framed = False
        self._head_size = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self._exc: UpstreamError | None = None
        self._want = 0
        self._paused = False
        self._streaming = False

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self._parser.feed_data(data)
        except _PARSER_ERRORS as exc:
            self._parser_failed(exc)
        else:
            if self._state == _HEAD:
                self._head_size += len(data)
                if self._head_size > MAX_HEAD_BYTES:
                    self._fail_protocol(f"response head over {MAX_HEAD_BYTES} bytes")
            elif self._body_size > MAX_BODY_BYTES:
                self._fail_protocol(f"response body over {MAX_BODY_BYTES} bytes")
        if self._streaming and not self._paused and self._body_size > PAUSE_ABOVE_BYTES and not self.closed:
            self._paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]
        self._wake()

    def eof_received(self) -> bool:
        return False  # let the transport close; connection_lost finishes the body if close-delimited

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        state = self._state
        if state == _BODY and not self._framed and self._exc is None:
            self._state = _DONE  # a close-delimited body ends here, complete
        elif (state == _HEAD or state == _BODY) and self._exc is None:
            self._exc = UpstreamError("reset", f"connection to {self.pool.authority} lost mid-response")
        self._wake()

    def _parser_failed(self, exc: Exception) -> None:
        if self._state == _DONE:
            # The response is whole; what followed it is not ours to read. Keep the response,
            # drop the connection.
            self.close()
            return
        if isinstance(exc.__context__, _Unsolicited):
            self._fail_protocol("data received while no request was in flight")
        elif isinstance(exc, httptools.HttpParserUpgrade):
            self._fail_protocol("switched protocols (101), which the router never asks for")
        else:
            self._fail_protocol(f"{type(exc).__name__}: {exc}")

    def _fail_protocol(self, reason: str) -> None:
        if self._exc is None:
            self._exc = UpstreamError("protocol", f"bad response from {self.pool.authority}: {reason}")
        self.close()

    # ------------------------------------------------------------ httptools callbacks

    def on_message_begin(self) -> None:
        if self._state != _HEAD:
            raise _Unsolicited()

    def on_header(self, name: bytes, value: bytes) -> None:
        # Names compared by length first: most headers are none of these three. A body is framed
        # by Content-Length or by a Transfer-Encoding ending in chunked; with any other transfer
        # coding llhttp, like RFC 9112 section 6.3, reads it to the connection's close.
        size = len(name)
        if size == 12:
            if name.lower() == b"content-type":
                self.content_type = value.strip()
        elif size == 14:
            if name.lower() == b"content-length":
                self._framed = True
        elif size == 17 and name.lower() == b"transfer-encoding":
            self._framed = value.rstrip().lower().endswith(b"chunked")

    def on_headers_complete(self) -> None:
        parser = self._parser
        status = parser.get_status_code()
        if status < 200:
            # Interim response (100 Continue, 103 Early Hints): llhttp completes it without a body
            # and parses the real one next.
            self.content_type = b""
            self._framed = False
            return
        self.status = status
        self.keep_alive = parser.should_keep_alive()
        self._state = _BODY

    def on_body(self, body: bytes) -> None:
        self._body.append(body)
        self._body_size += len(body)

    def on_message_complete(self) -> None:
        if self.status:
            self._state = _DONE

    # ------------------------------------------------------------ waiting

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._exc is not None:
            self._waiter = None
            waiter.set_exception(self._exc)
            return
        want = self._want
        if want == _WANT_HEAD:
            ready = self.status != 0
        elif want == _WANT_ALL:
            ready = self._state == _DONE
        else:
            ready = bool(self._body) or self._state == _DONE
        if ready:
            self._waiter = None
            waiter.set_result(None)

    async def _wait(self, want: int) -> None:
        self._want = want
        self._waiter = waiter = self.pool.loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    # ------------------------------------------------------------ request API

    def send(self, data: bytes) -> None:
        """Write one complete request (head and body) to the replica. Raises UpstreamError("reset")
        when the transport already lost the connection (uvloop raises RuntimeError on a write to a
        closed handle)."""
        self._clear()
        self._state = _HEAD
        transport = self.transport
        if transport is None or self.closed:
            raise UpstreamError("reset", f"connection to {self.pool.authority} is closed")
        try:
            transport.write(data)
        except RuntimeError as exc:
            self.close()
            raise UpstreamError("reset", f"connection to {self.pool.authority} lost: {exc}") from None

    async def read_head(self) -> int:
        """Wait for the final response's status and headers; return the status."""
        if self.status == 0:
            if self._exc is not None:
                raise self._exc
            await self._wait(_WANT_HEAD)
        return self.status

    async def read_all(self) -> bytes:
        """Wait for the complete response body and return it."""
        if self._state != _DONE:
            if self._exc is not None:
                raise self._exc
            await self._wait(_WANT_ALL)
        body = self._body
        self._body = []
        return body[0] if len(body) == 1 else b"".join(body)

    async def read_chunk(self) -> bytes:
        """Return what arrived of the body since the last call, waiting for more; b"" at the end."""
        self._streaming = True
        if not self._body:
            if self._state == _DONE:
                return b""
            if self._exc is not None:
                raise self._exc
            await self._wait(_WANT_CHUNK)
            if not self._body:
                return b""
        body = self._body
        self._body = []
        self._body_size = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return body[0] if len(body) == 1 else b"".join(body)

    @property
    def complete(self) -> bool:
        """Whether the whole response was received."""
        return self._state == _DONE

    def abort(self, exc: UpstreamError) -> None:
        """Fail the request in flight (deadline passed) and close the connection."""
        if self._exc is None:
            self._exc = exc
        self.close()
        self._wake()

    def close(self) -> None:
        self.keep_alive = False
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


class Pool:
    """Keep-alive connections to one replica (``host:port``); the most recently used goes first."""

    def __init__(self, host: str, port: int, *, connect_timeout_s: float = 3.0, idle_timeout_s: float = 4.0,
                 max_idle: int = 256, loop: asyncio.AbstractEventLoop | None = None, tls=None,
                 server_name: str = ""):
        self.host = host
        self.port = port
        self.authority = f"{host}:{port}"
        # router.tls.ClientTls for an https:// replica (its ``context`` is read at each connect, so a
        # reloaded CA or client certificate reaches new connections); None: plaintext.
        self.tls = tls
        # What the replica's certificate must name (SNI and hostname check): its address, or the one
        # name all replicas share (upstream_tls_server_name). Fixed per pool: no work per request.
        self.server_hostname = server_name or host
        self.connect_timeout_s = connect_timeout_s
        # Replicas (uvicorn) close idle keep-alive connections after 5 s; reuse ours for less.
        self.idle_timeout_s = idle_timeout_s
        self.max_idle = max_idle
        self.loop = loop or asyncio.get_running_loop()
        self._idle: collections.deque[Connection] = collections.deque()
        self.closed = False

    def take_idle(self) -> Connection | None:
        """A live idle connection, or None (then call ``connect``)."""
        idle = self._idle
        if not idle:
            return None
        limit = time.monotonic() - self.idle_timeout_s
        while idle:
            conn = idle.pop()
            # A transport closing (the replica ended the connection; connection_lost is still to
            # come) would drop the request: never handed out.
            if not conn.closed and conn.idle_since > limit and not conn.transport.is_closing():  # type: ignore[union-attr]
                return conn
            conn.close()
        return None

    async def connect(self) -> Connection:
        """Open a new connection; raises UpstreamError("connect") on refusal or timeout."""
        tls = self.tls
        try:
            if tls is None:
                connecting = self.loop.create_connection(lambda: Connection(self), self.host, self.port)
            else:
                connecting = self.loop.create_connection(lambda: Connection(self), self.host, self.port,
                                                         ssl=tls.context, server_hostname=self.server_hostname)
            _, conn = await asyncio.wait_for(connecting, self.connect_timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            raise UpstreamError("connect", f"cannot connect to {self.authority}: {exc or type(exc).__name__}") from None
        return conn

    def release(self, conn: Connection) -> None:
        """Return a connection after its response was read; closes it unless it can be reused."""
        if conn.closed or not conn.keep_alive or not conn.complete or self.closed or len(self._idle) >= self.max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def close(self) -> None:
        self.closed = True
        while self._idle:
            self._idle.pop().close()

    @property
    def idle_count(self) -> int:
        return len(self._idle)
