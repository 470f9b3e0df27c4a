"""The SSE tally of a relayed stream: events and the last usage, however the stream is chunked."""

from __future__ import annotations

import orjson

from router import sse


def stream(tokens: int, usage: bool = True) -> bytes:
    events = [{"choices": [{"delta": {"role": "assistant", "content": ""}}]}]
    events += [{"choices": [{"delta": {"content": f"data: t{i}"}}]} for i in range(tokens)]
    events.append({"choices": [{"delta": {}, "finish_reason": "stop"}]})
    if usage:
        events.append({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": tokens,
                                                "total_tokens": 11 + tokens}})
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def tally(chunks) -> sse.Tally:
    t = sse.Tally()
    for c in chunks:
        t.feed(c)
    return t


def test_one_byte_chunks_count_every_event_once_and_find_the_usage():
    """Every event start is counted once even split across chunks; content text 'data:' is not an event."""
    data = stream(5)
    whole, bytewise = tally([data]), tally([data[i:i + 1] for i in range(len(data))])
    assert whole.events == bytewise.events == 9  # role, 5 deltas, finish, usage, [DONE]
    assert whole.usage() == bytewise.usage() == (11, 5)


def test_usage_far_from_the_end_of_a_long_stream_is_still_found_in_the_tail():
    """The kept tail is whole chunks of at least TAIL_BYTES: a usage event in the last ones is found."""
    data = stream(400)
    chunks = [data[i:i + 7] for i in range(0, len(data), 7)]
    assert tally(chunks).usage() == (11, 400)


def test_no_usage_is_none_and_malformed_numbers_are_ignored():
    """A stream without usage reports none; a usage with a non-integer count is not trusted."""
    assert tally([stream(3, usage=False)]).usage() is None
    assert sse.usage(b'{"usage":{"prompt_tokens":"x","completion_tokens":2}}') is None
    assert sse.usage(b'{"usage":{"prompt_tokens":-4,"completion_tokens":2}}') is None
