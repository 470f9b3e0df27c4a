"""Limits on the router's listener over loopback: request heads over the limits get 431, bodies 413,
streams per API key 429 with Retry-After, each a JSON error that says what to do; none of them
costs the router memory in proportion to what the client sends."""

from __future__ import annotations

import asyncio
import logging
import resource

import orjson

from router import auth, testing

CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


async def _raw(port: int, data: bytes, *, read: int = 65536) -> tuple[int, dict]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        status = int(head.split(b" ", 2)[1])
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        body = await reader.readexactly(length)
        assert b"application/json" in head.lower(), head
        return status, orjson.loads(body)
    finally:
        writer.close()


def _head(*extra: bytes, length: int = len(CHAT)) -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n" % length + b"".join(extra) + b"\r\n")


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def test_header_line_over_the_limit_is_a_431_json_error_not_a_logged_traceback(make_router, caplog):
    """A header line longer than max_header_line_bytes: 431 naming the limit; nothing at ERROR."""
    router = await make_router(None, max_header_line_bytes=4096)
    caplog.set_level(logging.INFO)
    status, body = await _raw(router.port, _head(b"X-Big: " + b"a" * 5000 + b"\r\n") + CHAT)
    assert status == 431 and "4096 bytes" in body["error"]["message"]
    assert body["error"]["code"] == "request_header_fields_too_large"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert router.metrics.rejected[("", "request_header_fields_too_large")] == 1


async def test_many_headers_are_a_431_and_do_not_grow_memory(make_router, caplog):
    """Headers beyond max_headers: 431; a flood of small headers is cut off at the limit, not
    buffered: the router stops reading and its memory does not grow."""
    router = await make_router(None, max_headers=50)
    caplog.set_level(logging.INFO)
    status, body = await _raw(router.port, _head(*(b"X-%d: v\r\n" % i for i in range(60))) + CHAT)
    assert status == 431 and "more than 50 headers" in body["error"]["message"]
    # A flood: 64 MiB of small headers, sent 64 KiB at a time, until the router cuts it off.
    before = _peak_rss_mib()
    piece = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 100) for i in range(600))
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    sent = 0
    try:
        writer.write(_head()[:-2])  # the head goes on: a flood of headers
        while sent < 64 << 20:
            writer.write(piece)
            await writer.drain()
            sent += len(piece)
    except ConnectionError:
        pass
    try:
        # The 431 is written and a few MiB more read and dropped (a lingering close), then the
        # router cuts the flood off, which may reset the connection before we read the answer:
        # what matters here is that it stopped reading.
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert b" 431 " in head.split(b"\r\n", 1)[0]
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    writer.close()
    assert sent < 16 << 20, f"the router read {sent} bytes of headers before refusing"
    assert _peak_rss_mib() - before < 10, _peak_rss_mib() - before
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_malformed_http_is_a_400_json_error(make_router, caplog):
    """Bytes that are not HTTP (TLS sent to a plaintext port) get a JSON 400 saying what was wrong."""
    router = await make_router(None)
    caplog.set_level(logging.INFO)
    status, body = await _raw(router.port, b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 60)
    assert status == 400 and body["error"]["code"] == "bad_http_request"
    assert "HTTPS" in body["error"]["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_huge_body_is_refused_413_without_being_buffered(replicas, make_router, http):
    """A body over max_body_bytes is 413 when declared (Content-Length) and when streamed (chunked):
    200 MiB sent at the router costs it at most its limit, and the replica sees nothing."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}), max_body_bytes=1 << 20)
    status, body = await _raw(router.port, _head(length=1 << 30))
    assert status == 413 and body["error"]["code"] == "request_too_large"
    assert "1048576 bytes (its max_body_bytes setting)" in body["error"]["message"]

    async def chunks():
        piece = b" " * (1 << 16)
        for _ in range(3200):  # 200 MiB
            yield piece

    before = _peak_rss_mib()
    async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", data=chunks(),
                         headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"]["code"] == "request_too_large"
    assert _peak_rss_mib() - before < 40
    assert rep.requests == 0


async def test_streams_per_api_key_over_the_limit_get_429_with_retry_after(tmp_path, replicas, make_router, http):
    """A key holding its max_concurrent_streams open gets 429 (too_many_streams, Retry-After) for
    another stream, while its non-streaming requests and other keys' streams go through; when its
    streams end the key may open one again."""
    (rep,) = await replicas(1, tokens=3)
    rep.gate = True  # streams hold before their last delta until released
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - {{name: limited, sha256: {auth.hash_key('sk-limited')}, max_concurrent_streams: 2}}\n"
                    f"  - {{name: other, sha256: {auth.hash_key('sk-other')}}}\n")
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}), api_keys_file=str(keys),
                               default_max_concurrent_streams=5)
    url = f"http://127.0.0.1:{router.port}/v1/chat/completions"
    stream = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}

    def key(k: str) -> dict:
        return {"Authorization": f"Bearer {k}"}

    held = [await http.post(url, json=stream, headers=key("sk-limited")) for _ in range(2)]
    held.append(await http.post(url, json=stream, headers=key("sk-other")))
    assert [r.status for r in held] == [200, 200, 200]
    async with http.post(url, json=stream, headers=key("sk-limited")) as resp:
        assert resp.status == 429 and resp.headers["Retry-After"] == "1"
        error = (await resp.json())["error"]
        assert error["code"] == "too_many_streams" and "2 streaming requests open" in error["message"]
    async with http.post(url, json={**stream, "stream": False}, headers=key("sk-limited")) as resp:
        assert resp.status == 200
    rep.hold_last.set()
    for resp in held:
        assert (await resp.read()).rstrip().endswith(b"[DONE]")
        resp.release()
    await asyncio.sleep(0.05)
    assert router.proxy._streams == {}
    async with http.post(url, json=stream, headers=key("sk-limited")) as resp:
        assert resp.status == 200
        await resp.read()
