"""BurstGPT (Wang et al., "BurstGPT: A Real-world Workload Dataset to Optimize LLM Serving
Systems", KDD 2025; CC-BY 4.0; github.com/HPMLL/BurstGPT): CSV
``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``.

``Timestamp`` is seconds from the start of the trace (whole or fractional); the columns are found
by name, so extra or reordered columns are read too. ``Response tokens`` 0 marks a request that
failed in the original service: it is kept (a request with no answer still costs a prefill). A
row with ``Request tokens`` 0 has no prompt to replay: it is skipped, and the file's skipped rows
are logged once at its end (``event=trace_rows_skipped``). Rows must come in arrival order; the
file is read line by line (constant memory). Not shipped with Meridian: pass the file's path."""

from __future__ import annotations

import csv
import math
import pathlib
from collections.abc import Iterator, Sequence

from meridian.traces import records

COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
HEADER_EXAMPLE = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
ROW_EXAMPLE = "5,ChatGPT,472,18,490,Conversation log"


def matches(header: Sequence[str]) -> bool:
    """Whether a CSV header is BurstGPT's (its three columns Meridian reads are there)."""
    names = {h.strip() for h in header}
    return all(c in names for c in COLUMNS)


def read(path: str | pathlib.Path) -> Iterator[records.Request]:
    """The requests of a BurstGPT file, in order; raises ``records.TraceError`` (file and line) at
    the first bad row."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise records.TraceError(path, 0, f"empty file; expected the header {HEADER_EXAMPLE}")
        names = [h.strip() for h in header]
        if not matches(names):
            missing = ", ".join(c for c in COLUMNS if c not in names)
            raise records.TraceError(path, reader.line_num, f"header has no {missing} column; expected "
                                     f"{HEADER_EXAMPLE} (a BurstGPT trace)")
        at_col, in_col, out_col = (names.index(c) for c in COLUMNS)
        width = max(at_col, in_col, out_col) + 1
        arrivals = records.Arrivals(path, "Timestamp")
        skipped = records.Skipped(path, "Request tokens 0: no prompt to replay")
        for row in reader:
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            line = reader.line_num
            if len(row) < width:
                raise records.TraceError(path, line, f"{len(row)} fields; expected {len(names)} like {ROW_EXAMPLE!r}")
            try:
                stamp = float(row[at_col])
            except ValueError:
                stamp = math.nan
            if not math.isfinite(stamp) or stamp < 0:
                raise records.TraceError(path, line, f"Timestamp {row[at_col]!r} must be seconds >= 0 "
                                         "from the start of the trace")
            try:
                input_tokens = records.token_count(row[in_col], "Request tokens")
                output_tokens = records.token_count(row[out_col], "Response tokens")
            except ValueError as exc:
                raise records.TraceError(path, line, str(exc)) from None
            arrival_s = arrivals.at(stamp, line, row[at_col])
            if input_tokens == 0:
                skipped.add(line)
                continue
            yield records.Request(arrival_s, input_tokens, output_tokens)
        skipped.report()
