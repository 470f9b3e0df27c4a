"""The HTTP/1.1 response parser of the upstream client, fed byte streams directly."""

from __future__ import annotations

import asyncio

import pytest

from router import upstream


class Transport:
    def __init__(self):
        self.written = b""
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


async def connection() -> upstream.Connection:
    pool = upstream.Pool("127.0.0.1", 1, loop=asyncio.get_running_loop())
    conn = upstream.Connection(pool)
    conn.connection_made(Transport())
    conn.send(b"POST / HTTP/1.1\r\n\r\n")
    return conn


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"7\r\ndata: a\r\n" b"10\r\n0123456789abcdef\r\n" b"0\r\nX-Trailer: 1\r\n\r\n")


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 1000])
async def test_chunked_body_split_anywhere(size):
    """A chunked body decodes the same however the bytes are split across reads."""
    conn = await connection()
    for piece in pieces(CHUNKED, size):
        conn.data_received(piece)
    assert await conn.read_head() == 200
    assert conn.content_type == b"text/event-stream"
    assert await conn.read_all() == b"data: a0123456789abcdef"
    assert conn.complete and conn.keep_alive


@pytest.mark.parametrize("size", [1, 4, 1000])
async def test_content_length_body(size):
    """A Content-Length body completes exactly at its length and the connection stays reusable."""
    conn = await connection()
    raw = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nContent-Type: application/json\r\n\r\nhello"
    for piece in pieces(raw, size):
        conn.data_received(piece)
    assert await conn.read_head() == 201
    assert await conn.read_all() == b"hello"
    assert conn.complete and conn.keep_alive


async def test_close_delimited_body_and_connection_close():
    """Without length or chunking the body ends at connection close, which is never reused."""
    conn = await connection()
    conn.data_received(b"HTTP/1.0 200 OK\r\n\r\npart1")
    conn.data_received(b"part2")
    conn.connection_lost(None)
    assert await conn.read_all() == b"part1part2"
    assert not conn.keep_alive


async def test_interim_100_continue_is_skipped():
    """A 100 Continue before the real response is ignored."""
    conn = await connection()
    conn.data_received(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
    assert await conn.read_head() == 204
    assert await conn.read_all() == b""


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
    assert await waiter == b"de"
    conn.data_received(b"0\r\n\r\n")
    assert await conn.read_chunk() == b""


async def test_reset_mid_body_raises():
    """A connection lost mid-body fails the read with kind 'reset'."""
    conn = await connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    await conn.read_head()
    conn.connection_lost(ConnectionResetError())
    with pytest.raises(upstream.UpstreamError) as info:
        await conn.read_all()
    assert info.value.kind == "reset"


async def test_garbage_is_a_protocol_error():
    """A response that is not HTTP fails with kind 'protocol' and closes the connection."""
    conn = await connection()
    conn.data_received(b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(upstream.UpstreamError) as info:
        await conn.read_head()
    assert info.value.kind == "protocol" and conn.closed


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
    pool = upstream.Pool("127.0.0.1", 1, loop=asyncio.get_running_loop())
    done = upstream.Connection(pool)
    done.connection_made(Transport())
    done.send(b"x")
    done.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    pool.release(done)
    half = upstream.Connection(pool)
    half.connection_made(Transport())
    half.send(b"x")
    half.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab")
    pool.release(half)
    assert pool.idle_count == 1 and half.closed
    assert pool.take_idle() is done and pool.take_idle() is None
