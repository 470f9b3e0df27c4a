"""A browser page on another origin calling the router: with ``cors_allow_origins`` its preflight is
answered (no API key needed for it) and every answer to it, a stream and an error included, names
the origin and lets the page read ``X-Request-Id``; an origin not listed, or the default config,
gets no CORS header, so the browser refuses the call."""

from __future__ import annotations

import aiohttp
import pydantic
import pytest

from router import config, testing

PAGE = "https://chat.example.com"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def _preflight(session, url: str, origin: str) -> aiohttp.ClientResponse:
    async with session.options(url, headers={
            "Origin": origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"}) as r:
        await r.read()
        return r


async def test_a_listed_origin_gets_preflights_and_allow_headers(replicas, make_router):
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}),
                               cors_allow_origins=(PAGE,), cors_max_age_s=300, max_body_bytes=4096)
    url = f"http://127.0.0.1:{router.port}/v1/chat/completions"
    async with aiohttp.ClientSession() as s:
        pre = await _preflight(s, url, PAGE)
        assert pre.status == 200
        assert pre.headers["Access-Control-Allow-Origin"] == PAGE and pre.headers["Vary"] == "Origin"
        assert pre.headers["Access-Control-Allow-Methods"] == "OPTIONS, POST"
        assert pre.headers["Access-Control-Allow-Headers"] == "authorization, content-type"
        assert pre.headers["Access-Control-Max-Age"] == "300"

        async with s.post(url, json=BODY, headers={"Origin": PAGE}) as r:
            assert r.status == 200 and (await r.json())["choices"]
            assert r.headers["Access-Control-Allow-Origin"] == PAGE
            assert r.headers["Access-Control-Expose-Headers"] == "X-Request-Id, Retry-After"
            assert r.headers["X-Request-Id"]
        async with s.post(url, json={**BODY, "stream": True}, headers={"Origin": PAGE}) as r:
            assert r.status == 200 and b"data: [DONE]" in await r.read()
            assert r.headers["Access-Control-Allow-Origin"] == PAGE
        async with s.post(url, json={**BODY, "model": "nope"}, headers={"Origin": PAGE}) as r:
            assert r.status == 404 and r.headers["Access-Control-Allow-Origin"] == PAGE
        async with s.get(f"http://127.0.0.1:{router.port}/v1/models", headers={"Origin": PAGE}) as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == PAGE
        # A body over max_body_bytes is refused by the listener itself: the page still reads the 413.
        async with s.post(url, data=b"x" * 5000, headers={"Origin": PAGE, "Content-Type": "application/json"}) as r:
            assert r.status == 413 and r.headers["Access-Control-Allow-Origin"] == PAGE
        assert pre.headers["X-Request-Id"]

        # Another origin: no CORS header anywhere, and its preflight is an unlisted method.
        other = await _preflight(s, url, "https://evil.example.net")
        assert other.status == 405 and "Access-Control-Allow-Origin" not in other.headers
        async with s.post(url, json=BODY, headers={"Origin": "https://evil.example.net"}) as r:
            assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers
            assert r.headers["Vary"] == "Origin"  # a shared cache keys on the origin
        async with s.get(f"http://127.0.0.1:{router.port}/v1/models") as r:
            assert r.status == 200 and r.headers["Vary"] == "Origin"


async def test_no_cors_by_default_and_any_origin_when_asked(replicas, make_router):
    (rep,) = await replicas(1)
    routes = testing.table(1, {"m": [testing.replica("a", rep.port)]})
    plain = await make_router(routes)
    anyone = await make_router(routes, cors_allow_origins=("*",))
    async with aiohttp.ClientSession() as s:
        url = f"http://127.0.0.1:{plain.port}/v1/chat/completions"
        pre = await _preflight(s, url, PAGE)
        assert pre.status == 405 and "Access-Control-Allow-Origin" not in pre.headers
        async with s.post(url, json=BODY, headers={"Origin": PAGE}) as r:
            assert r.status == 200 and "Access-Control-Allow-Origin" not in r.headers

        url = f"http://127.0.0.1:{anyone.port}/v1/chat/completions"
        pre = await _preflight(s, url, PAGE)
        assert pre.status == 200 and pre.headers["Access-Control-Allow-Origin"] == "*"
        assert "Vary" not in pre.headers
        async with s.post(url, json=BODY, headers={"Origin": "http://localhost:3000"}) as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "*"


@pytest.mark.parametrize("origin,why", [
    ("chat.example.com", "give scheme://host[:port]"),
    ("https://chat.example.com/", "an origin has no path"),
    ("https://chat.example.com/app", "an origin has no path"),
    ("https://chat.example.com\r\nX-Evil: 1", "in letters, digits and"),
    ("https://chat.example.com:99999", "the port must be a number"),
    ("https://chat.example.com:443", "leave out the default port"),
    ("https://chat.example.com:0", "the port must be a number"),
    ("https://chat.example.com:", "the port must be a number"),
    ("http://[::1]:80", "leave out the default port (http://[::1])"),
])
def test_an_origin_that_is_not_one_is_refused_by_name(origin, why):
    with pytest.raises(pydantic.ValidationError) as err:
        config.RouterConfig(cors_allow_origins=(origin,))
    assert "cors_allow_origins" in str(err.value) and why in str(err.value) and repr(origin) in str(err.value)
