"""Mooncake's traces (FAST'25 release): JSON lines ``{"timestamp", "input_length", "output_length",
"hash_ids"}``.

``timestamp`` is milliseconds from the start of the trace; ``hash_ids`` holds one id per block of
``BLOCK_TOKENS`` (512) prompt tokens, the last block possibly partial, so a row has exactly
ceil(input_length / 512) ids. ``hash_ids`` may be left out (a JSON-lines trace of arrivals and
lengths only, as other tools write them): such a row has no block hashes, which a replay in the
simulator does not need (``bench.router``'s prefix scenario does, and says so). Rows must come in
arrival order; arrivals are returned in seconds from the first row. Read line by line (constant
memory)."""

from __future__ import annotations

import math
import pathlib
from collections.abc import Iterator

import orjson

from meridian.traces import records

BLOCK_TOKENS = 512
ROW_EXAMPLE = '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}'


def _int_field(doc: dict, field: str, minimum: int) -> int:
    value = doc.get(field)
    if type(value) is not int:
        raise ValueError(f"{field!r} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{field!r} must be >= {minimum}, got {value}")
    return value


def _row(doc: object, block_tokens: int) -> tuple[float, int, int, tuple[int, ...]]:
    if not isinstance(doc, dict):
        raise TypeError(f"a row must be a JSON object like {ROW_EXAMPLE}")
    missing = [f for f in ("timestamp", "input_length", "output_length") if f not in doc]
    if missing:
        raise ValueError(f"missing {', '.join(repr(f) for f in missing)}; a row looks like {ROW_EXAMPLE}")
    stamp = doc["timestamp"]
    if type(stamp) not in (int, float) or not math.isfinite(stamp) or stamp < 0:
        raise ValueError(f"'timestamp' must be milliseconds >= 0, got {stamp!r}")
    input_tokens = _int_field(doc, "input_length", 1)
    output_tokens = _int_field(doc, "output_length", 0)
    hashes = doc.get("hash_ids")
    if hashes is None:
        return stamp, input_tokens, output_tokens, ()
    if not isinstance(hashes, list) or any(type(h) is not int for h in hashes):
        raise ValueError("'hash_ids' must be a list of integers")
    blocks = -(-input_tokens // block_tokens)
    if len(hashes) != blocks:
        raise ValueError(f"{len(hashes)} hash_ids for input_length {input_tokens}; expected {blocks} "
                         f"(one per {block_tokens}-token block)")
    return stamp, input_tokens, output_tokens, tuple(hashes)


def read(path: str | pathlib.Path, block_tokens: int = BLOCK_TOKENS) -> Iterator[records.Request]:
    """The requests of a Mooncake trace file, in order; raises ``records.TraceError`` (file and
    line) at the first bad row."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens={block_tokens} must be >= 1")
    arrivals = records.Arrivals(path, "timestamp", per_second=1000.0)
    with open(path, "rb") as fh:
        for line, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                stamp_ms, input_tokens, output_tokens, hashes = _row(orjson.loads(raw), block_tokens)
            except orjson.JSONDecodeError as exc:
                raise records.TraceError(path, line, f"not JSON ({exc}); a row looks like {ROW_EXAMPLE}") from None
            except (TypeError, ValueError) as exc:
                raise records.TraceError(path, line, str(exc)) from None
            arrival_s = arrivals.at(stamp_ms, line, f"{stamp_ms:g}")
            yield records.Request(arrival_s, input_tokens, output_tokens, hashes)
