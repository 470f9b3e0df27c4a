"""Typed errors: each says what failed (a timeout and which one, a connection, an HTTP status with
the server's own message, a stream that broke after it started), on which call, after how many
attempts, and why no further attempt was made, so a caller can act on it.

``gave_up`` values: ``not_retryable`` (the failure is not one that a retry can fix, or the stream
had already delivered bytes), ``max_attempts``, ``budget`` (the client's retry budget was spent),
``deadline`` (no time left in ``total_s`` for another try), ``retry_after`` (the server asked to
wait longer than ``max_retry_after_s``)."""

from __future__ import annotations

from typing import Any

import orjson

GAVE_UP_REASONS = ("not_retryable", "max_attempts", "budget", "deadline", "retry_after")


class ClientError(Exception):
    """Base of every error ``meridian.client`` raises."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.method = ""
        self.path = ""
        self.request_id = ""
        self.attempts = 0
        self.gave_up = ""

    def finish(self, *, method: str, path: str, request_id: str, attempts: int, gave_up: str) -> ClientError:
        """Record the call this error ended (set once, by the client, before raising)."""
        self.method, self.path, self.request_id = method, path, request_id
        self.attempts, self.gave_up = attempts, gave_up
        return self

    def __str__(self) -> str:
        if not self.path:
            return self.message
        tail = f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"
        if self.gave_up:
            tail += f", gave up: {self.gave_up}"
        return f"{self.message} ({self.method} {self.path}, request_id={self.request_id}, {tail})"


class RequestTimeout(ClientError, TimeoutError):
    """A limit of ``Timeouts`` passed: ``kind`` is ``connect``, ``first_token`` or ``total``;
    ``limit_s`` is the limit that fired."""

    def __init__(self, kind: str, limit_s: float, detail: str = "") -> None:
        label = {"connect": "connecting", "first_token": "waiting for the first token",
                 "total": "the whole call"}[kind]
        super().__init__(f"{kind} timeout: {label} took more than {limit_s:g} s" + (f"; {detail}" if detail else ""))
        self.kind = kind
        self.limit_s = limit_s


class ConnectError(ClientError, ConnectionError):
    """No answer because of the connection itself, before any byte of a response: ``reason`` is
    ``refused``, ``reset`` (closed by the server before it answered), ``dns``, ``tls`` or ``other``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"connection {reason}: {detail}")
        self.reason = reason


class ProtocolError(ClientError):
    """The server's answer is not what the OpenAI wire format says (malformed JSON or SSE)."""


def _server_error(body: bytes) -> dict[str, Any]:
    """The error object of an OpenAI (``{"error": {...}}``) or SGLang (``{"object": "error", ...}``)
    error body; {} when the body is neither."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    if isinstance(data, dict):
        inner = data.get("error")
        if isinstance(inner, dict):
            return inner
        if isinstance(inner, str):
            return {"message": inner}
        if data.get("object") == "error":
            return data
    return {}


class APIStatusError(ClientError):
    """The server answered with an HTTP error status. ``server_message``, ``type``, ``code`` and
    ``param`` come from its OpenAI-shaped error body; ``retry_after_s`` from ``Retry-After``."""

    def __init__(self, status: int, body: bytes, retry_after_s: float | None = None) -> None:
        err = _server_error(body)
        server_message = str(err.get("message") or body[:500].decode("utf-8", "replace") or "(no body)")
        code = err.get("code")
        super().__init__(f"HTTP {status}" + (f" {code}" if isinstance(code, str) and code else "")
                         + f": {server_message}")
        self.status = status
        self.body = body
        self.server_message = server_message
        self.type = err.get("type")
        self.code = code
        self.param = err.get("param")
        self.retry_after_s = retry_after_s


class BadRequestError(APIStatusError):
    """400 or 422: the request is invalid (``param`` names the field when the server says)."""


class AuthenticationError(APIStatusError):
    """401: missing or unknown API key."""


class PermissionDeniedError(APIStatusError):
    """403: the key may not use this model."""


class NotFoundError(APIStatusError):
    """404: unknown model or path (the router's message lists the models it serves)."""


class RateLimitError(APIStatusError):
    """429: over the key's rate limit or the model's queue is full; ``retry_after_s`` says when to
    come back."""


class ServerError(APIStatusError):
    """5xx: the server or every replica behind it failed."""


_BY_STATUS = {400: BadRequestError, 401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError,
              422: BadRequestError, 429: RateLimitError}


def status_error(status: int, body: bytes, retry_after_s: float | None = None) -> APIStatusError:
    """The most specific APIStatusError class for ``status``."""
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else APIStatusError)
    return cls(status, body, retry_after_s)


class StreamError(ClientError):
    """A stream failed after it had started (so it was not retried): ``reason`` is
    ``disconnected`` (the connection broke), ``error_event`` (the server sent an SSE error event,
    e.g. the router's deadline or a replica breaking mid-stream) or ``incomplete`` (the stream
    ended without ``data: [DONE]``). ``events`` counts the events received before; ``status``,
    ``code`` and ``server_message`` come from an error event."""

    def __init__(self, reason: str, detail: str, *, events: int, error: dict[str, Any] | None = None) -> None:
        error = error or {}
        code = error.get("code")
        self.server_message = str(error.get("message") or "")
        super().__init__(f"stream {reason} after {events} event{'s' if events != 1 else ''}: "
                         + (self.server_message or detail))
        self.reason = reason
        self.events = events
        self.code = code
        self.status = code if isinstance(code, int) else None
        self.type = error.get("type")
