"""The Azure LLM inference traces (2023 and 2024): CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``.

Timestamps look like ``2023-11-16 18:15:46.6805900`` (2023: seven fractional digits, of which the
first six, microseconds, are parsed and the seventh dropped) or ``2024-05-10 00:00:00.009930+00:00``
(2024: a UTC offset, or ``Z``; a ``T`` between date and time is read too). Rows must come in
arrival order. A row with no prompt (``ContextTokens`` 0) cannot be replayed: it is skipped, and
the file's skipped rows are logged once at its end (``event=trace_rows_skipped``). The file is read
line by line, so a trace of any length streams in constant memory."""

from __future__ import annotations

import csv
import datetime
import pathlib
import re
from collections.abc import Iterator

from meridian.traces import records

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_EPOCH = datetime.datetime(1970, 1, 1)
_MICROSECOND = datetime.timedelta(microseconds=1)
ROW_EXAMPLE = "2023-11-16 18:15:46.6805900,374,44"


_OFFSET = re.compile(r"(Z|[+-]\d\d:?\d\d)$")


def _timestamp(text: str) -> datetime.datetime:
    """Parse ``YYYY-MM-DD[ T]HH:MM:SS[.fraction][Z|+HH:MM]``, keeping at most six fractional
    digits; a time with an offset is turned into naive UTC, so rows with and without one compare."""
    text = text.strip()
    match = _OFFSET.search(text)
    offset = ""
    if match and len(text) > 19:
        offset = "+00:00" if match.group(1) == "Z" else match.group(1)
        text = text[: match.start()]
    head, dot, frac = text.partition(".")
    if dot:
        if not frac.isdigit():
            raise ValueError(text)
        head = f"{head}.{frac[:6].ljust(6, '0')}"
    at = datetime.datetime.fromisoformat(head + offset)
    if at.tzinfo is not None:
        at = at.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return at


def read(path: str | pathlib.Path) -> Iterator[records.Request]:
    """The requests of an Azure trace file, in order; raises ``records.TraceError`` (file and
    line) at the first bad row."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise records.TraceError(path, 0, f"empty file; expected the header {','.join(HEADER)}")
        if tuple(h.strip() for h in header) != HEADER:
            raise records.TraceError(path, reader.line_num, f"header is {','.join(header)!r}; expected "
                                     f"{','.join(HEADER)} (an Azure LLM inference trace)")
        arrivals = records.Arrivals(path, "TIMESTAMP", per_second=1e6)
        skipped = records.Skipped(path, "ContextTokens 0: no prompt to replay")
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
                                         "'2023-11-16 18:15:46.6805900' or '2024-05-10 00:00:00.009930+00:00'") from None
            try:
                input_tokens = records.token_count(row[1], "ContextTokens")
                output_tokens = records.token_count(row[2], "GeneratedTokens")
            except ValueError as exc:
                raise records.TraceError(path, line, str(exc)) from None
            arrival_s = arrivals.at((at - _EPOCH) // _MICROSECOND, line, row[0])
            if input_tokens == 0:
                skipped.add(line)
                continue
            yield records.Request(arrival_s, input_tokens, output_tokens)
        skipped.report()
