"""Progress of a long operation (``meridian apply --wait``, ``meridian simulate``, the benches), on
``rich.progress``: a bar on stderr when stderr is a terminal; nothing while it runs otherwise (CI,
pipes and logs stay clean), and in both cases one summary line at the end, saying what was done,
how much of it and how long it took.

The clock is injected (``clock``: monotonic seconds) so tests can pin the summary."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TypeVar

import rich.console
import rich.progress

__all__ = ["Progress", "track"]

T = TypeVar("T")


class Progress:
    """``with Progress("simulating", total=7) as p: ... p.advance()``. ``unit`` names what is
    counted (``policies``, ``replicas ready``); ``update(completed, total)`` sets both (a wait whose
    target moves); ``note`` changes the text after the bar."""

    def __init__(self, description: str, total: float | None = None, *, unit: str = "", stream: IO[str] | None = None,
                 clock: Callable[[], float] = time.monotonic, live: bool | None = None):
        self.description = description
        self.total = total
        self.completed = 0.0
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        isatty = getattr(self.stream, "isatty", None)
        self.live = bool(isatty and isatty()) if live is None else live
        self._bar: rich.progress.Progress | None = None
        self._task: rich.progress.TaskID | None = None
        self._started = 0.0
        self.outcome = "done"

    def __enter__(self) -> Progress:
        self._started = self.clock()
        if self.live:
            console = rich.console.Console(file=self.stream, highlight=False)
            self._bar = rich.progress.Progress(
                rich.progress.TextColumn("{task.description}"), rich.progress.BarColumn(),
                rich.progress.MofNCompleteColumn(), rich.progress.TimeElapsedColumn(),
                rich.progress.TextColumn("{task.fields[note]}"), console=console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total, note="")
        return self

    def advance(self, n: float = 1.0, note: str | None = None) -> None:
        self.update(self.completed + n, note=note)

    def update(self, completed: float, total: float | None = None, note: str | None = None) -> None:
        self.completed = completed
        if total is not None:
            self.total = total
        if self._bar is not None and self._task is not None:
            fields = {} if note is None else {"note": note}
            self._bar.update(self._task, completed=completed, total=self.total, **fields)

    def fail(self, outcome: str) -> None:
        """Say how it ended when it did not finish (``timed out``, ``failed``)."""
        self.outcome = outcome

    def summary(self) -> str:
        elapsed = self.clock() - self._started
        count = f"{self.completed:g}" + (f"/{self.total:g}" if self.total is not None else "")
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.description}: {self.outcome}, {count}{unit} in {elapsed:.1f} s"

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._bar is not None:
            self._bar.stop()
        if exc_type is not None and self.outcome == "done":
            self.outcome = "interrupted" if exc_type is KeyboardInterrupt else "failed"
        print(self.summary(), file=self.stream, flush=True)


def track(items: Iterable[T], description: str, total: float | None = None, *, unit: str = "",
          stream: IO[str] | None = None) -> Iterator[T]:
    """Each of ``items``, with a Progress advanced after each."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(description, total, unit=unit, stream=stream) as p:
        for item in items:
            yield item
            p.advance()
