"""SGLang 0.5.23 request models and response shapes (read from its protocol.py, serving_chat.py,
serving_completions.py, sse_utils.py and http_server.py), as plain dicts ready for JSON.

Field order and presence follow SGLang: e.g. a chat stream chunk's delta always carries
``reasoning_content`` (null), a choice always carries ``logprobs``, ``finish_reason`` and
``matched_stop``; the chat usage chunk keeps null fields, the completions usage chunk drops them."""

from __future__ import annotations

import json
from typing import Any, Literal

import pydantic
from aiohttp import web

DEFAULT_MODEL_NAME = "default"
VERSION = "0.5.23"
WEIGHT_VERSION = "default"


def dumps(obj: Any) -> str:
    """Compact JSON, as SGLang's orjson responses are."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.json_response(obj, status=status, dumps=dumps)


# ----- requests ---------------------------------------------------------------------------------
class _Request(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")


class StreamOptions(pydantic.BaseModel):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class ChatMessage(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer", "function"]
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage]
    model: str = DEFAULT_MODEL_NAME
    max_tokens: int | None = pydantic.Field(default=None, ge=1)
    max_completion_tokens: int | None = pydantic.Field(default=None, ge=1)
    n: int = pydantic.Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = pydantic.Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = pydantic.Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    rid: str | None = None


class CompletionRequest(_Request):
    prompt: str | list[str] | list[int] | list[list[int]]
    model: str = DEFAULT_MODEL_NAME
    max_tokens: int = pydantic.Field(default=16, ge=1)
    n: int = pydantic.Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = pydantic.Field(default=None, ge=0.0, le=2.0)
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    rid: str | None = None


class EmbeddingRequest(_Request):
    input: str | list[str] | list[int] | list[list[int]]
    model: str = DEFAULT_MODEL_NAME
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = pydantic.Field(default=None, ge=1, le=8192)


class SamplingParams(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    max_new_tokens: int | None = pydantic.Field(default=128, ge=0)
    ignore_eos: bool = False
    temperature: float = pydantic.Field(default=1.0, ge=0.0)


class GenerateRequest(_Request):
    text: str | None = None
    input_ids: list[int] | None = None
    sampling_params: SamplingParams = SamplingParams()
    stream: bool = False
    rid: str | None = None


def validation_message(exc: pydantic.ValidationError) -> str:
    """FastAPI's shape of a body validation message (``loc`` starts with 'body')."""
    errors = [{"type": e["type"], "loc": ("body", *e["loc"]), "msg": e["msg"], "input": e.get("input")}
              for e in exc.errors(include_url=False)]
    lines = "\n".join(f"  {e!r}" for e in errors)
    return f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}:\n{lines} {errors!r}"


# ----- errors -----------------------------------------------------------------------------------
def error_response(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    """SGLang's ErrorResponse (OpenAI routes): {"object":"error","message","type","param","code"}."""
    return {"object": "error", "message": message, "type": err_type, "param": param, "code": code}


def stream_error(message: str, err_type: str, code: int) -> str:
    """The error chunk SGLang streams after a 200 (e.g. queue full while streaming)."""
    return "data: " + dumps({"error": error_response(message, err_type, code)}) + "\n\n"


# ----- usage ------------------------------------------------------------------------------------
def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int, cache_report: bool) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens} if cache_report else None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


def drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# ----- chat -------------------------------------------------------------------------------------
def chat_response(rid: str, created: int, model: str, text: str, finish: dict[str, Any],
                  use: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text, "reasoning_content": None},
            "logprobs": None, "finish_reason": finish["type"], "matched_stop": finish.get("matched"),
        }],
        "usage": use,
        "metadata": {"weight_version": WEIGHT_VERSION},
    }


def chat_chunk(rid: str, created: int, model: str, *, role: str | None = None, content: str | None = None,
               finish_reason: str | None = None, matched_stop: int | str | None = None,
               chunk_usage: dict[str, Any] | None = None) -> str:
    """One chat SSE event, as sse_utils.build_sse_content writes it (msgspec, omit_defaults)."""
    delta: dict[str, Any] = {"reasoning_content": None}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    chunk: dict[str, Any] = {
        "id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason,
                     "matched_stop": matched_stop}],
    }
    if chunk_usage is not None:
        chunk["usage"] = chunk_usage
    return "data: " + dumps(chunk) + "\n\n"


def chat_usage_chunk(rid: str, created: int, model: str, use: dict[str, Any]) -> str:
    """The usage chunk (pydantic model_dump_json: null fields kept, empty choices)."""
    return "data: " + dumps({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "choices": [], "usage": use}) + "\n\n"


# ----- completions ------------------------------------------------------------------------------
def completion_response(rid: str, created: int, model: str, text: str, finish: dict[str, Any],
                        use: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish["type"],
                     "matched_stop": finish.get("matched")}],
        "usage": use,
        "metadata": {"weight_version": WEIGHT_VERSION},
    }


def completion_chunk(rid: str, created: int, model: str, text: str, finish: dict[str, Any] | None) -> str:
    return "data: " + dumps({
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None,
                     "finish_reason": finish["type"] if finish else None,
                     "matched_stop": finish.get("matched") if finish else None}],
        "usage": None,
    }) + "\n\n"


def completion_usage_chunk(rid: str, created: int, model: str, use: dict[str, Any]) -> str:
    """model_dump_json(exclude_none=True): null fields dropped."""
    return "data: " + dumps({"id": rid, "object": "text_completion", "created": created, "model": model,
                             "choices": [], "usage": drop_none(use)}) + "\n\n"


# ----- native -----------------------------------------------------------------------------------
def meta_info(rid: str, finish: dict[str, Any] | None, prompt_tokens: int, completion_tokens: int,
              cached_tokens: int, e2e_latency_s: float | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "id": rid, "finish_reason": finish, "prompt_tokens": prompt_tokens, "weight_version": WEIGHT_VERSION,
        "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": completion_tokens,
        "cached_tokens": cached_tokens,
    }
    if e2e_latency_s is not None:
        info["e2e_latency"] = e2e_latency_s
    return info


def generate_response(text: str, output_ids: list[int], info: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "output_ids": output_ids, "meta_info": info}


# ----- models -----------------------------------------------------------------------------------
def model_card(name: str, created: int, max_model_len: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "sglang", "root": name,
            "parent": None, "max_model_len": max_model_len}


def embedding_response(vectors: list[list[float]], model: str, prompt_tokens: int) -> dict[str, Any]:
    return {
        "data": [{"embedding": v, "index": i, "object": "embedding"} for i, v in enumerate(vectors)],
        "model": model, "object": "list",
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0,
                  "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None},
    }
