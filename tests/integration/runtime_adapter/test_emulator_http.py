"""The emulator's HTTP surface compared field by field with SGLang 0.5.23's documented shapes."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest
from prometheus_client import parser as prometheus_parser

from tests.integration.runtime_adapter.conftest import running_emulator

CHAT = {"model": "client-model", "messages": [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "Name three colours."}], "max_tokens": 8}
USAGE_KEYS = ["prompt_tokens", "total_tokens", "completion_tokens", "prompt_tokens_details", "reasoning_tokens",
              "completion_tokens_details"]


async def sse_events(resp: aiohttp.ClientResponse) -> list[str]:
    body = (await resp.read()).decode()
    return [chunk[len("data: "):] for chunk in body.split("\n\n") if chunk.strip()]


async def test_chat_completion_shape(http):
    """Non-streaming chat: SGLang's ChatCompletionResponse fields, in order, with usage."""
    async with running_emulator() as srv:
        async with http.post(srv.url + "/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 200
            body = await resp.json()
    assert list(body) == ["id", "object", "created", "model", "choices", "usage", "metadata"]
    assert body["object"] == "chat.completion" and body["model"] == "client-model"
    assert isinstance(body["id"], str) and len(body["id"]) == 32 and isinstance(body["created"], int)
    choice = body["choices"][0]
    assert list(choice) == ["index", "message", "logprobs", "finish_reason", "matched_stop"]
    assert choice["message"] == {"role": "assistant", "content": choice["message"]["content"], "reasoning_content": None}
    assert choice["finish_reason"] in ("stop", "length") and choice["logprobs"] is None
    usage = body["usage"]
    assert list(usage) == USAGE_KEYS
    assert usage["completion_tokens"] <= 8 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"] is None and usage["reasoning_tokens"] == 0
    assert body["metadata"] == {"weight_version": "default"}


async def test_chat_stream_sequence(http):
    """Streaming chat: role chunk, content deltas, separate finish chunk, usage chunk, [DONE]."""
    async with running_emulator() as srv:
        req = {**CHAT, "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 6, "ignore_eos": True}
        async with http.post(srv.url + "/v1/chat/completions", json=req) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
            events = await sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "client-model" for c in chunks)
    role = chunks[0]["choices"][0]
    assert role == {"index": 0, "delta": {"reasoning_content": None, "role": "assistant", "content": ""},
                    "logprobs": None, "finish_reason": None, "matched_stop": None}
    deltas = [c["choices"][0] for c in chunks[1:-2]]
    assert deltas and all(list(d["delta"]) == ["reasoning_content", "content"] and d["finish_reason"] is None for d in deltas)
    text = "".join(d["delta"]["content"] for d in deltas)
    finish = chunks[-2]["choices"][0]
    assert finish["delta"] == {"reasoning_content": None} and finish["finish_reason"] == "length"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and list(usage_chunk["usage"]) == USAGE_KEYS
    assert usage_chunk["usage"]["completion_tokens"] == 6
    assert "usage" not in chunks[0]
    assert len(text.split()) == 6


async def test_stream_without_include_usage_has_no_usage_chunk(http):
    """Without stream_options.include_usage the stream ends finish chunk, [DONE]."""
    async with running_emulator() as srv:
        async with http.post(srv.url + "/v1/chat/completions", json={**CHAT, "stream": True}) as resp:
            events = await sse_events(resp)
    last = json.loads(events[-2])
    assert events[-1] == "[DONE]" and last["choices"][0]["finish_reason"] in ("stop", "length")


async def test_completions_shapes(http):
    """/v1/completions: text_completion object; stream chunks carry finish_reason on the last delta."""
    async with running_emulator() as srv:
        async with http.post(srv.url + "/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 5}) as resp:
            body = await resp.json()
        async with http.post(srv.url + "/v1/completions",
                             json={"prompt": "Once upon a time", "max_tokens": 5, "stream": True, "ignore_eos": True,
                                   "stream_options": {"include_usage": True}}) as resp:
            events = await sse_events(resp)
    assert list(body) == ["id", "object", "created", "model", "choices", "usage", "metadata"]
    assert body["object"] == "text_completion" and body["model"] == "default"
    assert list(body["choices"][0]) == ["index", "text", "logprobs", "finish_reason", "matched_stop"]
    assert body["usage"]["completion_tokens"] == 5
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]"
    content = chunks[:-1]
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in content)
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 4, "total_tokens": 9,
                                                                   "completion_tokens": 5, "reasoning_tokens": 0}


