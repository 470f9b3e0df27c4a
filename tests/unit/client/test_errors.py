"""Errors carry what the caller needs: the status's class, the server's own message, the call."""

from __future__ import annotations

import orjson
import pytest

from meridian import client as mc
from meridian.client import errors


@pytest.mark.parametrize(("status", "cls"), [(400, mc.BadRequestError), (422, mc.BadRequestError),
                                             (401, mc.AuthenticationError), (403, mc.PermissionDeniedError),
                                             (404, mc.NotFoundError), (429, mc.RateLimitError),
                                             (500, mc.ServerError), (503, mc.ServerError), (418, mc.APIStatusError)])
def test_status_classes(status, cls):
    """Each status maps to the class a caller catches."""
    assert type(errors.status_error(status, b"")) is cls


def test_server_messages_in_every_shape():
    """The router's and OpenAI's {"error": {...}}, SGLang's {"object": "error"} and plain text bodies."""
    router = orjson.dumps({"error": {"message": "no replica", "type": "server_error", "param": None,
                                     "code": "no_healthy_replica"}})
    err = errors.status_error(503, router, 1.0)
    assert (err.server_message, err.code, err.type, err.retry_after_s) == ("no replica", "no_healthy_replica",
                                                                           "server_error", 1.0)
    assert str(err) == "HTTP 503 no_healthy_replica: no replica"
    sglang = orjson.dumps({"object": "error", "message": "too long", "type": "BadRequest", "param": None, "code": 400})
    assert errors.status_error(400, sglang).server_message == "too long"
    assert errors.status_error(502, b"Bad Gateway").server_message == "Bad Gateway"


def test_the_call_is_named():
    """Once finished, an error names the call, its request id, attempts and why it gave up."""
    err = errors.RequestTimeout("first_token", 2.0).finish(method="POST", path="/v1/chat/completions",
                                                           request_id="r1", attempts=3, gave_up="max_attempts")
    assert str(err) == ("first_token timeout: waiting for the first token took more than 2 s "
                        "(POST /v1/chat/completions, request_id=r1, 3 attempts, gave up: max_attempts)")
    assert isinstance(err, TimeoutError) and isinstance(errors.ConnectError("refused", "x"), ConnectionError)
