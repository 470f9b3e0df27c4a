"""The Azure LLM inference traces (2023): CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``.

Timestamps look like ``2023-11-16 18:15:46.6805900``: seven fractional digits, of which the first
six (microseconds) are parsed and the seventh dropped. Rows must come in arrival order. The file
is read line by line, so a trace of any length streams in constant memory."""

from __future__ import annotations

import csv
import datetime
import pathlib
from collections.abc import Iterator

from meridian.traces import records

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
ROW_EXAMPLE = "2023-11-16 18:15:46.6805900,374,44"


def _timestamp(text: str) -> datetime.datetime:
    """Parse ``YYYY-MM-DD HH:MM:SS[.fraction]``, keeping at most six fractional digits."""
    head, dot, frac = text.strip().partition(".")
    if dot:
        if not frac.isdigit():
            raise ValueError(text)
        head = f"{head}.{frac[:6].ljust(6, '0')}"
    return datetime.datetime.fromisoformat(head)


def _count(text: str, field: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{field} must be an integer, got {text!r}") from None
    if value < minimum:
        raise ValueError(f"{field} must be >= {minimum}, got {value}")
    return value


def read(path: str | pathlib.Path) -> Iterator[records.Request]:
    """The requests of an Azure trace file, in order; raises ``records.TraceError`` (file and
    line) at the first bad row."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise records.TraceError(path, 0, f"empty file; expected the header {','.join(HEADER)}")
        if tuple(h.strip() for h in header) != HEADER:
            raise records.TraceError(path, reader.line_num, f"header is {','.join(header)!r}; expected "
                                     f"{','.join(HEADER)} (an Azure LLM inference trace)")
        start: datetime.datetime | None = None
        previous_s = 0.0
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            line = reader.line_num
            if len(row) != 3:
                raise records.TraceError(path, line, f"{len(row)} fields; expected 3 like {ROW_EXAMPLE!r}")
            try:
                at = _timestamp(row[0])
            except ValueError:
                raise records.TraceError(path, line, f"TIMESTAMP {row[0]!r} is not a time like "
                                         "'2023-11-16 18:15:46.6805900'") from None
            try:
                input_tokens = _count(row[1], "ContextTokens", 1)
                output_tokens = _count(row[2], "GeneratedTokens", 0)
            except ValueError as exc:
                raise records.TraceError(path, line, str(exc)) from None
            if start is None:
                start = at
            arrival_s = (at - start) / datetime.timedelta(microseconds=1) / 1e6
            if arrival_s < previous_s:
                raise records.TraceError(path, line, f"TIMESTAMP {row[0]} is before the previous row's; "
                                         "rows must be in arrival order")
            previous_s = arrival_s
            yield records.Request(arrival_s, input_tokens, output_tokens)
