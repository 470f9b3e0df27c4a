"""OpenAI-style error responses: ``{"error": {"message", "type", "param", "code"}}``.

Every error a client can hit is an ``ApiError`` carrying the HTTP status, a message that says what
to do next, and (for field errors) the request field at fault; the proxy turns it into a response
in one place."""

from __future__ import annotations

import orjson

from router.responses import Response


class ApiError(Exception):
    """A request the router refuses or cannot serve, with its HTTP status."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s

    def body(self) -> bytes:
        return orjson.dumps({"error": {"message": self.message, "type": self.type, "param": self.param,
                                       "code": self.code}})

    def response(self, request_id: str = "") -> Response:
        headers = {"Content-Type": "application/json"}
        if request_id:
            headers["X-Request-Id"] = request_id
        if self.retry_after_s is not None:
            # Retry-After is whole seconds (RFC 9110); never 0, which clients read as "now".
            headers["Retry-After"] = str(max(1, int(self.retry_after_s + 0.999)))
        return Response(status=self.status, body=self.body(), headers=headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, type_="authentication_error", code="invalid_api_key")


def forbidden(message: str) -> ApiError:
    return ApiError(403, message, type_="permission_error", code="model_not_allowed")


def model_not_found(model: str, known: list[str]) -> ApiError:
    listed = ", ".join(sorted(known)[:20]) or "none yet"
    shown = model if len(model) <= 200 else model[:200] + "..."
    return ApiError(404, f"The model {shown!r} does not exist or is not served here; served models: {listed}",
                    param="model", code="model_not_found")


def too_large(limit_bytes: int) -> ApiError:
    return ApiError(413, f"Request body exceeds this router's limit of {limit_bytes} bytes (its max_body_bytes "
                         "setting); send a smaller request, e.g. an image by URL rather than inline base64",
                    code="request_too_large")


def rate_limited(retry_after_s: float) -> ApiError:
    return ApiError(429, "Rate limit reached for this API key; retry after the Retry-After delay",
                    type_="rate_limit_error", code="rate_limit_exceeded", retry_after_s=retry_after_s)


def too_many_streams(limit: int) -> ApiError:
    return ApiError(429, f"This API key already has {limit} streaming requests open, its limit; retry after the "
                         f"Retry-After delay or when one of them ends", type_="rate_limit_error",
                    code="too_many_streams", retry_after_s=1.0)


def overloaded(model: str, retry_after_s: float) -> ApiError:
    return ApiError(429, f"Too many requests queued for model {model!r}; retry after the Retry-After delay",
                    type_="rate_limit_error", code="overloaded", retry_after_s=retry_after_s)


def not_ready() -> ApiError:
    """No routing table yet (the router just started and neither the scheduler nor a last-known-good
    copy has given one): every model is unknown for now, which is not a 404."""
    return ApiError(503, "The router has no routing table yet (starting, or the scheduler is unreachable and no "
                         "last-known-good table was kept); retry later", type_="server_error", code="not_ready",
                    retry_after_s=1.0)


def envelope(body: bytes) -> bytes:
    """A replica's error body in the OpenAI shape: SGLang answers ``{"object": "error", "message",
    "type", "param", "code"}`` at the top level, which the OpenAI SDKs do not read as an error
    object; it is wrapped as ``{"error": {...}}``. A body already in that shape, or not a JSON
    object with a message, is returned as it is."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(doc, dict) or "error" in doc or not isinstance(doc.get("message"), str):
        return body
    return orjson.dumps({"error": {"message": doc["message"], "type": doc.get("type") or "upstream_error",
                                   "param": doc.get("param"), "code": doc.get("code")}})


def no_replica(model: str) -> ApiError:
    return ApiError(503, f"No healthy replica of model {model!r} can take the request right now; retry later",
                    type_="server_error", code="no_healthy_replica", retry_after_s=1.0)


def upstream_failed(model: str, detail: str) -> ApiError:
    return ApiError(502, f"Every replica tried for model {model!r} failed ({detail}); retry later",
                    type_="server_error", code="upstream_error")


def deadline_exceeded(model: str, timeout_s: float) -> ApiError:
    return ApiError(504, f"No answer from model {model!r} within the request deadline of {timeout_s:g} s",
                    type_="server_error", code="deadline_exceeded")
