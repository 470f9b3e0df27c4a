"""The router in front of fake SGLang replicas on loopback: relaying, streaming, cancellation,
failover, retry budget, ejection, health checks, limits and errors."""

from __future__ import annotations

import asyncio

import orjson

from meridian.fleet import models as fm
from router import testing
from tests.conftest import free_port


def chat(model: str = "m", stream: bool = False, **extra) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": "hello"}], "stream": stream, **extra}


def url(router, path: str = "/v1/chat/completions") -> str:
    return f"http://127.0.0.1:{router.port}{path}"


async def until(predicate, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_non_streaming_relay_and_request_ids(replicas, make_router, http):
    """A chat completion comes back as the replica sent it; request ids reach the replica and the client."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    async with http.post(url(router), json=chat()) as resp:
        assert resp.status == 200
        body = await resp.json()
        rid = resp.headers["X-Request-Id"]
    assert body["choices"][0]["message"]["content"].startswith("t0") and body["usage"]["completion_tokens"] == 8
    assert rep.request_ids[-1] == rid
    async with http.post(url(router), json=chat(), headers={"X-Request-Id": "client-42"}) as resp:
        assert resp.headers["X-Request-Id"] == "client-42"
    assert rep.request_ids[-1] == "client-42"


async def test_streaming_is_relayed_in_order_without_buffering(replicas, make_router, http):
    """The client reads the first chunks while the replica still holds back the last one; order is kept."""
    (rep,) = await replicas(1, tokens=6)
    rep.gate = True
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    received = b""
    async with http.post(url(router), json=chat(stream=True)) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
        while received.count(b"data:") < 6:  # role chunk + 5 of 6 deltas; the 6th is held back
            received += await asyncio.wait_for(resp.content.readany(), 10)
        assert rep.completed == 0 and not rep.hold_last.is_set()
        rep.hold_last.set()
        async for piece in resp.content.iter_any():
            received += piece
    events = [line[6:] for line in received.split(b"\n\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    contents = [orjson.loads(e)["choices"][0]["delta"].get("content") for e in events[1:-2]]
    assert contents == [f"t{i} " for i in range(6)]


async def test_client_disconnect_cancels_the_upstream_stream(replicas, make_router, http):
    """A client leaving mid-stream makes the router close the replica connection (replica sees it)."""
    (rep,) = await replicas(1, tokens=200, token_delay_s=0.05)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    resp = await http.post(url(router), json=chat(stream=True))
    await resp.content.readany()
    resp.close()
    await until(lambda: rep.disconnects == 1)
    assert rep.completed == 0
    await until(lambda: router.metrics.disconnects["m"] == 1)


async def test_client_disconnect_cancels_a_pending_unary_request(replicas, make_router, http):
    """A client that gives up on a non-streaming request frees the replica too."""
    (rep,) = await replicas(1)
    rep.delay_s = 30
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    request = asyncio.create_task(http.post(url(router), json=chat()))
    await until(lambda: rep.requests == 1)  # the replica is working on it
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)
    await until(lambda: rep.disconnects == 1)
    await until(lambda: router.state.models["m"].admission.in_flight == 0)


async def test_failover_on_5xx_goes_to_another_replica(replicas, make_router, http):
    """With one replica answering 503, every request still succeeds, never retried on the failing one."""
    bad, good = await replicas(2)
    bad.fail_status = 503
    router = await make_router(testing.table(1, {"m": [testing.replica("bad", bad.port),
                                                       testing.replica("good", good.port)]}, policy="round_robin"),
                               outlier={"consecutive_failures": 1000})
    statuses = []
    for _ in range(10):
        async with http.post(url(router), json=chat()) as resp:
            statuses.append(resp.status)
            await resp.read()
    assert statuses == [200] * 10
    assert good.completed == 10 and bad.requests == 5
    assert sum(n for (model, reason), n in router.metrics.retries.items() if reason == "status_5xx") == 5


async def test_streaming_failover_before_first_byte(replicas, make_router, http):
    """A streaming request whose first replica fails before any byte is retried transparently."""
    bad, good = await replicas(2)
    bad.fail_status = 500
    router = await make_router(testing.table(1, {"m": [testing.replica("bad", bad.port),
                                                       testing.replica("good", good.port)]}, policy="round_robin"))
    for _ in range(4):
        async with http.post(url(router), json=chat(stream=True)) as resp:
            assert resp.status == 200
            assert (await resp.read()).endswith(b"data: [DONE]\n\n")
    assert good.completed == 4


async def test_when_every_replica_fails_the_last_answer_is_relayed(replicas, make_router, http):
    """If all tries fail with 5xx, the client gets the replica's error, after one try per replica."""
    a, b = await replicas(2)
    a.fail_status = b.fail_status = 500
    router = await make_router(testing.table(1, {"m": [testing.replica("a", a.port), testing.replica("b", b.port)]}))
    async with http.post(url(router), json=chat()) as resp:
        assert resp.status == 500
        assert "failing" in (await resp.json())["error"]["message"]
    assert a.requests + b.requests == 2


async def test_retry_budget_stops_retries(replicas, make_router, http):
    """With an empty retry budget, failures are not retried and the refusals are counted."""
    bad, good = await replicas(2)
    bad.fail_status = 503
    router = await make_router(
        testing.table(1, {"m": [testing.replica("bad", bad.port), testing.replica("good", good.port)]},
                      policy="round_robin"),
        retry={"budget_ratio": 0.0, "budget_min_per_s": 0.0}, outlier={"consecutive_failures": 1000})
    statuses = []
    for _ in range(6):
        async with http.post(url(router), json=chat()) as resp:
            statuses.append(resp.status)
    assert statuses.count(503) == 3 and statuses.count(200) == 3
    assert router.metrics.budget_exhausted["m"] == 3 and not router.metrics.retries


async def test_ejection_and_return(replicas, make_router, http):
    """A replica failing twice in a row is ejected (no traffic), then returns when its time is over."""
    bad, good = await replicas(2)
    bad.fail_status = 500
    router = await make_router(
        testing.table(1, {"m": [testing.replica("bad", bad.port), testing.replica("good", good.port)]},
                      policy="round_robin"),
        outlier={"consecutive_failures": 2, "base_ejection_s": 2.0, "max_ejection_s": 10.0})
    for _ in range(4):
        async with http.post(url(router), json=chat()) as resp:
            assert resp.status == 200
    assert router.metrics.ejections[("m", "bad")] == 1
    seen = bad.requests
    bad.fail_status = 0
    for _ in range(6):
        async with http.post(url(router), json=chat()) as resp:
            assert resp.status == 200
    assert bad.requests == seen  # ejected: nothing sent to it
    await asyncio.sleep(2.1)
    for _ in range(6):
        async with http.post(url(router), json=chat()) as resp:
            assert resp.status == 200
    assert bad.completed >= 2  # back in rotation


async def test_dead_replica_connect_failures_fail_over(replicas, make_router, http):
    """A replica whose port is closed costs a retry, not an error, and gets ejected."""
    (good,) = await replicas(1)
    dead_port = free_port()  # nothing listens there
    router = await make_router(testing.table(1, {"m": [testing.replica("dead", dead_port),
                                                       testing.replica("good", good.port)]}, policy="round_robin"),
                               outlier={"consecutive_failures": 2})
    for _ in range(8):
        async with http.post(url(router), json=chat()) as resp:
            assert resp.status == 200
    assert router.metrics.ejections[("m", "dead")] == 1
    assert router.metrics.upstream_errors[("m", "dead", "connect")] == 2


async def test_active_health_checks_take_a_replica_out_and_back(replicas, make_router, http):
    """/health failing 3 times takes a replica out of rotation; 2 successes bring it back."""
    sick, well = await replicas(2)
    router = await make_router(
        testing.table(1, {"m": [testing.replica("sick", sick.port), testing.replica("well", well.port)]},
                      policy="round_robin"),
        health={"enabled": True, "interval_s": 0.05, "timeout_s": 1.0})
    sick.healthy = False
    await until(lambda: not router.state.endpoints["sick"].active_up)
    before = sick.requests
    for _ in range(4):
        async with http.post(url(router), json=chat()) as resp:
            assert resp.status == 200
    assert sick.requests == before
    sick.healthy = True
    await until(lambda: router.state.endpoints["sick"].active_up)


async def test_draining_replicas_get_no_new_requests(replicas, make_router, http):
    """A replica the scheduler marks DRAINING receives nothing."""
    draining, ready = await replicas(2)
    router = await make_router(testing.table(1, {"m": [
        testing.replica("draining", draining.port, state=fm.ReplicaState.DRAINING),
        testing.replica("ready", ready.port)]}, policy="round_robin"))
    for _ in range(5):
        async with http.post(url(router), json=chat()) as resp:
            assert resp.status == 200
    assert draining.requests == 0 and ready.requests == 5


async def test_body_limit_is_413(replicas, make_router, http):
    """Bodies over max_body_bytes get 413 in the OpenAI error shape, with or without Content-Length."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}), max_body_bytes=2048)
    big = orjson.dumps(chat(extra="x" * 4096))
    async with http.post(url(router), data=big, headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"]["code"] == "request_too_large"

    async def chunks():
        yield big[:1000]
        yield big[1000:]

    async with http.post(url(router), data=chunks(), headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 413
    assert rep.requests == 0


async def test_bad_requests_and_unknown_model_over_http(replicas, make_router, http):
    """Invalid JSON and missing fields are 400, an unknown model is 404, all in OpenAI's error shape."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    cases = [
        (b"{oops", "application/json", 400, None),
        (orjson.dumps({"messages": []}), "application/json", 400, "model"),
        (orjson.dumps(chat(stream="no")), "application/json", 400, "stream"),
        (orjson.dumps(chat()), "text/plain", 400, None),
        (orjson.dumps(chat(model="nope")), "application/json", 404, "model"),
    ]
    for data, content_type, status, param in cases:
        async with http.post(url(router), data=data, headers={"Content-Type": content_type}) as resp:
            assert resp.status == status
            assert resp.headers["Content-Type"].startswith("application/json")
            error = (await resp.json())["error"]
            assert error["param"] == param and error["message"]
    async with http.post(url(router), json=chat(), headers={"x-meridian-timeout-s": "soon"}) as resp:
        assert resp.status == 400
    assert rep.requests == 0


