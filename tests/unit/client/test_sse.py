"""The SSE decoder reads what Meridian's endpoint sends, however the bytes are split."""

from __future__ import annotations

import orjson

from meridian.client import sse
from runtime_adapter.emulator import protocol

# What the emulator (SGLang's format) sends for a short chat stream with include_usage, then the
# router's mid-stream error event.
WIRE = "".join([
    protocol.chat_chunk("r1", 1, "m", role="assistant", content=""),
    protocol.chat_chunk("r1", 1, "m", content="héllo "),
    protocol.chat_chunk("r1", 1, "m", content="wörld"),
    protocol.chat_chunk("r1", 1, "m", finish_reason="stop", matched_stop=2),
    protocol.chat_usage_chunk("r1", 1, "m", protocol.usage(5, 2, 0, False)),
    "data: [DONE]\n\n",
]).encode()


def _decode(parts: list[bytes]) -> list[str]:
    decoder = sse.SSEDecoder()
    out: list[str] = []
    for part in parts:
        out.extend(decoder.feed(part))
    return out


def test_whole_stream():
    """Each event's data comes out once, in order, ending with [DONE]."""
    events = _decode([WIRE])
    assert len(events) == 6 and events[-1] == "[DONE]"
    assert orjson.loads(events[1])["choices"][0]["delta"]["content"] == "héllo "
    assert orjson.loads(events[4])["usage"]["completion_tokens"] == 2


def test_every_split_point_gives_the_same_events():
    """Split anywhere (mid-line, mid-UTF-8 character, between CR and LF), the events are the same."""
    expected = _decode([WIRE])
    for i in range(len(WIRE) + 1):
        assert _decode([WIRE[:i], WIRE[i:]]) == expected
    crlf = WIRE.replace(b"\n", b"\r\n")
    for i in range(0, len(crlf) + 1, 7):
        assert _decode([crlf[:i], crlf[i:]]) == expected
    assert _decode([bytes([b]) for b in WIRE]) == expected


def test_sse_details():
    """CR line ends, comments, multi-line data and other fields follow the SSE format; an event not
    ended by a blank line yields nothing."""
    assert _decode([b"data: a\r\rdata: b\n\n"]) == ["a", "b"]
    assert _decode([b": keep-alive\n\ndata: x\n\n"]) == ["x"]
    assert _decode([b"event: message\nid: 3\ndata: one\ndata:two\n\n"]) == ["one\ntwo"]
    assert _decode([b"data: cut off"]) == []
    assert _decode([protocol.stream_error("The request queue is full.", "SERVICE_UNAVAILABLE", 503).encode()]) == [
        orjson.dumps({"error": protocol.error_response("The request queue is full.", "SERVICE_UNAVAILABLE", 503)})
        .decode()]
