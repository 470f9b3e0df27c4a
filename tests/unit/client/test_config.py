"""The client's settings are validated where they are given, with the parameter named."""

from __future__ import annotations

import pydantic
import pytest

from meridian import client as mc
from meridian.client import config


@pytest.mark.parametrize(("given", "origin"), [
    ("http://router:8080", "http://router:8080"), ("http://router:8080/", "http://router:8080"),
    ("http://router:8080/v1", "http://router:8080"), ("https://gw.example/meridian/v1/", "https://gw.example/meridian")])
def test_base_url_forms(given, origin):
    """The router's address and the OpenAI SDK's base_url (…/v1) are both accepted."""
    assert config.ClientSettings(base_url=given).base_url == origin


@pytest.mark.parametrize("bad", ["router:8080", "ftp://router", "http://", "http://r/v1?x=1"])
def test_bad_base_url(bad):
    """A base_url that is not an http(s) URL with a host is refused, naming the parameter."""
    with pytest.raises(pydantic.ValidationError, match="base_url"):
        mc.AsyncClient(bad)


def test_bad_knobs_name_their_field():
    """Out-of-range timeouts and retry settings are refused with the field named."""
    with pytest.raises(pydantic.ValidationError, match="connect_s"):
        mc.Timeouts(connect_s=0)
    with pytest.raises(pydantic.ValidationError, match="max_attempts"):
        mc.RetryPolicy(max_attempts=0)
    with pytest.raises(pydantic.ValidationError, match="backoff_max_s"):
        mc.RetryPolicy(backoff_initial_s=2, backoff_max_s=1)
    with pytest.raises(pydantic.ValidationError, match="hedge_after_s"):
        mc.AsyncClient("http://r", hedge_after_s=-1)
    with pytest.raises(pydantic.ValidationError, match="api_key="):
        mc.AsyncClient("http://r", headers={"Authorization": "Bearer x"})


def test_defaults():
    """The documented defaults (docs/client.md)."""
    t, r, s = mc.Timeouts(), mc.RetryPolicy(), config.ClientSettings(base_url="http://r")
    assert (t.connect_s, t.first_token_s, t.total_s) == (5.0, 120.0, 600.0)
    assert (r.max_attempts, r.backoff_initial_s, r.backoff_max_s, r.backoff_multiplier, r.max_retry_after_s) == \
        (3, 0.25, 8.0, 2.0, 60.0)
    assert (r.budget_ratio, r.budget_min_per_s, r.budget_window_s) == (0.2, 3.0, 10)
    assert (s.hedge_after_s, s.region, s.region_header, s.send_deadline, s.max_connections, s.keepalive_s) == \
        (None, "", "X-Meridian-Client-Region", True, 100, 15.0)


def test_api_key_from_environment_and_never_in_repr(monkeypatch):
    """MERIDIAN_API_KEY is the default key; neither client's repr shows it."""
    monkeypatch.setenv(mc.API_KEY_ENV, "sk-env")
    c = mc.AsyncClient("http://r")
    assert c._transport._auth == "Bearer sk-env"
    assert "sk-env" not in repr(c)
    sync = mc.Client("http://r", api_key="sk-given")
    try:
        assert "sk-given" not in repr(sync)
    finally:
        sync.close()


async def test_call_options_are_checked():
    """stream= belongs to the *_stream methods; hedge=True needs the client's hedge_after_s."""
    c = mc.AsyncClient("http://127.0.0.1:9")
    with pytest.raises(ValueError, match="chat_stream"):
        await c.chat("m", [], stream=True)
    with pytest.raises(ValueError, match="hedge_after_s"):
        await c.chat("m", [], hedge=True)
    await c.aclose()