async def test_request_deadline_is_504(replicas, make_router, http):
    """A request whose deadline passes before the replica answers gets 504 and frees the replica."""
    (rep,) = await replicas(1)
    rep.delay_s = 30
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    async with http.post(url(router), json=chat(), headers={"x-meridian-timeout-s": "1.0"}) as resp:
        assert resp.status == 504
        assert (await resp.json())["error"]["code"] == "deadline_exceeded"
    await until(lambda: rep.disconnects == 1)


async def test_overload_gets_429_with_retry_after(replicas, make_router, http):
    """Beyond in-flight limit and queue, a request is refused at once with 429 and Retry-After."""
    (rep,) = await replicas(1)
    rep.delay_s = 0.5
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}),
                               max_in_flight_per_replica=1, queue_size_per_model=1)

    async def one():
        async with http.post(url(router), json=chat()) as resp:
            await resp.read()
            return resp.status, resp.headers.get("Retry-After")

    results = await asyncio.gather(*(one() for _ in range(3)))
    assert sorted(s for s, _ in results) == [200, 200, 429]
    assert [ra for s, ra in results if s == 429] == ["1"]


async def test_embeddings_generate_and_models(replicas, make_router, http):
    """/v1/embeddings, SGLang's /generate and /v1/models work through the router."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    async with http.post(url(router, "/v1/embeddings"), json={"model": "m", "input": ["a", "b"]}) as resp:
        assert resp.status == 200 and len((await resp.json())["data"]) == 2
    async with http.post(url(router, "/generate"), json={"text": "hi", "sampling_params": {}}) as resp:
        assert resp.status == 200
    async with http.get(url(router, "/v1/models")) as resp:
        assert [m["id"] for m in (await resp.json())["data"]] == ["m"]
    async with http.get(url(router, "/v1/models/zzz")) as resp:
        assert resp.status == 404


async def test_trusted_region_header(replicas, make_router, http):
    """A trusted edge header moves the client's region (and the choice); untrusted headers are ignored."""
    east, tokyo = await replicas(2)
    routes = testing.table(1, {"m": [testing.replica("east", east.port, "us-east-1"),
                                     testing.replica("tokyo", tokyo.port, "ap-northeast-1")]})
    trusting = await make_router(routes, region="na-east", trusted_region_header="x-meridian-client-region")
    for _ in range(3):
        async with http.post(url(trusting), json=chat(), headers={"x-meridian-client-region": "ap-northeast"}) as resp:
            assert (await resp.json())["replica"] == tokyo.name
    ignoring = await make_router(routes, region="na-east")
    async with http.post(url(ignoring), json=chat(), headers={"x-meridian-client-region": "ap-northeast"}) as resp:
        assert (await resp.json())["replica"] == east.name


