"""Every bad request body is a 400 naming the field; good bodies parse to model and stream."""

from __future__ import annotations

import orjson
import pytest

from router import errors, validation
from router.validation import Kind

JSON = "application/json"
MSG = [{"role": "user", "content": "hi"}]


def parse(kind: Kind, doc, content_type: str = JSON, served=("m",)):
    body = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return validation.parse(kind, body, content_type, list(served))


def test_good_chat_request():
    """A valid chat body yields its model and stream flag; the body bytes are kept as sent."""
    raw = orjson.dumps({"model": "m", "messages": MSG, "stream": True, "max_tokens": 4})
    parsed = validation.parse(Kind.CHAT, raw, "application/json; charset=utf-8", ["m"])
    assert (parsed.model, parsed.stream, parsed.body) == ("m", True, raw)
    assert "hi" in parsed.prompt_text()


@pytest.mark.parametrize("kind,doc,content_type,param,code", [
    (Kind.CHAT, {"model": "m", "messages": MSG}, "text/plain", None, "invalid_content_type"),
    (Kind.CHAT, {"model": "m", "messages": MSG}, None, None, "invalid_content_type"),
    (Kind.CHAT, b"{not json", JSON, None, "invalid_json"),
    (Kind.CHAT, b"[1, 2]", JSON, None, "invalid_json"),
    (Kind.CHAT, {"messages": MSG}, JSON, "model", None),
    (Kind.CHAT, {"model": "", "messages": MSG}, JSON, "model", None),
    (Kind.CHAT, {"model": 7, "messages": MSG}, JSON, "model", None),
    (Kind.CHAT, {"model": "m", "messages": MSG, "stream": "yes"}, JSON, "stream", None),
    (Kind.CHAT, {"model": "m"}, JSON, "messages", None),
    (Kind.CHAT, {"model": "m", "messages": []}, JSON, "messages", None),
    (Kind.CHAT, {"model": "m", "messages": ["hi"]}, JSON, "messages[0]", None),
    (Kind.CHAT, {"model": "m", "messages": [{"content": "hi"}]}, JSON, "messages[0].role", None),
    (Kind.CHAT, {"model": "m", "messages": [{"role": "user", "content": 5}]}, JSON, "messages[0].content", None),
    (Kind.CHAT, {"model": "m", "messages": MSG, "max_tokens": 0}, JSON, "max_tokens", None),
    (Kind.CHAT, {"model": "m", "messages": MSG, "max_tokens": "10"}, JSON, "max_tokens", None),
    (Kind.CHAT, {"model": "m", "messages": MSG, "n": True}, JSON, "n", None),
    (Kind.CHAT, {"model": "m", "messages": MSG, "temperature": 3}, JSON, "temperature", None),
    (Kind.CHAT, {"model": "m", "messages": MSG, "top_p": "x"}, JSON, "top_p", None),
    (Kind.COMPLETION, {"model": "m"}, JSON, "prompt", None),
    (Kind.COMPLETION, {"model": "m", "prompt": ""}, JSON, "prompt", None),
    (Kind.COMPLETION, {"model": "m", "prompt": [1, "a"]}, JSON, "prompt", None),
    (Kind.EMBEDDING, {"model": "m"}, JSON, "input", None),
    (Kind.EMBEDDING, {"model": "m", "input": "x", "stream": True}, JSON, "stream", None),
    (Kind.GENERATE, {"model": "m"}, JSON, "text", None),
])
def test_bad_inputs(kind, doc, content_type, param, code):
    """Each malformed body is refused with 400, the OpenAI error shape, and the field at fault."""
    with pytest.raises(errors.ApiError) as info:
        parse(kind, doc, content_type)
    err = info.value
    assert err.status == 400 and err.param == param
    if code:
        assert err.code == code
    body = orjson.loads(err.body())
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["type"] == "invalid_request_error"


def test_generate_model_is_optional_with_one_model():
    """/generate has no model field in SGLang: the only served model is assumed, else it is required."""
    assert parse(Kind.GENERATE, {"text": "hello"}).model == "m"
    with pytest.raises(errors.ApiError, match="several models"):
        parse(Kind.GENERATE, {"text": "hello"}, served=("a", "b"))


def test_completion_prompt_forms():
    """Strings, string lists, token id lists and lists of token id lists are valid prompts."""
    for prompt in ("abc", ["a", "b"], [1, 2, 3], [[1, 2], [3]]):
        assert parse(Kind.COMPLETION, {"model": "m", "prompt": prompt}).model == "m"
