"""Hypothesis through a real router on loopback: hostile headers and bodies get the router's own
answers (2xx from the replica, or a 4xx JSON error), never a 500 and never an ERROR log."""

from __future__ import annotations

import json
import logging
import random

import hypothesis
import orjson
from hypothesis import strategies as st

from router import app as app_mod
from router import config, testing

HEADER_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=60)
HEADERS = st.fixed_dictionaries({}, optional={
    "X-Request-Id": HEADER_VALUE, "x-meridian-timeout-s": HEADER_VALUE | st.sampled_from(["nan", "inf", "-1", "1e400"]),
    "x-meridian-client-region": HEADER_VALUE | st.sampled_from(["eu-west", "na-east"]),
    "Content-Type": st.sampled_from(["application/json", "text/plain", "application/x+json; charset=utf-8", ""]),
    "Authorization": HEADER_VALUE})
BODY = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda model, stream, n, mt: json.dumps({
        "model": model, "stream": stream, "n": n, "max_tokens": mt, "messages": [{"role": "user", "content": "x"}]}),
        st.sampled_from(["m", "", "other", "m" * 300]), st.sampled_from([True, False, None, "yes"]),
        st.sampled_from([1, 0, -1, "2", None]), st.sampled_from([4, 0, 10**30, 1.5, None])).map(str.encode))
PATHS = st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/generate"])


@hypothesis.settings(max_examples=60, deadline=None, suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(path=PATHS, headers=HEADERS, body=BODY)
async def test_hostile_requests_get_the_routers_answers_never_a_500(http, caplog, path, headers, body):
    """Whatever the headers and body, the answer is a replica's or a JSON 4xx from the router."""
    caplog.set_level(logging.WARNING)
    rep = await testing.FakeReplica("a").start()
    router = app_mod.Router(config.RouterConfig.model_validate({
        "listen_port": 0, "lkg_store": "none", "health": {"enabled": False},
        "trusted_region_header": "x-meridian-client-region"}), rng=random.Random(0))
    await router.start()
    try:
        router.state.apply(testing.table(1, {"m": [testing.replica("a", rep.port)]}), "static")
        async with http.post(f"http://127.0.0.1:{router.port}{path}", data=body, headers=headers) as resp:
            payload = await resp.read()
            assert resp.status < 500, (resp.status, payload[:300])
            if resp.status >= 400:
                assert orjson.loads(payload)["error"]["message"]
    finally:
        await router.stop()
        await rep.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
