"""The upstream client's connection contract, fed response bytes directly (no sockets): framing,
keep-alive, interim responses, errors, back-pressure, abort and pooling. Parsing is httptools'; these
tests pin what the proxy relies on, however the bytes are split across reads."""

from __future__ import annotations

import asyncio

import pytest

from router import upstream


class Transport:
    def __init__(self):
        self.written = b""
        self.closed = False
        self.paused = False
        self.handle_closed = False  # as uvloop's after its handle is closed: writes raise

    def write(self, data: bytes) -> None:
        if self.handle_closed:
            raise RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def new_pool() -> upstream.Pool:
    return upstream.Pool("127.0.0.1", 1, loop=asyncio.get_running_loop())


async def connection(pool: upstream.Pool | None = None) -> upstream.Connection:
    conn = upstream.Connection(pool or new_pool())
    conn.connection_made(Transport())
    conn.send(b"POST / HTTP/1.1\r\n\r\n")
    return conn


def splits(raw: bytes):
    """Every way to cut ``raw`` in two, then byte by byte."""
    for i in range(1, len(raw)):
        yield [raw[:i], raw[i:]]
    yield [raw[i:i + 1] for i in range(len(raw))]


async def read(conn: upstream.Connection) -> tuple[int, bytes]:
    status = await asyncio.wait_for(conn.read_head(), 5)
    return status, await asyncio.wait_for(conn.read_all(), 5)


LENGTH = b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"
CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"7\r\ndata: a\r\n" b"10;ext=1\r\n0123456789abcdef\r\n" b"0\r\nX-Trailer: 1\r\n\r\n")
CLOSE_DELIMITED = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart1part2"


async def test_content_length_body_split_anywhere():
    """A Content-Length body completes exactly at its length, however split, and stays reusable."""
    for pieces in splits(LENGTH):
        conn = await connection()
        for piece in pieces:
            assert not conn.complete
            conn.data_received(piece)
        assert await read(conn) == (201, b'{"a":1}')
        assert conn.content_type == b"application/json" and conn.complete and conn.keep_alive


async def test_chunked_body_split_anywhere():
    """A chunked body (extensions, trailer) decodes the same however the bytes are split."""
    for pieces in splits(CHUNKED):
        conn = await connection()
        for piece in pieces:
            conn.data_received(piece)
        assert await read(conn) == (200, b"data: a0123456789abcdef")
        assert conn.content_type == b"text/event-stream" and conn.complete and conn.keep_alive


async def test_close_delimited_body_split_anywhere():
    """Without length or chunking the body ends, complete, at connection close, which is never reused."""
    for pieces in splits(CLOSE_DELIMITED):
        conn = await connection()
        for piece in pieces:
            conn.data_received(piece)
        assert not conn.complete and not conn.keep_alive
        conn.connection_lost(None)
        assert await read(conn) == (200, b"part1part2")
        assert conn.complete and conn.closed


async def test_non_chunked_transfer_coding_ends_at_close():
    """A body whose transfer coding does not end in chunked is read to the connection's close."""
    conn = await connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc")
    conn.data_received(b"def")
    assert not conn.complete
    conn.connection_lost(None)
    assert await read(conn) == (200, b"abcdef")


@pytest.mark.parametrize("head, keep_alive", [
    (b"HTTP/1.1 200 OK\r\n", True),
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\n", False),
    (b"HTTP/1.0 200 OK\r\n", False),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n", True),
])
async def test_keep_alive_follows_version_and_connection_header(head, keep_alive):
    """Only a response that allows keep-alive goes back to the pool; any other is closed on release."""
    pool = new_pool()
    conn = await connection(pool)
    conn.data_received(head + b"Content-Length: 2\r\n\r\nok")
    assert await read(conn) == (200, b"ok")
    assert conn.keep_alive is keep_alive
    pool.release(conn)
    assert pool.idle_count == (1 if keep_alive else 0) and conn.closed is not keep_alive


async def test_connection_carries_successive_requests():
    """A pooled connection parses the next response from scratch after the previous one completed."""
    conn = await connection()
    conn.data_received(CHUNKED)
    assert await read(conn) == (200, b"data: a0123456789abcdef")
    conn.send(b"POST / HTTP/1.1\r\n\r\n")
    assert conn.status == 0 and not conn.complete
    conn.data_received(LENGTH)
    assert await read(conn) == (201, b'{"a":1}')
    assert conn.content_type == b"application/json" and conn.keep_alive


