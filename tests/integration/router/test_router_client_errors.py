"""What a client built on the official OpenAI SDK meets when the router cannot serve it: a router
with no routing table yet says so with a retryable 503 (not a 404 for every model), a request's
own deadline holds in the admission queue too, a replica's error reaches the client in the OpenAI
error shape, and a key limited to some models sees only those."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest
import redis.asyncio as aioredis

from router import auth, testing

MESSAGES = [{"role": "user", "content": "hello"}]


def client(router, key: str = "x", **kw) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{router.port}/v1", api_key=key, **kw)


async def test_before_any_routing_table_requests_get_a_retryable_503(make_router):
    """No table yet (starting, scheduler unreachable, no last-known-good copy): chat and the model
    list answer 503 not_ready with a Retry-After, which the SDK retries, where chat used to get a
    404 model_not_found ("served models: none yet") that no client retries."""
    router = await make_router()
    c = client(router, max_retries=0)
    with pytest.raises(openai.InternalServerError) as err:
        await c.chat.completions.create(model="llama", messages=MESSAGES)
    assert err.value.status_code == 503 and err.value.body["code"] == "not_ready"
    assert err.value.response.headers["Retry-After"] == "1"
    with pytest.raises(openai.InternalServerError):
        await c.models.list()
    await c.close()


async def test_the_request_deadline_holds_while_it_waits_in_the_admission_queue(replicas, make_router):
    """One slot per replica, taken by a slow request: the next one, with a 1-s deadline, gets 504
    deadline_exceeded after about a second, not 429 after the 5-s queue timeout."""
    (rep,) = await replicas(1)
    rep.delay_s = 4
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}),
                               max_in_flight_per_replica=1, queue_timeout_s=5)
    c = client(router, max_retries=0, timeout=20)
    slow = asyncio.create_task(c.chat.completions.create(model="m", messages=MESSAGES))
    await asyncio.sleep(0.3)
    t0 = time.monotonic()
    with pytest.raises(openai.APIStatusError) as err:
        await c.chat.completions.create(model="m", messages=MESSAGES, extra_headers={"x-meridian-timeout-s": "1"})
    waited = time.monotonic() - t0
    assert err.value.status_code == 504 and err.value.body["code"] == "deadline_exceeded"
    assert 0.8 < waited < 3.0
    assert (await slow).choices[0].message.content
    await c.close()


async def test_a_replica_error_reaches_the_sdk_in_the_openai_shape(replicas, make_router):
    """SGLang answers a bad request with its error fields at the top level; the client gets them in
    {"error": {...}} like the router's own errors, so the SDK's error carries the message and code."""
    (rep,) = await replicas(1)
    rep.fail_status = 400
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    c = client(router, max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        await c.chat.completions.create(model="m", messages=MESSAGES)
    assert err.value.body == {"message": "r0 failing", "type": "Error", "param": None, "code": 400}
    assert err.value.message.endswith("r0 failing") or "r0 failing" in err.value.message
    await c.close()


async def test_a_key_limited_to_some_models_sees_only_those(redis_url, replicas, make_router):
    """The model list, a model's card, the 404 hint and /router/status show a narrow key only the
    models it may use; a key without a model list sees them all."""
    redis = aioredis.Redis.from_url(redis_url)
    await auth.put_key(redis, "sk-all", "ops")
    await auth.put_key(redis, "sk-narrow", "team-b", models=["tiny"])
    await redis.aclose()
    rep_a, rep_b = await replicas(2)
    router = await make_router(testing.table(1, {"tiny": [testing.replica("a", rep_a.port)],
                                                 "secret": [testing.replica("b", rep_b.port)]}),
                               redis_url=redis_url, api_keys_in_redis=True)
    narrow, everyone = client(router, "sk-narrow", max_retries=0), client(router, "sk-all", max_retries=0)
    assert [m.id for m in (await narrow.models.list()).data] == ["tiny"]
    assert [m.id for m in (await everyone.models.list()).data] == ["secret", "tiny"]
    with pytest.raises(openai.NotFoundError):
        await narrow.models.retrieve("secret")
    assert (await everyone.models.retrieve("secret")).id == "secret"
    with pytest.raises(openai.NotFoundError) as err:
        await narrow.chat.completions.create(model="nope", messages=MESSAGES)
    assert "served models: tiny" in err.value.body["message"] and "secret" not in err.value.body["message"]
    status = await narrow.get("/../router/status", cast_to=object)
    assert [m["model"] for m in status["models"]] == ["tiny"]
    await narrow.close()
    await everyone.close()


async def test_answers_the_router_builds_itself_carry_a_request_id(replicas, make_router, http):
    """The model list and card, an unknown path, a wrong method and /health carry X-Request-Id (the
    client's when it sent one), as inference answers do, so a reported error can be traced."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}))
    base = f"http://127.0.0.1:{router.port}"
    for method, path, status in (("GET", "/v1/models", 200), ("GET", "/v1/models/m", 200),
                                 ("GET", "/v1/models/zzz", 404), ("GET", "/nope", 404),
                                 ("GET", "/v1/chat/completions", 405), ("GET", "/health", 200)):
        async with http.request(method, base + path) as resp:
            assert resp.status == status and resp.headers.get("X-Request-Id"), (method, path)
        async with http.request(method, base + path, headers={"X-Request-Id": "trace-7"}) as resp:
            assert resp.headers["X-Request-Id"] == "trace-7", (method, path)
