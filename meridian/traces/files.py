"""The public traces shipped with Meridian (``meridian/data/traces/``, see its README.md for
sources, licenses and citations) and reading any trace file by its format."""

from __future__ import annotations

import csv
import dataclasses
import pathlib
from collections.abc import Callable, Iterator

from meridian.spec import base as spec_base
from meridian.traces import azure, burstgpt, mooncake, records

DATA_DIR = pathlib.Path(__file__).resolve().parent.parent / "data" / "traces"


@dataclasses.dataclass(frozen=True)
class Shipped:
    """A trace file packaged with Meridian: its short name, file name, format and source."""

    name: str
    file: str
    format: str
    source: str

    @property
    def path(self) -> pathlib.Path:
        return DATA_DIR / self.file


SHIPPED: dict[str, Shipped] = {s.name: s for s in (
    Shipped("azure-conv", "azure-llm-2023-conv.csv", "azure",
            "Azure LLM inference trace 2023, conversation (Azure/AzurePublicDataset; CC-BY 4.0)"),
    Shipped("azure-code", "azure-llm-2023-code.csv", "azure",
            "Azure LLM inference trace 2023, code completion (Azure/AzurePublicDataset; CC-BY 4.0)"),
    Shipped("mooncake", "mooncake-synthetic.jsonl", "mooncake",
            "Mooncake FAST'25 synthetic trace (kvcache-ai/Mooncake; Apache-2.0)"),
)}

READERS: dict[str, Callable[[pathlib.Path], Iterator[records.Request]]] = {
    "azure": azure.read,
    "burstgpt": burstgpt.read,
    "mooncake": mooncake.read,
}
# A .csv file's format is told by its header (``_csv_format``), a .jsonl file is Mooncake's.
SUFFIXES = {".csv": "csv", ".jsonl": "mooncake"}
CSV_HEADERS = (f"Azure: {','.join(azure.HEADER)}; BurstGPT: {burstgpt.HEADER_EXAMPLE}")


def _csv_format(path: pathlib.Path) -> str:
    """Azure's or BurstGPT's, from the file's header line."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        header = next(csv.reader(fh), None)
    if header is None:
        raise records.TraceError(path, 0, f"empty file; a .csv trace starts with a header ({CSV_HEADERS})")
    if tuple(h.strip() for h in header) == azure.HEADER:
        return "azure"
    if burstgpt.matches(header):
        return "burstgpt"
    raise records.TraceError(path, 1, f"header is {','.join(header)!r}; expected {CSV_HEADERS}")


def shipped(name: str) -> Shipped:
    """A packaged trace by short name; a KeyError lists the valid names."""
    try:
        return SHIPPED[name]
    except KeyError:
        raise KeyError(f"unknown trace {name!r}; shipped traces: {', '.join(SHIPPED)}") from None


def resolve(name_or_path: str | pathlib.Path) -> tuple[pathlib.Path, str]:
    """(path, format) of a shipped trace's short name or of a file (format from its suffix and,
    for .csv, its header: Azure's or BurstGPT's; .jsonl is Mooncake's)."""
    if isinstance(name_or_path, str) and name_or_path in SHIPPED:
        s = SHIPPED[name_or_path]
        return s.path, s.format
    path = pathlib.Path(name_or_path)
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None and not path.suffix and not path.exists():
        close = spec_base.closest(path.name, list(SHIPPED))
        hint = f"did you mean {close!r}? " if close else ""
        raise records.TraceError(path, 0, f"not a shipped trace ({hint}shipped: {', '.join(SHIPPED)}) nor a file "
                                 "with a .csv or .jsonl suffix")
    if fmt is None:
        raise records.TraceError(path, 0, f"unknown trace format {path.suffix!r}: use a .csv file "
                                 f"({CSV_HEADERS}), a .jsonl file (Mooncake), "
                                 f"or a shipped trace ({', '.join(SHIPPED)})")
    if not path.is_file():
        raise records.TraceError(path, 0, f"no such file; give a file (.csv: Azure or BurstGPT, .jsonl: "
                                 f"Mooncake) or a shipped trace ({', '.join(SHIPPED)})")
    if fmt == "csv":
        fmt = _csv_format(path)
    return path, fmt


def read(name_or_path: str | pathlib.Path) -> Iterator[records.Request]:
    """The requests of a shipped trace (by short name) or of a trace file, streamed in order."""
    path, fmt = resolve(name_or_path)
    return READERS[fmt](path)
