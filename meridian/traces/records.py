"""What every trace reader yields: one typed record per request, and the error a bad row raises."""

from __future__ import annotations

import dataclasses
import logging
import math
import pathlib
from collections.abc import Iterable

log = logging.getLogger("meridian.traces")


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """One recorded request.

    ``arrival_s``: seconds since the trace's first request (so the first is 0.0); ``input_tokens``
    and ``output_tokens``: the prompt and the answer as the trace counted them; ``block_hashes``:
    for traces that record prompt content as block hashes (Mooncake), one id per block of the
    prompt, in order (requests whose tuples share a leading run share that prompt prefix); empty
    when the trace has no content (Azure)."""

    arrival_s: float
    input_tokens: int
    output_tokens: int
    block_hashes: tuple[int, ...] = ()


class TraceError(ValueError):
    """A trace file that cannot be read: names the file, the line (1-based, as an editor shows it)
    and what a valid row looks like."""

    def __init__(self, path: str | pathlib.Path, line: int, message: str):
        self.path = str(path)
        self.line = line
        super().__init__(f"{self.path}:{line}: {message}" if line else f"{self.path}: {message}")


def token_count(text: str, field: str, minimum: int = 0) -> int:
    """A CSV cell holding a token count: a whole number (``12``, or ``12.0`` as some exports write
    it) of at least ``minimum``; a ValueError names the field and what it got."""
    try:
        value = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not number.is_integer():
            raise ValueError(f"{field} must be an integer, got {text!r}") from None
        value = int(number)
    if value < minimum:
        raise ValueError(f"{field} must be >= {minimum}, got {value}")
    return value


class Arrivals:
    """A file's arrival times as seconds from its first row, refused out of order: a replay needs
    the rows in arrival order. ``at`` takes a row's stamp in the file's own unit (``per_second`` of
    them make a second), subtracting before dividing so integer stamps stay exact."""

    def __init__(self, path: str | pathlib.Path, field: str, per_second: float = 1.0):
        self.path = str(path)
        self.field = field
        self.per_second = per_second
        self.start: float | None = None
        self.previous_s = 0.0

    def at(self, stamp: float, line: int, shown: str) -> float:
        if self.start is None:
            self.start = stamp
        arrival_s = (stamp - self.start) / self.per_second
        if arrival_s < self.previous_s:
            raise TraceError(self.path, line, f"{self.field} {shown} is before the previous row's; "
                             "rows must be in arrival order")
        self.previous_s = arrival_s
        return arrival_s


class Skipped:
    """Rows a reader leaves out for one reason (a request a replay cannot send, such as one with
    no prompt): counted while the file streams, reported once at its end as one structured log
    line with the count and the first such line, so a trace that is mostly such rows is noticed."""

    def __init__(self, path: str | pathlib.Path, reason: str):
        self.path = str(path)
        self.reason = reason
        self.rows = 0
        self.first_line = 0

    def add(self, line: int) -> None:
        self.rows += 1
        self.first_line = self.first_line or line

    def report(self) -> None:
        if self.rows:
            log.warning("event=trace_rows_skipped file=%s rows=%d first_line=%d reason=%r", self.path, self.rows,
                        self.first_line, self.reason)


@dataclasses.dataclass(frozen=True)
class Summary:
    """Totals over a trace: request count, summed tokens, first and last arrival (seconds)."""

    rows: int
    input_tokens: int
    output_tokens: int
    first_arrival_s: float
    last_arrival_s: float

    @property
    def duration_s(self) -> float:
        return self.last_arrival_s - self.first_arrival_s

    @property
    def mean_rps(self) -> float:
        """Requests per second over the span between the first and the last arrival."""
        return (self.rows - 1) / self.duration_s if self.duration_s > 0 else 0.0


def summarize(requests: Iterable[Request]) -> Summary:
    """Totals of ``requests`` in one streaming pass (a trace's rows are never all held)."""
    rows = input_tokens = output_tokens = 0
    first = last = 0.0
    for r in requests:
        if rows == 0:
            first = r.arrival_s
        rows += 1
        input_tokens += r.input_tokens
        output_tokens += r.output_tokens
        last = r.arrival_s
    return Summary(rows, input_tokens, output_tokens, first, last)
