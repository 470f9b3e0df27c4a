"""Public LLM request traces: typed, streaming readers and the files shipped with Meridian.

``read("mooncake")`` (or any path: ``.csv`` Azure 2023/2024 or BurstGPT, told by the header;
``.jsonl`` Mooncake) yields ``Request`` records
(arrival seconds from the first request, input and output tokens, Mooncake's block hashes); a bad
row raises ``TraceError`` naming the file and line. ``summarize`` totals a stream of records."""

from meridian.traces import azure, burstgpt, files, mooncake, records
from meridian.traces.files import DATA_DIR, SHIPPED, Shipped, read, resolve, shipped
from meridian.traces.records import Request, Summary, TraceError, summarize

__all__ = ["DATA_DIR", "SHIPPED", "Request", "Shipped", "Summary", "TraceError", "azure", "burstgpt", "files",
           "mooncake",
           "read", "records", "resolve", "shipped", "summarize"]