async def test_generate_native_shape(http):
    """/generate: text, output_ids and meta_info with SGLang's keys; stream text is cumulative."""
    async with running_emulator() as srv:
        payload = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
        async with http.post(srv.url + "/generate", json=payload) as resp:
            body = await resp.json()
        async with http.post(srv.url + "/generate", json={**payload, "stream": True}) as resp:
            events = await sse_events(resp)
    assert list(body) == ["text", "output_ids", "meta_info"]
    meta = body["meta_info"]
    for key in ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "e2e_latency"):
        assert key in meta
    assert meta["finish_reason"] == {"type": "length", "length": 4} and meta["completion_tokens"] == 4
    assert len(body["output_ids"]) == 4
    chunks = [json.loads(e) for e in events[:-1]]
    texts = [c["text"] for c in chunks]
    assert events[-1] == "[DONE]" and all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"


async def test_status_endpoints(http):
    """/health, /health_generate, /ready, /v1/models, /model_info, /server_info, /v1/loads."""
    async with running_emulator(max_running_requests=32) as srv:
        for path in ("/health", "/health_generate", "/ready"):
            async with http.get(srv.url + path) as resp:
                assert resp.status == 200 and await resp.read() == b""
        async with http.get(srv.url + "/v1/models") as resp:
            models = await resp.json()
        async with http.get(srv.url + "/v1/models/nope") as resp:
            assert resp.status == 404 and (await resp.json())["error"]["code"] == "model_not_found"
        async with http.get(srv.url + "/model_info") as resp:
            info = await resp.json()
        async with http.get(srv.url + "/server_info") as resp:
            server_info = await resp.json()
        async with http.get(srv.url + "/v1/loads") as resp:
            loads = await resp.json()
    assert models["object"] == "list"
    card = models["data"][0]
    assert list(card) == ["id", "object", "created", "owned_by", "root", "parent", "max_model_len"]
    assert card["id"] == "llama" and card["owned_by"] == "sglang" and card["parent"] is None
    assert info["model_path"] == "meta-llama/Llama-3.1-8B-Instruct" and info["is_generation"] is True
    assert info["served_model_name"] == "llama"
    assert server_info["version"] == "0.5.23" and server_info["max_running_requests"] == 32
    assert isinstance(server_info["internal_states"], list)
    assert list(loads) == ["timestamp", "version", "accelerator", "num_accelerators", "loads"]
    assert {"num_running_reqs", "num_waiting_reqs", "token_usage", "gen_throughput", "cache_hit_rate"} <= set(loads["loads"][0])


