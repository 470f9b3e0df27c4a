"""One attempt on the wire: the client's single pooled aiohttp session, the headers Meridian's
router reads, and aiohttp's exceptions turned into ``retry.Failure`` values.

aiohttp because it is already a core dependency (the router, the health checks and the tests use
it), it pools keep-alive HTTP/1.1 connections, and cancelling a request closes its connection,
which is how the router learns to stop the replica's work (a hedge's loser, a call past its
deadline). The synchronous client runs the same code on a private event loop (``portal.py``)."""

from __future__ import annotations

import dataclasses
import errno

import aiohttp

from meridian import backoff
from meridian.client import config, errors, retry

USER_AGENT = "meridian-client/0.1"
# The router's per-request deadline (seconds, capped by its request_timeout_s).
DEADLINE_HEADER = "x-meridian-timeout-s"
# Sent a little later than the client's own deadline, so the client's timer fires first and the
# caller gets RequestTimeout(total) rather than the router's 504 or error event; the router's
# deadline only matters when the client vanished without closing its connection (closing it
# already ends the request there).
DEADLINE_MARGIN_S = 0.5


class AttemptFailed(Exception):
    """Carries the failure of one attempt to the retry loop (never reaches the caller)."""

    def __init__(self, failure: retry.Failure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


@dataclasses.dataclass
class Call:
    """One call of the client (its attempts share the request id, body and deadline). Times are
    the event loop's clock."""

    method: str
    path: str
    body: bytes | None
    stream: bool
    request_id: str
    timeouts: config.Timeouts
    started: float
    deadline: float | None
    attempts: int = 0
    failed_rounds: int = 0
    last_failure: retry.Failure | None = None

    def remaining_s(self, now: float) -> float | None:
        return None if self.deadline is None else self.deadline - now

    def attempt_id(self, attempt: int) -> str:
        """The X-Request-Id of an attempt: the call's id, then ``<id>.<n>`` for attempt n >= 2."""
        return self.request_id if attempt == 1 else f"{self.request_id}.{attempt}"


def connect_failure(exc: aiohttp.ClientError, connect_s: float | None) -> retry.Failure:
    """A failure while connecting or before the response head: nothing of an answer arrived."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return retry.Failure("connect_timeout", errors.RequestTimeout("connect", connect_s or 0.0, str(exc)))
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return retry.Failure("dns", errors.ConnectError("dns", str(exc)))
    if isinstance(exc, (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError)):
        return retry.Failure("tls", errors.ConnectError("tls", str(exc)))
    if isinstance(exc, aiohttp.ClientConnectorError):
        # Several addresses (localhost: ::1 and 127.0.0.1) all refusing come as one OSError without errno.
        if isinstance(exc.os_error, ConnectionRefusedError) or f"[Errno {errno.ECONNREFUSED}]" in str(exc):
            return retry.Failure("refused", errors.ConnectError("refused", str(exc)))
        return retry.Failure("connect_error", errors.ConnectError("other", str(exc)))
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
        return retry.Failure("reset", errors.ConnectError("reset", f"closed by the server before it answered ({exc})"))
    if isinstance(exc, aiohttp.ClientResponseError):
        return retry.Failure("protocol", errors.ProtocolError(f"malformed response head: {exc}"))
    return retry.Failure("protocol", errors.ProtocolError(f"{type(exc).__name__}: {exc}"))


def body_failure(exc: aiohttp.ClientError, body_bytes: int) -> retry.Failure:
    """The connection broke while reading a body: retryable only when no byte of it had arrived."""
    if body_bytes == 0:
        return retry.Failure("reset", errors.ConnectError("reset", f"closed by the server before the body ({exc})"))
    return retry.Failure("broken", errors.ConnectError("reset", f"closed by the server after {body_bytes} bytes of "
                                                                f"the body ({exc})"), body_bytes=body_bytes)


class Transport:
    """The client's one ClientSession (created on first use, inside the loop that uses it)."""

    def __init__(self, settings: config.ClientSettings, api_key: str | None) -> None:
        self.settings = settings
        self._auth = f"Bearer {api_key}" if api_key else ""
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("this meridian.client client is closed")
        if self._session is None:
            s = self.settings
            connector = aiohttp.TCPConnector(limit=s.max_connections, keepalive_timeout=s.keepalive_s)
            # No session-wide timeout: each request gets its own (aiohttp's default is 5 min total).
            self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None),
                                                  headers={"User-Agent": USER_AGENT, **s.headers})
        return self._session

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    def headers(self, call: Call, attempt: int, now: float) -> dict[str, str]:
        s = self.settings
        out = {"X-Request-Id": call.attempt_id(attempt)}
        if call.body is not None:
            out["Content-Type"] = "application/json"
        if call.stream:
            out["Accept"] = "text/event-stream"
        if self._auth:
            out["Authorization"] = self._auth
        if s.region:
            out[s.region_header] = s.region
        remaining = call.remaining_s(now)
        if s.send_deadline and remaining is not None:
            out[DEADLINE_HEADER] = f"{max(remaining, 0.0) + DEADLINE_MARGIN_S:.3f}"
        return out

    async def open(self, call: Call, attempt: int, now: float) -> aiohttp.ClientResponse:
        """Send attempt ``attempt`` of ``call`` and wait for the response head (raises AttemptFailed)."""
        connect_s = call.timeouts.connect_s
        timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect_s, sock_read=None)
        try:
            return await self.session().request(call.method, self.settings.base_url + call.path, data=call.body,
                                                headers=self.headers(call, attempt, now), timeout=timeout,
                                                allow_redirects=False)
        except aiohttp.ClientError as exc:
            raise AttemptFailed(connect_failure(exc, connect_s)) from exc


async def read_error(resp: aiohttp.ClientResponse, now_unix_s: float) -> retry.Failure:
    """The failure a non-2xx response stands for (its body read and the connection released);
    ``now_unix_s`` dates a Retry-After given as an HTTP-date."""
    try:
        body = await resp.read()
    except aiohttp.ClientError:
        body = b""
    finally:
        resp.release()
    retry_after = backoff.parse_retry_after(resp.headers.get("Retry-After"), now_unix_s)
    return retry.Failure("status", errors.status_error(resp.status, body, retry_after), status=resp.status,
                         retry_after_s=retry_after)
