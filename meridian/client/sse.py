"""An incremental decoder of Server-Sent Events as OpenAI-compatible servers send them (the
router relays the replica's bytes as they come, so events can be split anywhere or several can
arrive in one read).

Meridian's endpoint sends, for ``stream: true``: one ``data: <json chunk>`` event per step (the
first carries ``delta.role``), a chunk with ``finish_reason``, a usage chunk (``"choices": []``)
when ``stream_options.include_usage`` is set, then ``data: [DONE]``. Errors after the 200 come as
``data: {"error": {...}}``: the router's (a deadline, a replica breaking mid-stream; the stream
then ends without ``[DONE]``) and SGLang's (queue full, followed by ``[DONE]``).

Per the SSE format: lines end with LF, CRLF or CR; an event ends at a blank line; its ``data:``
lines are joined with LF; lines starting with ``:`` are comments; other fields are ignored; an
event not ended by a blank line when the stream closes is discarded."""

from __future__ import annotations


class SSEDecoder:
    """Feed bytes, get the ``data`` payloads of the events they complete."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[str]:
        """The data of every event completed by ``chunk`` (in order; events without data lines are
        skipped)."""
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split across reads
        self._pending_cr = False
        buffer = self._buffer + chunk
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                self._pending_cr = True
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, self._buffer = buffer.split(b"\n")
        events: list[str] = []
        for raw in lines:
            if not raw:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if raw.startswith(b":"):
                continue
            field, _, value = raw.partition(b":")
            if field == b"data":
                if value.startswith(b" "):
                    value = value[1:]
                self._data.append(value.decode("utf-8", "replace"))
        return events