async def test_interim_responses_are_skipped():
    """100 Continue and 103 Early Hints before the real response are ignored, their headers too."""
    conn = await connection()
    conn.data_received(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nContent-Type: x/hint\r\n\r\n")
    assert conn.status == 0
    conn.data_received(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert await read(conn) == (204, b"")
    assert conn.content_type == b"" and conn.complete and conn.keep_alive


async def test_not_modified_has_no_body():
    """A 304 ends at its head even when it announces a length."""
    conn = await connection()
    conn.data_received(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n")
    assert await read(conn) == (304, b"") and conn.complete


async def test_streaming_reads_arrive_chunk_by_chunk():
    """read_chunk returns each chunk as it arrives and b'' at the end."""
    conn = await connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    await conn.read_head()
    assert await conn.read_chunk() == b"abc"
    waiter = asyncio.ensure_future(conn.read_chunk())
    await asyncio.sleep(0)
    assert not waiter.done()
    conn.data_received(b"2\r\nde\r\n")
    assert await asyncio.wait_for(waiter, 5) == b"de"
    conn.data_received(b"0\r\n\r\n")
    assert await conn.read_chunk() == b""
    assert conn.complete


@pytest.mark.parametrize("received", [
    b"",
    b"HTTP/1.1 200 OK\r\nContent-Le",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 10\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
])
async def test_connection_lost_mid_response_is_a_reset(received):
    """A connection lost before a framed response ended fails the read with kind 'reset'."""
    conn = await connection()
    if received:
        conn.data_received(received)
    conn.connection_lost(ConnectionResetError())
    with pytest.raises(upstream.UpstreamError) as info:
        await read(conn)
    assert info.value.kind == "reset" and not conn.complete


@pytest.mark.parametrize("raw", [
    b"SSH-2.0-OpenSSH\r\n\r\n",
    b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/9.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nNo colon here\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
])
async def test_malformed_response_is_a_protocol_error(raw):
    """A response llhttp rejects fails with kind 'protocol' and closes the connection, however split."""
    for pieces in ([raw], [raw[i:i + 1] for i in range(len(raw))]):
        conn = await connection()
        for piece in pieces:
            conn.data_received(piece)
        with pytest.raises(upstream.UpstreamError) as info:
            await read(conn)
        assert info.value.kind == "protocol" and conn.closed and conn.transport.closed


async def test_endless_head_is_a_protocol_error():
    """A response head over MAX_HEAD_BYTES is refused instead of buffered without bound."""
    conn = await connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\n")
    line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
    for _ in range(upstream.MAX_HEAD_BYTES // len(line) + 1):
        conn.data_received(line)
    with pytest.raises(upstream.UpstreamError) as info:
        await read(conn)
    assert info.value.kind == "protocol" and conn.closed


@pytest.mark.parametrize("beyond", [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"garbage\r\n\r\n"])
async def test_bytes_beyond_the_response_keep_it_but_drop_the_connection(beyond):
    """A complete response followed by bytes nobody asked for is still read, but never reused."""
    pool = new_pool()
    conn = await connection(pool)
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + beyond)
    assert await read(conn) == (200, b"ok")
    assert conn.complete and conn.closed
    pool.release(conn)
    assert pool.idle_count == 0


async def test_data_on_an_idle_pooled_connection_closes_it():
    """Bytes arriving on a pooled connection between requests close it; the pool then skips it."""
    pool = new_pool()
    conn = await connection(pool)
    conn.data_received(LENGTH)
    await read(conn)
    pool.release(conn)
    assert pool.idle_count == 1
    conn.data_received(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
    assert conn.closed and conn.transport.closed
    assert pool.take_idle() is None


async def test_abort_fails_the_reader_and_closes():
    """abort() wakes a waiting reader with the given error and closes the connection, even for a
    close-delimited body (the close is ours, not the end of the body)."""
    conn = await connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\n\r\npartial")
    waiter = asyncio.ensure_future(conn.read_all())
    await asyncio.sleep(0)
    conn.abort(upstream.UpstreamError("timeout", "deadline passed"))
    conn.connection_lost(None)
    with pytest.raises(upstream.UpstreamError) as info:
        await asyncio.wait_for(waiter, 5)
    assert info.value.kind == "timeout" and conn.transport.closed and not conn.complete


async def test_slow_reader_pauses_the_replica():
    """A streaming body above the pause mark stops reading from the replica until consumed."""
    conn = await connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    await conn.read_head()
    conn.data_received(b"1\r\nx\r\n")
    await conn.read_chunk()
    big = b"a" * (upstream.PAUSE_ABOVE_BYTES + 10)
    conn.data_received(b"%x\r\n" % len(big) + big + b"\r\n")
    assert conn.transport.paused
    assert await conn.read_chunk() == big
    assert not conn.transport.paused


async def test_pool_reuses_only_complete_keepalive_connections():
    """release() keeps a finished keep-alive connection and closes anything else."""
    pool = new_pool()
    done = await connection(pool)
    done.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    pool.release(done)
    half = await connection(pool)
    half.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab")
    pool.release(half)
    assert pool.idle_count == 1 and half.closed
    assert pool.take_idle() is done and pool.take_idle() is None


async def test_a_pooled_connection_whose_transport_is_closing_is_not_handed_out():
    """The replica ended an idle connection and the transport is closing, its connection_lost not
    delivered yet: take_idle() skips it (a request written there would be dropped) and closes it."""
    pool = new_pool()
    conn = await connection(pool)
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    pool.release(conn)
    conn.transport.close()  # the transport's own close, as on the replica's FIN; conn.closed still False
    assert not conn.closed
    assert pool.take_idle() is None and conn.closed


async def test_a_write_the_transport_refuses_is_a_reset_not_a_crash():
    """A transport whose handle is closed raises RuntimeError on write (uvloop): send() turns it into
    UpstreamError("reset"), which the proxy retries, and closes the connection."""
    conn = upstream.Connection(new_pool())
    transport = Transport()
    conn.connection_made(transport)
    transport.handle_closed = True
    with pytest.raises(upstream.UpstreamError) as err:
        conn.send(b"POST / HTTP/1.1\r\n\r\n")
    assert err.value.kind == "reset" and conn.closed
