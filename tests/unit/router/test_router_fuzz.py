"""Hypothesis against the router's request parsing and SSE tally: any body or header value gets a
parsed request or a 400 naming a field, never another exception; any chunking tallies the same."""

from __future__ import annotations

import hypothesis
import orjson
from hypothesis import strategies as st

from router import errors, sse, validation
from router.validation import Kind

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25)
FIELDS = ("model", "stream", "messages", "prompt", "input", "text", "input_ids", "max_tokens",
          "max_completion_tokens", "n", "temperature", "top_p", "sampling_params", "role", "content")
DOCS = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), JSON, max_size=8)
MESSAGES = st.lists(st.dictionaries(st.sampled_from(("role", "content", "name")), JSON, max_size=3), max_size=3)


def _parse_or_400(kind: Kind, body: bytes, content_type: str | None = "application/json", served=("m",)):
    try:
        parsed = validation.parse(kind, body, content_type, list(served))
    except errors.ApiError as err:
        assert err.status == 400 and err.message
        return None
    # Everything routing reads from an accepted request must be readable without error.
    parsed.prompt_text()
    assert parsed.max_new_tokens() is None or parsed.max_new_tokens() > 0
    assert parsed.prompt_tokens_estimate >= 0
    return parsed


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(kind=st.sampled_from(list(Kind)), doc=DOCS)
def test_any_json_object_is_parsed_or_refused_with_400(kind, doc):
    """Arbitrary documents (wrong types everywhere) never raise anything but a 400."""
    _parse_or_400(kind, orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS) if _dumpable(doc) else b"{}")


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(kind=st.sampled_from(list(Kind)), messages=MESSAGES, extra=DOCS)
def test_chat_shaped_documents_are_parsed_or_refused_with_400(kind, messages, extra):
    """Near-valid requests (a model, messages of any shape) are the ones most likely to reach deep code."""
    doc = {**extra, "model": "m", "messages": messages, "prompt": extra.get("prompt", "p"), "input": "x", "text": "t"}
    if _dumpable(doc):
        _parse_or_400(kind, orjson.dumps(doc))


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(kind=st.sampled_from(list(Kind)), body=st.binary(max_size=200),
                  content_type=st.none() | st.text(max_size=40))
def test_any_bytes_and_content_type_are_parsed_or_refused_with_400(kind, body, content_type):
    """Invalid UTF-8, truncated JSON, deep nesting and odd content types are 400s."""
    _parse_or_400(kind, body, content_type)


def test_deep_nesting_is_a_400_not_a_recursion_error():
    """A body nested far deeper than any request is refused cleanly."""
    assert _parse_or_400(Kind.CHAT, b"[" * 100_000 + b"]" * 100_000) is None


def _dumpable(doc) -> bool:
    try:
        orjson.dumps(doc)
    except (TypeError, orjson.JSONEncodeError):
        return False
    return True


@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(events=st.lists(st.text(max_size=30), max_size=20), usage=st.booleans(),
                  prompt=st.integers(0, 10**6), completion=st.integers(0, 10**6), data=st.data())
def test_sse_tally_is_the_same_for_every_chunking(events, usage, prompt, completion, data):
    """Counting events and finding the last usage do not depend on where chunks were cut."""
    docs = [{"choices": [{"delta": {"content": text}}]} for text in events]
    if usage:
        docs.append({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
    stream = b"".join(b"data: " + orjson.dumps(d) + b"\n\n" for d in docs) + b"data: [DONE]\n\n"
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=60)))
    tally = sse.Tally()
    for a, b in zip([0, *cuts], [*cuts, len(stream)]):
        tally.feed(stream[a:b])
    assert tally.events == len(docs) + 1
    assert tally.usage() == ((prompt, completion) if usage else None)
