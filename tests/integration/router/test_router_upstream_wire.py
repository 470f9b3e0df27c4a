"""The router against a replica on loopback that answers with scripted bytes: what the replica
receives (the client-region header) and how the upstream client handles framing, stale pooled
connections and malformed answers over real sockets."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import orjson
import pytest

from meridian import fleet as fm
from router import testing
from tests.conftest import free_port

JSON = b'{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}'
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(JSON), JSON)
SSE = b"data: {\"choices\":[]}\n\n"
CHUNKED_SSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"%x\r\n%s\r\n" % (len(SSE), SSE) + b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")

# (connection number, request number on that connection, request body) -> (bytes to answer, close after).
# None as the answer closes the connection without answering.
Script = Callable[[int, int, bytes], tuple[bytes | None, bool]]


class RawReplica:
    """A TCP server on 127.0.0.1 answering each request with scripted bytes; records request heads."""

    def __init__(self, script: Script):
        self.script = script
        self.heads: list[bytes] = []
        self.connections = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> RawReplica:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        self.connections += 1
        conn_no = self.connections
        try:
            for req_no in range(1, 1000):
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                self.heads.append(head)
                answer, close = self.script(conn_no, req_no, body)
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
                if close:
                    return
        finally:
            writer.close()
            self._tasks.discard(asyncio.current_task())  # type: ignore[arg-type]


@pytest.fixture
async def raw_replica():
    """make(script) -> a started RawReplica, stopped after the test."""
    started: list[RawReplica] = []

    async def make(script: Script) -> RawReplica:
        rep = await RawReplica(script).start()
        started.append(rep)
        return rep

    yield make
    for rep in started:
        await rep.stop()


def chat(stream: bool = False) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hello"}], "stream": stream}


def url(router) -> str:
    return f"http://127.0.0.1:{router.port}/v1/chat/completions"


def streaming(body: bytes) -> bool:
    return orjson.loads(body).get("stream") is True


def region_of(head: bytes) -> str | None:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"x-meridian-client-region":
            return value.strip().decode()
    return None


async def test_client_region_is_forwarded_to_the_replica(raw_replica, make_router, http):
    """Every upstream request carries X-Meridian-Client-Region: the trusted header's region when
    known, else the router's own; a router with no region sends none."""
    rep = await raw_replica(lambda c, r, body: (CHUNKED_SSE if streaming(body) else OK, False))
    routes = testing.table(1, {"m": [testing.replica("a", rep.port)]})
    router = await make_router(routes, region="na-east", trusted_region_header="x-edge-region")
    async with http.post(url(router), json=chat()) as resp:
        assert resp.status == 200 and await resp.read() == JSON
    async with http.post(url(router), json=chat(), headers={"x-edge-region": "ap-northeast"}) as resp:
        assert resp.status == 200
    async with http.post(url(router), json=chat(), headers={"x-edge-region": "atlantis"}) as resp:
        assert resp.status == 200
    async with http.post(url(router), json=chat(stream=True), headers={"x-edge-region": "eu-west"}) as resp:
        assert resp.status == 200 and (await resp.read()).endswith(b"data: [DONE]\n\n")
    assert [region_of(h) for h in rep.heads] == ["na-east", "ap-northeast", "na-east", "eu-west"]
    plain = await make_router(routes)
    async with http.post(url(plain), json=chat()) as resp:
        assert resp.status == 200
    assert region_of(rep.heads[-1]) is None


async def test_stale_pooled_connection_is_replaced_without_a_failure(raw_replica, make_router, http):
    """A pooled connection the replica drops as the next request arrives is replaced once,
    transparently: the client gets its answer and no upstream error is counted."""
    rep = await raw_replica(lambda c, r, body: (None, True) if (c, r) == (1, 2) else (OK, False))
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    for _ in range(3):
        async with http.post(url(router), json=chat()) as resp:
            assert resp.status == 200 and await resp.read() == JSON
    assert rep.connections == 2 and len(rep.heads) == 4
    assert not router.metrics.upstream_errors


async def test_close_delimited_answers_are_relayed_whole(raw_replica, make_router, http):
    """Answers without length or chunking (unary and SSE) are relayed up to the replica's close,
    and the next request opens a new connection."""
    def script(c, r, body):
        if streaming(body):
            return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + SSE * 3 + b"data: [DONE]\n\n", True
        return b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + JSON, True

    rep = await raw_replica(script)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    async with http.post(url(router), json=chat()) as resp:
        assert resp.status == 200 and await resp.read() == JSON
        assert resp.headers["Content-Type"] == "application/json"
    async with http.post(url(router), json=chat(stream=True)) as resp:
        assert resp.status == 200 and await resp.read() == SSE * 3 + b"data: [DONE]\n\n"
    assert rep.connections == 2 and not router.metrics.upstream_errors


async def test_malformed_answer_is_a_502_protocol_error(raw_replica, make_router, http):
    """A replica answering something that is not HTTP gets the client a 502 and counts a protocol error."""
    rep = await raw_replica(lambda c, r, body: (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
                                                False))
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    async with http.post(url(router), json=chat()) as resp:
        assert resp.status == 502
        assert (await resp.json())["error"]["code"] == "upstream_error"
    assert router.metrics.upstream_errors[("m", "a", "protocol")] == 1


async def test_max_rtt_ms_keeps_clients_on_replicas_within_it_while_any_is_healthy(raw_replica, make_router, http):
    """A Mumbai client and a deployment with max_rtt_ms 90: requests stay on the ap-south-1 replica
    even when it looks busier than the Ireland one (which the latency policy alone prefers); when the
    near replica leaves the table, or dies while still in it, Ireland serves instead of a failure."""
    near = await raw_replica(lambda c, r, body: (OK, False))
    far = await raw_replica(lambda c, r, body: (OK, False))
    busy = testing.replica("near", near.port, "ap-south-1", queued=200)
    ireland = testing.replica("far", far.port, "eu-west-1")

    def routes(version: int, reps: list, max_rtt_ms: float) -> fm.RoutingTable:
        base = testing.table(version, {"m": reps})
        return dataclasses.replace(base, models=(dataclasses.replace(base.models[0], max_rtt_ms=max_rtt_ms),))

    router = await make_router(routes(1, [busy, ireland], 0.0), trusted_region_header="x-edge-region")
    mumbai = {"x-edge-region": "ap-south"}

    async def send(n: int) -> None:
        for _ in range(n):
            async with http.post(url(router), json=chat(), headers=mumbai) as resp:
                assert resp.status == 200

    await send(10)
    assert len(far.heads) == 10 and not near.heads  # no limit: the least loaded, 110 ms away
    router.state.apply(routes(2, [busy, ireland], 90.0), "static")
    await send(10)
    assert len(near.heads) == 10 and len(far.heads) == 10  # within 90 ms while it is there
    router.state.apply(routes(3, [dataclasses.replace(busy, state=fm.ReplicaState.DRAINING), ireland], 90.0), "static")
    await send(5)
    assert len(near.heads) == 10 and len(far.heads) == 15
    # The near replica dies while the table still lists it (a lost region): the first attempt goes
    # there and fails to connect, the retry may leave the SLA's reach, and the client gets its answer.
    await near.stop()
    dead = [testing.replica(f"dead{i}", free_port(), "ap-south-1") for i in range(3)]  # nothing listens
    router.state.apply(routes(4, [busy, *dead, ireland], 90.0), "static")
    await send(5)
    assert len(far.heads) == 20
