"""Request validation for the OpenAI-compatible and SGLang-native endpoints.

The body is parsed once (orjson, microseconds for chat-sized bodies) to read the fields routing
needs (``model``, ``stream``, the prompt) and to reject malformed requests with a 400 naming the
field; the original bytes are what the replica receives, never a re-encoding."""

from __future__ import annotations

import enum
from typing import Any

import orjson

from router import errors

# Prompt characters per token, for prefill estimates (English text averages ~4 with BPE tokenizers).
CHARS_PER_TOKEN = 4


class Kind(str, enum.Enum):
    CHAT = "chat"
    COMPLETION = "completion"
    EMBEDDING = "embedding"
    GENERATE = "generate"


PATHS: dict[str, Kind] = {
    "/v1/chat/completions": Kind.CHAT,
    "/v1/completions": Kind.COMPLETION,
    "/v1/embeddings": Kind.EMBEDDING,
    "/generate": Kind.GENERATE,
}


class ParsedRequest:
    """What routing needs from one request body."""

    __slots__ = ("kind", "model", "stream", "body", "doc", "_prompt", "client_region", "path")

    def __init__(self, kind: Kind, model: str, stream: bool, body: bytes, doc: dict[str, Any]):
        self.kind = kind
        self.model = model
        self.stream = stream
        self.body = body
        self.doc = doc
        self._prompt: str | None = None
        self.client_region = ""
        self.path = b""  # the request target sent upstream (path and query)

    @property
    def prompt_tokens_estimate(self) -> int:
        return len(self.body) // CHARS_PER_TOKEN

    def max_new_tokens(self) -> int | None:
        """The request's bound on its answer's tokens, if it gives one (``max_completion_tokens``,
        ``max_tokens``, or ``sampling_params.max_new_tokens`` for /generate)."""
        doc = self.doc
        if self.kind is Kind.GENERATE:
            params = doc.get("sampling_params")
            value = params.get("max_new_tokens") if isinstance(params, dict) else None
        else:
            value = doc.get("max_completion_tokens") or doc.get("max_tokens")
        return value if type(value) is int and value > 0 else None

    def prompt_text(self) -> str:
        """The prompt as one string (chat messages joined), for prefix-cache affinity."""
        if self._prompt is None:
            self._prompt = _prompt_text(self.kind, self.doc)
        return self._prompt


def _prompt_text(kind: Kind, doc: dict[str, Any]) -> str:
    if kind is Kind.CHAT:
        parts = []
        for message in doc.get("messages", ()):
            content = message.get("content")
            parts.append(str(message.get("role", "")))
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return "\n".join(parts)
    value = doc.get("prompt") if kind is Kind.COMPLETION else doc.get("input") if kind is Kind.EMBEDDING else doc.get("text")
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return ""


def _is_json(content_type: str | None) -> bool:
    if not content_type:
        return False
    base = content_type.split(";", 1)[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


def _positive_int(doc: dict[str, Any], field: str) -> None:
    value = doc.get(field)
    if value is not None and (type(value) is not int or value < 1):
        raise errors.bad_request(f"'{field}' must be a positive integer, got {value!r}", param=field)


def _number_in(doc: dict[str, Any], field: str, low: float, high: float) -> None:
    value = doc.get(field)
    if value is None:
        return
    if type(value) not in (int, float) or not low <= value <= high:
        raise errors.bad_request(f"'{field}' must be a number in [{low:g}, {high:g}], got {value!r}", param=field)


def _check_prompt(value: Any, field: str) -> None:
    ok = isinstance(value, str) and value != ""
    if isinstance(value, list) and value:
        first = value[0]
        ok = (all(isinstance(v, str) for v in value) or all(type(v) is int for v in value)
              or all(isinstance(v, list) and v and all(type(t) is int for t in v) for v in value)) and first != ""
    if not ok:
        raise errors.bad_request(
            f"'{field}' is required: a non-empty string, a list of strings, or a list of token ids", param=field)


def _check_messages(value: Any) -> None:
    if not isinstance(value, list) or not value:
        raise errors.bad_request("'messages' is required: a non-empty list of {role, content} objects",
                                 param="messages")
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise errors.bad_request(f"'messages[{i}]' must be an object with 'role' and 'content'",
                                     param=f"messages[{i}]")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise errors.bad_request(
                f"'messages[{i}].role' is required: one of system, user, assistant, tool, developer",
                param=f"messages[{i}].role")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise errors.bad_request(f"'messages[{i}].content' must be a string or a list of content parts",
                                     param=f"messages[{i}].content")


def parse(kind: Kind, body: bytes, content_type: str | None, served_models: list[str]) -> ParsedRequest:
    """Validate ``body`` for endpoint ``kind``; raise ``ApiError`` (400) naming the field at fault.

    ``served_models`` resolves SGLang's native ``/generate``, which has no ``model`` field: it is
    optional there when exactly one model is served."""
    if not _is_json(content_type):
        raise errors.bad_request(
            f"Content-Type must be application/json, got {content_type or 'none'!r}", code="invalid_content_type")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise errors.bad_request(f"The request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(doc, dict):
        raise errors.bad_request(f"The request body must be a JSON object, got {type(doc).__name__}",
                                 code="invalid_json")
    model = doc.get("model")
    if model is None and kind is Kind.GENERATE:
        if len(served_models) != 1:
            raise errors.bad_request("'model' is required for /generate when several models are served",
                                     param="model")
        model = served_models[0]
    if not isinstance(model, str) or not model:
        raise errors.bad_request("'model' is required: the served model name (see GET /v1/models)", param="model")
    stream = doc.get("stream", False)
    if stream is None:
        stream = False
    if type(stream) is not bool:
        raise errors.bad_request(f"'stream' must be true or false, got {stream!r}", param="stream")
    if kind is Kind.CHAT:
        _check_messages(doc.get("messages"))
    elif kind is Kind.COMPLETION:
        _check_prompt(doc.get("prompt"), "prompt")
    elif kind is Kind.EMBEDDING:
        _check_prompt(doc.get("input"), "input")
        if stream:
            raise errors.bad_request("'stream' is not supported for embeddings", param="stream")
    elif "text" not in doc and "input_ids" not in doc:
        raise errors.bad_request("'text' or 'input_ids' is required for /generate", param="text")
    if kind is not Kind.EMBEDDING:
        for field in ("max_tokens", "max_completion_tokens", "n"):
            _positive_int(doc, field)
        _number_in(doc, "temperature", 0.0, 2.0)
        _number_in(doc, "top_p", 0.0, 1.0)
    return ParsedRequest(kind, model, stream, body, doc)
