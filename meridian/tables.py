"""The one table printer (``rich`` tables): the CLI's listings, the demo's view and report, the
simulator's report, the bill and the benches print with it.

Text that may be piped, logged or compared in tests is plain: no colour, no box drawing beyond an
ASCII rule under the header (and before a total row), columns two spaces apart, no trailing
spaces, never wrapped, so output stays greppable. ``emit`` adds colour and a box only when its
stream is a terminal."""

from __future__ import annotations

import io
import sys
from collections.abc import Collection, Sequence
from typing import IO

import rich.box
import rich.console
import rich.table

__all__ = ["table", "render", "text", "emit", "is_terminal"]

# A header rule and a rule before a total (end_section) row, in ASCII.
PLAIN = rich.box.Box("    \n    \n -  \n    \n -  \n    \n    \n    \n", ascii=True)
_WIDE = 10_000  # plain text never wraps a table: a row is one line however wide


def table(headers: Sequence[str], rows: Sequence[Sequence[object]] = (), *,
          right: Collection[int] | str = ()) -> rich.table.Table:
    """A table of ``headers`` and ``rows`` (cells shown with ``str``). ``right``: the indexes of the
    columns to right-align, or ``"numbers"`` for every column but the first."""
    aligned = set(range(1, len(headers))) if right == "numbers" else set(right)
    t = rich.table.Table(box=PLAIN, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for i, h in enumerate(headers):
        t.add_column(str(h), justify="right" if i in aligned else "left", no_wrap=True)
    for row in rows:
        t.add_row(*("" if c is None else str(c) for c in row))
    return t


def render(t: rich.table.Table, width: int = _WIDE) -> str:
    """``t`` as plain text (no colour, no trailing spaces)."""
    console = rich.console.Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False,
                                   highlight=False, emoji=False, markup=False)
    console.print(t)
    out = console.file
    assert isinstance(out, io.StringIO)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def text(headers: Sequence[str], rows: Sequence[Sequence[object]], *, right: Collection[int] | str = ()) -> str:
    """``table(...)`` rendered as plain text."""
    return render(table(headers, rows, right=right))


def is_terminal(stream: IO[str] | None) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def emit(t: rich.table.Table, file: IO[str] | None = None) -> None:
    """Print ``t`` to ``file`` (stdout): styled (bold header, a light box) on a terminal, plain
    text otherwise (pipes, CI, tests)."""
    stream = file if file is not None else sys.stdout
    if is_terminal(stream):
        t.box = rich.box.SIMPLE_HEAD
        t.header_style = "bold"
        rich.console.Console(file=stream, highlight=False).print(t)
    else:
        print(render(t), file=stream)
