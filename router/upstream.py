"""A small HTTP/1.1 client for the proxy hot path: keep-alive connection pools, one per replica.

Why not ``aiohttp.ClientSession``: measured on the 2-core bench machine, an aiohttp server relaying
short requests through ClientSession served 7.0k requests/s; the same server relaying through this
client served 22k. ClientSession spends its time on URL building, cookie jars, tracing hooks and
timeout objects that a proxy to known replicas does not need. The router still uses one
ClientSession for everything off the hot path (health checks).

Contract: one request at a time per connection (no pipelining). A response body is framed by
Content-Length, chunked transfer-encoding (decoded here) or connection close. A connection goes back
to its pool only after its response was read completely and the server allowed keep-alive;
otherwise it is closed, which is also how an abandoned request is cancelled upstream (the replica
sees the connection close).
"""

from __future__ import annotations

import asyncio
import collections
import time

_IDLE, _HEAD, _LEN, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _EOF, _DONE = range(9)
_WANT_HEAD, _WANT_ALL, _WANT_CHUNK = 1, 2, 3
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 256 * 1024 * 1024
# Streaming responses: stop reading from the replica while this much is waiting for a slow client.
PAUSE_ABOVE_BYTES = 1024 * 1024


class UpstreamError(Exception):
    """A replica could not be reached or broke the protocol.

    ``kind`` is one of ``connect`` (no connection), ``reset`` (connection lost mid-request),
    ``timeout`` (the request's deadline passed) or ``protocol`` (an unparseable response)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Connection(asyncio.Protocol):
    """One keep-alive connection to a replica, with an incremental HTTP/1.1 response parser."""

    __slots__ = (
        "pool", "transport", "closed", "idle_since", "received_any", "status", "content_type",
        "keep_alive", "_rest", "_state", "_remaining", "_body", "_body_size", "_exc", "_waiter",
        "_want", "_paused", "_head_only", "_streaming",
    )

    def __init__(self, pool: Pool):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future | None = None
        self._clear()

    def _clear(self) -> None:
        self.received_any = False
        self.status = 0
        self.content_type = b""
        self.keep_alive = True
        self._rest = b""
        self._state = _IDLE
        self._remaining = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self._exc: UpstreamError | None = None
        self._want = 0
        self._paused = False
        self._head_only = False
        self._streaming = False

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        if self._rest:
            data = self._rest + data
            self._rest = b""
        try:
            self._feed(data)
        except (ValueError, IndexError) as exc:
            self._exc = UpstreamError("protocol", f"bad response from {self.pool.authority}: {exc}")
            self.keep_alive = False
            self.close()
        if self._streaming and not self._paused and self._body_size > PAUSE_ABOVE_BYTES and not self.closed:
            self._paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]
        self._wake()

    def eof_received(self) -> bool:
        return False  # let the transport close; connection_lost finishes the body if close-delimited

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _EOF:
            self._state = _DONE
        elif self._state not in (_IDLE, _DONE) and self._exc is None:
            self._exc = UpstreamError("reset", f"connection to {self.pool.authority} lost mid-response")
        self._wake()

    # ------------------------------------------------------------ parser

    def _feed(self, data: bytes) -> None:
        state = self._state
        pos, n = 0, len(data)
        while state != _DONE and pos < n:
            if state == _HEAD:
                end = data.find(b"\r\n\r\n", pos)
                if end < 0:
                    if n - pos > MAX_HEAD_BYTES:
                        raise ValueError("response head too large")
                    self._rest = data[pos:]
                    break
                state = self._parse_head(data[pos:end])
                pos = end + 4
            elif state == _LEN or state == _CHUNK_DATA:
                take = min(n - pos, self._remaining)
                self._body.append(data if (pos == 0 and take == n) else data[pos:pos + take])
                self._body_size += take
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    state = _DONE if state == _LEN else _CHUNK_CRLF
            elif state == _CHUNK_SIZE:
                end = data.find(b"\r\n", pos)
                if end < 0:
                    self._rest = data[pos:]
                    break
                size = int(data[pos:end].split(b";", 1)[0], 16)
                pos = end + 2
                if size == 0:
                    state = _TRAILER
                else:
                    self._remaining = size
                    state = _CHUNK_DATA
            elif state == _CHUNK_CRLF:
                if n - pos < 2:
                    self._rest = data[pos:]
                    break
                if data[pos:pos + 2] != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
                pos += 2
                state = _CHUNK_SIZE
            elif state == _TRAILER:
                end = data.find(b"\r\n", pos)
                if end < 0:
                    self._rest = data[pos:]
                    break
                state = _DONE if end == pos else _TRAILER
                pos = end + 2
            elif state == _EOF:
                self._body.append(data if pos == 0 else data[pos:])
                self._body_size += n - pos
                pos = n
            else:  # _IDLE: bytes nobody asked for
                raise ValueError("data received while no request was in flight")
        if pos < n and state == _DONE:
            self.keep_alive = False  # bytes beyond the response: do not trust this connection again
        if self._body_size > MAX_BODY_BYTES:
            raise ValueError(f"response body over {MAX_BODY_BYTES} bytes")
        self._state = state

    def _parse_head(self, head: bytes) -> int:
        lines = head.split(b"\r\n")
        status_line = lines[0]
        if not status_line.startswith(b"HTTP/1."):
            raise ValueError(f"not an HTTP/1.x status line: {status_line[:40]!r}")
        status = int(status_line[9:12])
        if 100 <= status < 200:
            return _HEAD  # interim response (100 Continue); the real one follows
        self.status = status
        keep_alive = status_line[7:8] == b"1"
        length = -1
        chunked = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-type":
                self.content_type = value.strip()
            elif name == b"connection":
                token = value.strip().lower()
                if token == b"close":
                    keep_alive = False
                elif token == b"keep-alive":
                    keep_alive = True
        self.keep_alive = keep_alive
        if self._head_only or status in (204, 304):
            return _DONE
        if chunked:
            return _CHUNK_SIZE
        if length >= 0:
            self._remaining = length
            return _LEN if length else _DONE
        self.keep_alive = False
        return _EOF

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

    def send(self, data: bytes, head_only: bool = False) -> None:
        """Write one complete request (head and body) to the replica."""
        self._clear()
        self._head_only = head_only
        self._state = _HEAD
        assert self.transport is not None
        self.transport.write(data)

    async def read_head(self) -> int:
        """Wait for the response status and headers; return the status."""
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
                 max_idle: int = 256, loop: asyncio.AbstractEventLoop | None = None):
        self.host = host
        self.port = port
        self.authority = f"{host}:{port}"
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
            if not conn.closed and conn.idle_since > limit:
                return conn
            conn.close()
        return None

    async def connect(self) -> Connection:
        """Open a new connection; raises UpstreamError("connect") on refusal or timeout."""
        try:
            _, conn = await asyncio.wait_for(
                self.loop.create_connection(lambda: Connection(self), self.host, self.port),
                self.connect_timeout_s)
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
