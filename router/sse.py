"""The SSE streams the router relays: the head it writes them with, and what it reads from
them: how many events passed, and the usage object of the last event that has one, whatever the
chunking.

The relay forwards whole events as received (one write per chunk; a chunk's bytes after its last
event boundary wait for the next chunk, ``split_events``, so nothing is ever written inside an
event the replica did not finish), so this
reads bytes as they pass without parsing events: it counts event starts (``data:`` at the start of
a line) with the few bytes before each chunk carried over, so a ``data:`` split across two chunks
counts once; and it keeps the last ``TAIL_BYTES`` or more of the stream (whole chunks, the last
always) where the usage event is looked for at the end. No copy of a chunk is made on the way."""

from __future__ import annotations

import collections

__all__ = ["HEADERS", "TAIL_BYTES", "Tally", "split_events", "usage"]

# A usage event (SGLang, OpenAI) is a few hundred bytes; the final chunks of a stream are the
# finish event, the usage event and ``data: [DONE]``.
TAIL_BYTES = 4096
_EVENT = b"\ndata:"
_CARRY = len(_EVENT) - 1


def usage(data: bytes) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) from the last usage object in ``data``, if any."""
    i = data.rfind(b'"prompt_tokens":')
    if i < 0:
        return None
    j = data.find(b'"completion_tokens":', i - 64 if i > 64 else 0)
    try:
        prompt = int(data[i + 16:i + 32].split(b",", 1)[0].split(b"}", 1)[0])
        completion = int(data[j + 20:j + 36].split(b",", 1)[0].split(b"}", 1)[0]) if j >= 0 else 0
    except ValueError:
        return None
    if prompt < 0 or completion < 0:
        return None
    return prompt, completion


class Tally:
    """Feed every chunk of one stream, in order; read ``events`` and ``usage()`` at the end."""

    __slots__ = ("_carry", "_tail", "_tail_bytes", "events")

    def __init__(self) -> None:
        self.events = 0
        # The stream's start counts as a line start: a first event needs no newline before it.
        self._carry = b"\n"
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_bytes = 0

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        carry = self._carry
        # Event starts inside the chunk, plus one straddling the boundary with the previous chunk
        # (the carried bytes are shorter than the marker, so none is counted twice).
        self.events += chunk.count(_EVENT) + (carry + chunk[:_CARRY]).count(_EVENT)
        self._carry = chunk[-_CARRY:] if len(chunk) >= _CARRY else (carry + chunk)[-_CARRY:]
        tail = self._tail
        tail.append(chunk)
        self._tail_bytes += len(chunk)
        while len(tail) > 1 and self._tail_bytes - len(tail[0]) >= TAIL_BYTES:
            self._tail_bytes -= len(tail.popleft())

    def usage(self) -> tuple[int, int] | None:
        """The usage of the last event that carries one, within the kept tail."""
        tail = self._tail
        if not tail:
            return None
        return usage(tail[0] if len(tail) == 1 else b"".join(tail))


# The response head of a relayed stream.
HEADERS = (("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"))


def split_events(data: bytes) -> tuple[bytes, bytes]:
    """``data`` cut after its last event boundary (a blank line, ``\\n\\n`` or ``\\r\\n\\r\\n``):
    (whole events, the start of an event still to come)."""
    lf, crlf = data.rfind(b"\n\n"), data.rfind(b"\r\n\r\n")
    cut = max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)
    return data[:cut], data[cut:]
