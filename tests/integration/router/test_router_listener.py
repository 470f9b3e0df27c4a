"""The router's own HTTP/1.1 listener (router.listener) over loopback, spoken to byte for byte:
keep-alive and pipelining, HTTP/1.0, Expect: 100-continue, HEAD, unknown paths and methods, idle
connections, a stream to an HTTP/1.0 client, and a stop that lets a request being served finish."""

from __future__ import annotations

import asyncio
import contextlib

import orjson

from router import testing

CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
STREAM = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response off the connection: status, headers (lower-cased names), body (by its
    Content-Length, de-chunked, or to the end of the connection)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 10)
    elif headers.get("transfer-encoding") == "chunked":
        parts = []
        while True:
            size = int((await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)).strip(), 16)
            data = await asyncio.wait_for(reader.readexactly(size + 2), 10)
            if size == 0:
                break
            parts.append(data[:-2])
        body = b"".join(parts)
    else:
        body = await asyncio.wait_for(reader.read(), 10)
    return status, headers, body


def _post(path: bytes, body: bytes, *extra: bytes, version: bytes = b"1.1") -> bytes:
    return (b"POST " + path + b" HTTP/" + version + b"\r\nHost: r\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n" % len(body) + b"".join(extra) + b"\r\n" + body)


@contextlib.asynccontextmanager
async def _connected(router):
    """A raw connection to the router, closed at the end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    try:
        yield reader, writer
    finally:
        writer.close()


async def _served(replicas, make_router, **overrides):
    (rep,) = await replicas(1, tokens=4)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}), **overrides)
    return rep, router


async def test_pipelined_requests_are_answered_in_order_on_one_kept_alive_connection(replicas, make_router):
    rep, router = await _served(replicas, make_router)
    async with _connected(router) as (reader, writer):
        writer.write(_post(b"/v1/chat/completions", CHAT, b"X-Request-Id: first\r\n")
                     + b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n"
                     + _post(b"/v1/chat/completions", CHAT, b"X-Request-Id: third\r\n"))
        first = await _read_response(reader)
        second = await _read_response(reader)
        third = await _read_response(reader)
        assert (first[0], first[1]["x-request-id"]) == (200, "first")
        assert orjson.loads(first[2])["object"] == "chat.completion"
        assert second[0] == 200 and orjson.loads(second[2])["status"] == "ok"
        assert (third[0], third[1]["x-request-id"]) == (200, "third")
        assert "connection" not in first[1] and "date" in first[1]
        # Still open: one more request on the same connection.
        writer.write(b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n")
        assert (await _read_response(reader))[0] == 200
    assert rep.requests == 2


async def test_http_1_0_and_connection_close_end_the_connection_after_the_answer(replicas, make_router):
    _, router = await _served(replicas, make_router)
    for request in (_post(b"/v1/chat/completions", CHAT, version=b"1.0"),
                    _post(b"/v1/chat/completions", CHAT, b"Connection: close\r\n")):
        async with _connected(router) as (reader, writer):
            writer.write(request)
            status, headers, body = await _read_response(reader)
            assert status == 200 and headers["connection"] == "close"
            assert orjson.loads(body)["choices"]
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the router


async def test_a_stream_to_an_http_1_0_client_is_its_plain_body_ended_by_closing(replicas, make_router):
    _, router = await _served(replicas, make_router)
    async with _connected(router) as (reader, writer):
        writer.write(_post(b"/v1/chat/completions", STREAM, version=b"1.0"))
        status, headers, body = await _read_response(reader)
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert "transfer-encoding" not in headers and "content-length" not in headers
    events = [line for line in body.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]" and len(events) >= 4


async def test_expect_100_continue_is_answered_before_the_body_is_sent(replicas, make_router):
    _, router = await _served(replicas, make_router)
    async with _connected(router) as (reader, writer):
        head = _post(b"/v1/chat/completions", b"", b"Expect: 100-continue\r\n").replace(
            b"Content-Length: 0", b"Content-Length: %d" % len(CHAT))
        writer.write(head)
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim.startswith(b"HTTP/1.1 100 ")
        writer.write(CHAT)
        status, _, body = await _read_response(reader)
        assert status == 200 and orjson.loads(body)["choices"]


async def test_head_unknown_paths_and_wrong_methods_get_json_answers(make_router):
    router = await make_router(None)
    async with _connected(router) as (reader, writer):
        writer.write(b"HEAD /health HTTP/1.1\r\nHost: r\r\n\r\nGET /nope HTTP/1.1\r\nHost: r\r\n\r\n"
                     b"PUT /health HTTP/1.1\r\nHost: r\r\nContent-Length: 0\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 ") and b"Content-Length: " in head  # and no body follows
        status, _, body = await _read_response(reader)
        assert status == 404 and orjson.loads(body)["error"]["code"] == "not_found"
        assert "/v1/chat/completions" in orjson.loads(body)["error"]["message"]
        status, headers, body = await _read_response(reader)
        assert status == 405 and headers["allow"] == "GET, HEAD"
        assert orjson.loads(body)["error"]["code"] == "method_not_allowed"
    assert router.metrics.rejected[("", "not_found")] == 1


async def test_an_idle_connection_is_closed_after_the_keepalive_timeout(make_router):
    router = await make_router(None, client_keepalive_timeout_s=1.0)
    async with _connected(router) as (reader, writer):
        writer.write(b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n")
        assert (await _read_response(reader))[0] == 200
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await asyncio.wait_for(reader.read(), 5) == b""
        assert 0.9 <= loop.time() - t0 < 4


async def test_a_request_half_sent_and_stalled_is_closed_after_the_keepalive_timeout(make_router):
    """A client that stops mid-head or mid-body (slowloris) is idle like any other: closed after
    client_keepalive_timeout_s without a byte, not held forever; and a stop does not wait for it."""
    router = await make_router(None, client_keepalive_timeout_s=1.0)
    loop = asyncio.get_running_loop()
    async with _connected(router) as (head_r, head_w), _connected(router) as (body_r, body_w):
        head_w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        body_w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mo")
        t0 = loop.time()
        assert await asyncio.wait_for(head_r.read(), 6) == b""
        assert await asyncio.wait_for(body_r.read(), 6) == b""
        assert 0.9 <= loop.time() - t0 < 4
    stalled = _connected(router)
    async with stalled as (_reader, writer):
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        await asyncio.sleep(0.1)
        t0 = loop.time()
        await asyncio.wait_for(router.stop(), 10)
        assert loop.time() - t0 < 3


async def test_stop_lets_a_request_being_served_finish_and_refuses_new_connections(replicas, make_router):
    rep, router = await _served(replicas, make_router)
    rep.delay_s = 0.5
    async with _connected(router) as (reader, writer):
        writer.write(_post(b"/v1/chat/completions", CHAT))
        await asyncio.sleep(0.2)  # the request is with the replica
        stopping = asyncio.create_task(router.stop())
        status, headers, body = await _read_response(reader)
        assert status == 200 and orjson.loads(body)["choices"]
        assert headers["connection"] == "close"
        await asyncio.wait_for(stopping, 10)
    try:
        await asyncio.open_connection("127.0.0.1", router.port)
        refused = False
    except OSError:
        refused = True
    assert refused


async def test_an_upgrade_request_is_answered_over_http_1_1_and_the_connection_then_closes(replicas, make_router):
    """curl --http2 on http:// asks for h2c: the answer is HTTP/1.1 and the connection ends after
    it (the parser stops at the upgrade; a kept-alive connection would hang the next request)."""
    _, router = await _served(replicas, make_router)
    async with _connected(router) as (reader, writer):
        writer.write(b"GET /health HTTP/1.1\r\nHost: r\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                     b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n")
        status, headers, body = await _read_response(reader)
        assert status == 200 and orjson.loads(body)["status"] == "ok"
        assert headers["connection"] == "close"
        assert await asyncio.wait_for(reader.read(), 2) == b""
    # With a body, the parser would hand the body over as upgraded bytes: refused, not served empty.
    async with _connected(router) as (reader, writer):
        writer.write(_post(b"/v1/chat/completions", CHAT, b"Connection: Upgrade\r\nUpgrade: h2c\r\n"))
        status, _, body = await _read_response(reader)
        assert status == 400 and "Upgrade" in orjson.loads(body)["error"]["message"]


async def test_a_chunked_request_with_trailers_is_served(replicas, make_router):
    rep, router = await _served(replicas, make_router)
    async with _connected(router) as (reader, writer):
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
                     + b"%x\r\n%b\r\n" % (len(CHAT), CHAT) + b"0\r\nX-Checksum: abc\r\n\r\n"
                     + b"GET /health HTTP/1.1\r\nHost: r\r\n\r\n")
        status, _, body = await _read_response(reader)
        assert status == 200 and orjson.loads(body)["object"] == "chat.completion"
        assert (await _read_response(reader))[0] == 200  # the connection goes on
    assert rep.requests == 1


async def test_a_too_large_body_gets_its_413_although_the_client_goes_on_sending(make_router):
    """The 413 is written, our side ended, and what the client still sends read and dropped: a
    reset would destroy the answer before the client read it."""
    router = await make_router(None, max_body_bytes=64 * 1024)
    size = 2 * 1024 * 1024
    async with _connected(router) as (reader, writer):
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % size)
        chunk = b"x" * 65536
        for _ in range(size // len(chunk)):
            writer.write(chunk)
            await writer.drain()
        status, headers, body = await _read_response(reader)
        assert status == 413 and orjson.loads(body)["error"]["code"]
        assert headers["connection"] == "close"


async def test_stop_waits_for_a_request_still_arriving(replicas, make_router):
    """A request half sent when stop begins is not cut: it is received, answered, then closed."""
    rep, router = await _served(replicas, make_router)
    async with _connected(router) as (reader, writer):
        request = _post(b"/v1/chat/completions", CHAT)
        writer.write(request[:40])
        await asyncio.sleep(0.2)
        stopping = asyncio.create_task(router.stop())
        await asyncio.sleep(0.3)
        assert not stopping.done()
        writer.write(request[40:])
        status, headers, body = await _read_response(reader)
        assert status == 200 and orjson.loads(body)["choices"]
        assert headers["connection"] == "close"
        await asyncio.wait_for(stopping, 10)
    assert rep.requests == 1


async def test_a_model_path_is_read_percent_decoded(replicas, make_router):
    """Client libraries percent-encode a model name where it needs it (a slash, a colon)."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"org/m:v1": [testing.replica("a", rep.port)]}))
    async with _connected(router) as (reader, writer):
        writer.write(b"GET /v1/models/org%2Fm%3Av1 HTTP/1.1\r\nHost: r\r\n\r\n")
        status, _, body = await _read_response(reader)
        assert status == 200 and orjson.loads(body)["id"] == "org/m:v1"


async def test_the_listeners_own_refusals_carry_a_request_id(make_router):
    """A request the listener refuses itself (a malformed head: 400; a head too large: 431; a body
    too large: 413) still gets an X-Request-Id, as every other answer does, so the client's report
    can be found in the router's log (event=bad_http_request request_id=...)."""
    router = await make_router(None, max_body_bytes=4096)
    cases = [(b"NOT HTTP AT ALL\r\n\r\n", 400),
             (b"GET /health HTTP/1.1\r\nHost: r\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),
             (_post(b"/v1/chat/completions", b"x" * 5000), 413)]
    ids = set()
    for raw, expected in cases:
        async with _connected(router) as (reader, writer):
            writer.write(raw)
            await writer.drain()
            status, headers, _body = await _read_response(reader)
            assert status == expected and headers["x-request-id"]
            ids.add(headers["x-request-id"])
    assert len(ids) == 3
