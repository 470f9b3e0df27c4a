"""What the router's listener (``router.listener``) writes back: whole responses and streams.

``Response`` is an answer whose body is known when the handler returns (an error, a non-streaming
completion, a status page): the listener writes its head and body in one send. ``StreamResponse``
is an answer written while the handler runs (an SSE relay): chunked transfer encoding on HTTP/1.1
(a plain body ending at connection close on HTTP/1.0), with the head held back until the first body
write, so a stream that arrived whole leaves in one send (head, body and the chunked terminator).
A write waits while the client's socket is backed up (the transport's flow control), and raises
``ConnectionResetError`` once the client has gone.

The head is built from bytes the listener keeps (status lines, the ``Date`` value refreshed once a
second), not through a general header object: this is the router's per-request cost
(docs/router.md, "CPU time per request")."""

from __future__ import annotations

import http
import time
from collections.abc import Iterable, Mapping
from email.utils import formatdate

__all__ = ["Response", "StreamResponse", "date_header", "head"]

_STATUS_LINES: dict[int, bytes] = {}
_date = [b"", 0]


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        line = f"HTTP/1.1 {status} {reason}\r\n".encode()
        if len(_STATUS_LINES) < 128:
            _STATUS_LINES[status] = line
    return line


def date_header() -> bytes:
    """The ``Date:`` header line, rebuilt when the second changes (RFC 9110: an origin server with
    a clock sends one)."""
    now = int(time.time())
    if now != _date[1]:
        _date[0] = b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\n"
        _date[1] = now
    return _date[0]  # type: ignore[return-value]


def _header_lines(headers: Iterable[tuple[str, str]]) -> bytes:
    out = []
    for name, value in headers:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        out.append(f"{name}: {value}\r\n")
    return "".join(out).encode("latin-1")


def head(status: int, headers: bytes, *, length: int | None, keep_alive: bool) -> bytes:
    """A response head: the status line, ``headers`` (ready header lines), the framing header
    (``Content-Length``, or chunked when ``length`` is None) and ``Connection: close`` when the
    connection ends after this response."""
    framing = b"Transfer-Encoding: chunked\r\n" if length is None else b"Content-Length: %d\r\n" % length
    return b"".join((_status_line(status), headers, date_header(), framing,
                     b"" if keep_alive else b"Connection: close\r\n", b"\r\n"))


def _as_items(headers: Mapping[str, str] | Iterable[tuple[str, str]] | None,
              content_type: str | None) -> list[tuple[str, str]]:
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
    if content_type is not None and not any(name.lower() == "content-type" for name, _ in items):
        items.append(("Content-Type", content_type))
    return items


class _Headed:
    """What both answers share: ``headers`` as (name, value) pairs, read by name."""

    __slots__ = ()
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        lower = name.lower()
        return next((value for key, value in self.headers if key.lower() == lower), None)


class Response(_Headed):
    """A whole answer: status, headers, body. ``headers`` is a mapping or (name, value) pairs;
    ``Content-Length``, ``Transfer-Encoding``, ``Connection`` and ``Date`` are the listener's."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, *, status: int = 200, body: bytes = b"",
                 headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
                 content_type: str | None = None):
        self.status = status
        self.body = body
        self.headers = _as_items(headers, content_type)

    def encode(self, *, keep_alive: bool, head_only: bool = False, extra: bytes = b"") -> bytes:
        """``extra``: header lines the request adds to whatever answers it (``Request.extra_head``)."""
        first = head(self.status, _header_lines(self.headers) + extra, length=len(self.body), keep_alive=keep_alive)
        return first if head_only else first + self.body


class StreamResponse(_Headed):
    """An answer written as it is produced: ``prepare(request)``, then ``write`` any number of
    times, then ``write_eof`` (which may carry the last bytes, sent with the terminator)."""

    __slots__ = ("_conn", "_head", "_keep_alive", "_raw", "ended", "headers", "status")

    def __init__(self, *, status: int = 200, headers: Iterable[tuple[str, str]] = ()):
        self.status = status
        self.headers = list(headers)
        self._conn = None
        self._head: bytes | None = None
        self._raw = False
        self._keep_alive = True
        self.ended = False

    @property
    def prepared(self) -> bool:
        return self._conn is not None

    @property
    def head_sent(self) -> bool:
        """The status line has gone out: a failure from here on can only cut the stream."""
        return self._conn is not None and self._head is None

    async def prepare(self, request) -> None:
        """Bind to ``request``'s connection; the head goes out with the first body write."""
        conn = request.connection
        conn.streaming = self
        self._conn = conn
        # HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
        self._raw = request.version == "1.0"
        self._keep_alive = request.keep_alive and not self._raw and not conn.closing
        lines = _header_lines(self.headers) + request.extra_head
        if self._raw:
            self._head = _status_line(self.status) + lines + date_header() + b"Connection: close\r\n\r\n"
        else:
            self._head = head(self.status, lines, length=None, keep_alive=self._keep_alive)

    def _frame(self, data: bytes) -> bytes:
        if self._raw or not data:
            return data
        return b"%x\r\n%b\r\n" % (len(data), data)

    async def write(self, data: bytes) -> None:
        if not data:
            return
        out = self._frame(data)
        if self._head is not None:
            out, self._head = self._head + out, None
        await self._conn.send(out)  # type: ignore[union-attr]

    async def write_eof(self, data: bytes = b"") -> None:
        if self.ended:
            return
        self.ended = True
        out = self._frame(data) + (b"" if self._raw else b"0\r\n\r\n")
        if self._head is not None:
            out, self._head = self._head + out, None
        await self._conn.send(out)  # type: ignore[union-attr]

    @property
    def keep_alive(self) -> bool:
        return self._keep_alive