async def test_error_bodies(http):
    """400s for bad JSON, wrong content type, validation and context overflow; 404 unknown model."""
    async with running_emulator(context_length=256) as srv:
        url = srv.url + "/v1/chat/completions"
        async with http.post(url, data=b"{not json", headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 400
            bad_json = await resp.json()
        async with http.post(url, data=json.dumps(CHAT), headers={"Content-Type": "text/plain"}) as resp:
            assert resp.status == 400
            bad_type = await resp.json()
        async with http.post(url, json={"model": "m"}) as resp:
            assert resp.status == 400
            missing = await resp.json()
        async with http.post(url, json={"messages": []}) as resp:
            assert resp.status == 400
            empty = await resp.json()
        long_chat = {"messages": [{"role": "user", "content": "word " * 400}]}
        async with http.post(url, json=long_chat) as resp:
            assert resp.status == 400
            overflow = await resp.json()
        async with http.post(url, json={**CHAT, "max_tokens": 250}) as resp:
            assert resp.status == 400
            total_overflow = await resp.json()
        async with http.post(srv.url + "/generate", json={"sampling_params": {}}) as resp:
            assert resp.status == 400 and "error" in await resp.json()
    for body in (bad_json, bad_type, missing):
        assert list(body) == ["object", "message", "type", "param", "code"]
        assert body["object"] == "error" and body["type"] == "Bad Request" and body["code"] == 400 and body["param"] is None
    assert "JSON decode error" in bad_json["message"]
    assert "application/json" in bad_type["message"]
    assert "messages" in missing["message"]
    assert empty["message"] == "Messages cannot be empty."
    assert overflow["type"] == "BadRequest" and "longer than the model's context length (256 tokens)" in overflow["message"]
    assert "maximum context length of 256 tokens" in total_overflow["message"]


async def test_api_key_guards_all_but_health_ready_metrics(http):
    """With --api-key: 401 {"error":"Unauthorized"} without the key; /health,/ready,/metrics stay open."""
    async with running_emulator(api_key="sekrit") as srv:
        async with http.post(srv.url + "/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 401 and await resp.json() == {"error": "Unauthorized"}
        async with http.get(srv.url + "/v1/models", headers={"Authorization": "Bearer wrong"}) as resp:
            assert resp.status == 401
        async with http.post(srv.url + "/v1/chat/completions", json=CHAT,
                             headers={"Authorization": "Bearer sekrit"}) as resp:
            assert resp.status == 200
        for path in ("/health", "/health_generate", "/ready", "/metrics"):
            async with http.get(srv.url + path) as resp:
                assert resp.status == 200, path


async def test_queue_full_is_503_or_stream_error(http):
    """Past --max-queued-requests: 503 non-stream; 200 with an error chunk then [DONE] when streaming."""
    async with running_emulator(max_running_requests=1, max_queued_requests=1, speedup=1.0, gpu_type="L4") as srv:
        hold = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2000, "ignore_eos": True}

        async def until(cond) -> None:
            for _ in range(500):
                if cond(srv.engine.stats()):
                    return
                await asyncio.sleep(0.02)
            raise AssertionError(f"engine never reached the state: {srv.engine.stats()}")

        # One request runs, the next waits: the queue (size 1) is then full.
        running = asyncio.create_task(http.post(srv.url + "/v1/chat/completions", json=hold))
        await until(lambda s: s.running == 1)
        queued = asyncio.create_task(http.post(srv.url + "/v1/chat/completions", json=hold))
        await until(lambda s: s.waiting == 1)
        async with http.post(srv.url + "/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 503
            full = await resp.json()
        async with http.post(srv.url + "/v1/chat/completions", json={**CHAT, "stream": True}) as resp:
            assert resp.status == 200
            events = await sse_events(resp)
        for t in (running, queued):
            t.cancel()
        await asyncio.gather(running, queued, return_exceptions=True)
    assert full == {"object": "error", "message": "The request queue is full.", "type": "503", "param": None, "code": 503}
    assert json.loads(events[0])["error"]["code"] == 503 and events[-1] == "[DONE]"


async def test_embeddings_on_embedding_model(http):
    """--is-embedding models answer /v1/embeddings in OpenAI's list shape; chat is refused."""
    async with running_emulator(model_path="BAAI/bge-large-en-v1.5", served_model_name="bge", is_embedding=True) as srv:
        async with http.post(srv.url + "/v1/embeddings", json={"input": ["hello world", "bye"], "model": "bge"}) as resp:
            assert resp.status == 200
            body = await resp.json()
        async with http.post(srv.url + "/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 400
    assert body["object"] == "list" and body["model"] == "bge" and len(body["data"]) == 2
    first = body["data"][0]
    assert list(first) == ["embedding", "index", "object"] and first["object"] == "embedding"
    assert len(first["embedding"]) == 1024 and abs(sum(v * v for v in first["embedding"]) - 1.0) < 1e-6
    assert body["usage"]["prompt_tokens"] > 0


async def test_fault_admin_endpoint(http):
    """POST /_emulator/faults changes faults at run time and rejects bad values naming the field."""
    async with running_emulator() as srv:
        async with http.post(srv.url + "/_emulator/faults", json={"error_rate": 1.0}) as resp:
            assert resp.status == 200 and (await resp.json())["error_rate"] == 1.0
        async with http.post(srv.url + "/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 500 and (await resp.json())["type"] == "InternalServerError"
        async with http.post(srv.url + "/_emulator/faults", json={"error_rate": 0, "slowdown_factor": 0.5}) as resp:
            assert resp.status == 400 and "slowdown_factor" in (await resp.json())["error"]
        async with http.post(srv.url + "/_emulator/faults", json={"error_rate": 0}) as resp:
            assert resp.status == 200
        async with http.post(srv.url + "/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 200


async def test_request_log_records_each_answered_request_by_its_id(http, tmp_path):
    """With request_log_dir, each answered generation request (streamed or not) leaves one line with
    its X-Request-Id; a refused one (500) leaves none."""
    async with running_emulator(request_log_dir=str(tmp_path)) as srv:
        for rid, body in (("a-1", CHAT), ("a-2", {**CHAT, "stream": True})):
            async with http.post(srv.url + "/v1/chat/completions", json=body, headers={"X-Request-Id": rid}) as resp:
                assert resp.status == 200
                await resp.read()
        async with http.post(srv.url + "/_emulator/faults", json={"error_rate": 1.0}) as resp:
            assert resp.status == 200
        async with http.post(srv.url + "/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "a-3"}) as resp:
            assert resp.status == 500
    (log,) = tmp_path.glob("replica-*.log")
    assert [line.split(" ", 1)[1] for line in log.read_text().splitlines()] == ["a-1", "a-2"]


async def test_a_client_leaving_a_non_streaming_request_aborts_it(http):
    """As SGLang does, closing the connection of a waiting non-streaming request aborts it: the
    engine stops working on it and nothing is logged as answered."""
    async with running_emulator(speedup=1.0) as srv:
        body = {**CHAT, "max_tokens": 2000, "ignore_eos": True}
        with pytest.raises(asyncio.TimeoutError):
            async with http.post(srv.url + "/v1/chat/completions", json=body,
                                 timeout=aiohttp.ClientTimeout(total=0.5)) as resp:
                await resp.read()
        for _ in range(50):
            if srv.engine.outstanding == 0:
                break
            await asyncio.sleep(0.05)
        assert srv.engine.outstanding == 0


async def test_openai_sdk_chat_and_stream():
    """The official openai SDK talks to the emulator: chat, streaming with usage, models, completions."""
    async with running_emulator(api_key="k") as srv:
        client = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="k", max_retries=0)
        try:
            resp = await client.chat.completions.create(model="llama", messages=CHAT["messages"], max_tokens=5)
            assert resp.choices[0].message.role == "assistant" and resp.usage.completion_tokens <= 5
            stream = await client.chat.completions.create(model="llama", messages=CHAT["messages"], max_tokens=5,
                                                          stream=True, stream_options={"include_usage": True})
            parts, usage = [], None
            async for chunk in stream:
                if chunk.choices:
                    parts.append(chunk.choices[0].delta.content or "")
                if chunk.usage is not None:
                    usage = chunk.usage
            assert usage is not None and usage.completion_tokens == len("".join(parts).split())
            models = await client.models.list()
            assert [m.id for m in models.data] == ["llama"]
            comp = await client.completions.create(model="llama", prompt="Hi", max_tokens=3)
            assert comp.choices[0].finish_reason in ("stop", "length")
            with pytest.raises(openai.AuthenticationError):
                bad = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="wrong", max_retries=0)
                try:
                    await bad.models.list()
                finally:
                    await bad.close()
        finally:
            await client.close()


async def test_metrics_use_sglang_names(http):
    """/metrics exposes SGLang's metric names and labels after traffic; 404 without --enable-metrics."""
    async with running_emulator() as srv:
        async with http.post(srv.url + "/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 200
        async with http.get(srv.url + "/metrics") as resp:
            text = await resp.text()
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate",
                 "sglang:gen_throughput", "sglang:time_to_first_token_seconds_bucket",
                 "sglang:inter_token_latency_seconds_bucket", "sglang:e2e_request_latency_seconds_count",
                 "sglang:num_requests_total", "sglang:prompt_tokens_total", "sglang:generation_tokens_total",
                 "sglang:max_total_num_tokens", "sglang:queue_time_seconds_bucket", "sglang:startup_time_seconds"):
        assert name in text, name
    assert 'model_name="llama"' in text and 'engine_type="unified"' in text and 'tp_rank="0"' in text
    async with running_emulator(enable_metrics=False) as srv:
        async with http.get(srv.url + "/metrics") as resp:
            assert resp.status == 404


def _counter(text: str, name: str) -> float:
    """The sum over label sets of a counter in a /metrics body (0 when absent)."""
    total = 0.0
    for family in prometheus_parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


async def test_metrics_count_cached_prompt_tokens_exactly(http):
    """cached_tokens_total counts exactly the reused prefix (at most prompt - 1 per request) and
    prompt_tokens_total every prompt token, also for 100k-token prompts, as SGLang reports them."""
    shared = "".join(f" s{i % 1000:03d}" for i in range(20_000))  # 20,000 one-token words
    a, b = shared + " aaaa" * 100, shared + " bbbb" * 100
    long = "".join(f" L{i % 1000:03d}" for i in range(100_000))
    async with running_emulator(speedup=1e6, context_length=131_072) as srv:
        for prompt in (a, b, long, long):
            async with http.post(srv.url + "/v1/completions",
                                 json={"model": "llama", "prompt": prompt, "max_tokens": 1}) as resp:
                assert resp.status == 200
        async with http.get(srv.url + "/metrics") as resp:
            text = await resp.text()
    assert _counter(text, "sglang:prompt_tokens_total") == 20_100 * 2 + 100_000 * 2
    assert _counter(text, "sglang:cached_tokens_total") == 20_000 + 99_999