async def test_metrics_endpoint(replicas, make_router, http):
    """/metrics exposes request counts, TTFT histograms and per-replica availability."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}), region="na-east")
    async with http.post(url(router), json=chat(stream=True)) as resp:
        await resp.read()
    async with http.get(url(router, "/metrics")) as resp:
        text = await resp.text()
    assert 'meridian_router_requests_total{code="200",model="m",region="na-east",replica="a"} 1.0' in text
    assert 'meridian_router_ttft_seconds_count{model="m",region="na-east"} 1.0' in text
    assert 'meridian_router_replica_available{model="m",region="us-east-1",replica="a"} 1.0' in text


async def test_deadline_mid_stream_ends_with_an_error_event(replicas, make_router, http):
    """A stream still running at its deadline ends with an SSE error event, and the replica is freed."""
    (rep,) = await replicas(1, tokens=100, token_delay_s=0.05)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    async with http.post(url(router), json=chat(stream=True), headers={"x-meridian-timeout-s": "1.0"}) as resp:
        assert resp.status == 200
        body = await resp.read()
    assert b'"code":"deadline_exceeded"' in body.rsplit(b"data: ", 1)[-1]
    await until(lambda: rep.disconnects == 1)


async def test_a_flowing_stream_outlives_request_timeout_s_but_not_a_stalled_one(replicas, make_router, http):
    """Under the router's own deadline (no x-meridian-timeout-s), request_timeout_s bounds the wait
    for the first byte and each stretch without a chunk, not a whole answer that keeps flowing (a
    long reasoning stream was cut at 10 minutes, where SGLang has no limit); a stream that stalls
    still ends with the deadline's error event."""
    (rep,) = await replicas(1, tokens=30, token_delay_s=0.1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}), request_timeout_s=1.5)
    async with http.post(url(router), json=chat(stream=True)) as resp:
        body = await resp.read()
    assert resp.status == 200 and body.endswith(b"data: [DONE]\n\n") and body.count(b'"delta"') == 32
    rep.gate = True  # the last token waits: the stream stalls
    async with http.post(url(router), json=chat(stream=True)) as resp:
        body = await resp.read()
    assert b'"code":"deadline_exceeded"' in body.rsplit(b"data: ", 1)[-1]
    rep.hold_last.set()


async def test_traffic_is_reported_per_replica_revision(replicas, make_router, http):
    """Each answered request is tallied under the revision of the replica that answered it (what a
    rollout's error rate is computed from)."""
    rep_a, rep_b = await replicas(2)
    a = fm.RouteReplica("a", f"http://127.0.0.1:{rep_a.port}", fm.Cloud.AWS, "us-east-1", revision="old")
    b = fm.RouteReplica("b", f"http://127.0.0.1:{rep_b.port}", fm.Cloud.AWS, "us-east-1", revision="new")
    router = await make_router(testing.table(1, {"m": [a, b]}, policy="round_robin"))
    for _ in range(6):
        async with http.post(url(router), json=chat()) as resp:
            assert resp.status == 200
    samples = {s.revision: s.requests for s in router.traffic.take("r", "na-east").samples}
    assert samples == {"old": rep_a.completed, "new": rep_b.completed} and sum(samples.values()) == 6
