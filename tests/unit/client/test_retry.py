"""The retry decision: which failures are retried, after how long, and why a call gives up."""

from __future__ import annotations


import pytest

from meridian.client import config, errors, retry

POLICY = config.RetryPolicy(max_attempts=3, max_retry_after_s=30)


def _status(code: int, retry_after_s: float | None = None) -> retry.Failure:
    return retry.Failure("status", errors.status_error(code, b"{}"), status=code, retry_after_s=retry_after_s)


def _kind(kind: str, body_bytes: int = 0) -> retry.Failure:
    return retry.Failure(kind, errors.ConnectError("reset", "x"), body_bytes=body_bytes)


@pytest.mark.parametrize("code", [429, 502, 503, 504])
def test_retryable_statuses(code):
    """429, 502, 503 and 504 are retried."""
    assert retry.retryable(_status(code))


@pytest.mark.parametrize("code", [400, 401, 403, 404, 408, 409, 413, 422, 500, 501])
def test_other_statuses_are_final(code):
    """Every other status is the answer, 500 included (the router already retried its replicas)."""
    assert not retry.retryable(_status(code))
    assert retry.decide(_status(code), attempts=1, policy=POLICY, backoff_s=0.1, remaining_s=None).gave_up == \
        "not_retryable"


@pytest.mark.parametrize(("kind", "expected"), [
    ("refused", True), ("reset", True), ("connect_timeout", True), ("first_token_timeout", True),
    ("connect_error", False), ("dns", False), ("tls", False), ("protocol", False), ("broken", False)])
def test_failure_kinds(kind, expected):
    """Connection failures before any byte and timeouts before the first byte are retried; DNS, TLS,
    malformed answers and breaks after bytes are not."""
    assert retry.retryable(_kind(kind)) is expected


@pytest.mark.parametrize("kind", ["reset", "first_token_timeout"])
def test_nothing_is_retried_after_a_body_byte(kind):
    """Once a byte of the response body has arrived, no failure is retried."""
    assert not retry.retryable(_kind(kind, body_bytes=1))


def test_backoff_and_retry_after():
    """The wait is the backoff, or the server's Retry-After when longer."""
    assert retry.decide(_status(503), attempts=1, policy=POLICY, backoff_s=0.3, remaining_s=None) == \
        retry.Decision(True, 0.3)
    assert retry.decide(_status(429, 2.0), attempts=1, policy=POLICY, backoff_s=0.3, remaining_s=None) == \
        retry.Decision(True, 2.0)
    assert retry.decide(_status(429, 0.1), attempts=1, policy=POLICY, backoff_s=0.3, remaining_s=None).delay_s == 0.3


def test_give_up_reasons():
    """max_attempts, a Retry-After beyond max_retry_after_s, and a wait longer than the time left
    each end the call with their own reason."""
    assert retry.decide(_status(503), attempts=3, policy=POLICY, backoff_s=0.1, remaining_s=None).gave_up == \
        "max_attempts"
    assert retry.decide(_status(429, 31.0), attempts=1, policy=POLICY, backoff_s=0.1, remaining_s=None).gave_up == \
        "retry_after"
    assert retry.decide(_status(429, 5.0), attempts=1, policy=POLICY, backoff_s=0.1, remaining_s=4.0).gave_up == \
        "deadline"
    assert retry.decide(_kind("reset"), attempts=1, policy=POLICY, backoff_s=0.5, remaining_s=0.4).gave_up == \
        "deadline"
