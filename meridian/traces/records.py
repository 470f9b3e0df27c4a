"""What every trace reader yields: one typed record per request, and the error a bad row raises."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable


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
