"""The one table printer and the progress reporter: plain, greppable text when not on a terminal,
rich styling and a live bar on one, and a one-line summary at the end of every long operation."""

from __future__ import annotations

import io

from meridian import progress, tables


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_table_lines_up_columns_without_trailing_spaces():
    """Columns are two spaces apart under an ASCII rule; numbers can be right-aligned; no line ends
    in a space and a wide table is never wrapped."""
    out = tables.text(["name", "n"], [["a", 1], ["bbbbbb", 1000]], right="numbers")
    assert out.splitlines() == ["name       n", "------- ----", "a          1", "bbbbbb  1000"]
    wide = tables.text([f"column{i}" for i in range(60)], [[f"value{i}" for i in range(60)]])
    assert len(wide.splitlines()) == 3 and not any(line.endswith(" ") for line in wide.splitlines())


def test_emit_is_plain_in_a_pipe_and_styled_on_a_terminal():
    """emit prints the plain text to a pipe, and a boxed table to a terminal (same cells)."""
    pipe, tty = io.StringIO(), _Tty()
    tables.emit(tables.table(["KIND", "NAME"], [["ModelDeployment", "chat"]]), pipe)
    tables.emit(tables.table(["KIND", "NAME"], [["ModelDeployment", "chat"]]), tty)
    assert pipe.getvalue() == "KIND             NAME\n---------------- ----\nModelDeployment  chat\n"
    assert "ModelDeployment" in tty.getvalue() and tty.getvalue() != pipe.getvalue()


def test_progress_is_quiet_in_a_pipe_and_ends_with_one_summary_line():
    """Off a terminal nothing is printed while it runs; at the end one line says what, how much and
    how long (on the injected clock)."""
    now = [100.0]
    stream = io.StringIO()
    with progress.Progress("simulating", 3, unit="policies", stream=stream, clock=lambda: now[0]) as bar:
        bar.advance()
        bar.advance(note="half")
        assert stream.getvalue() == ""
        now[0] += 12.5
        bar.advance()
    assert stream.getvalue() == "simulating: done, 3/3 policies in 12.5 s\n"


def test_progress_says_how_a_wait_ended():
    """A wait that times out (or raises) says so in its summary line."""
    stream = io.StringIO()
    with progress.Progress("waiting for replicas", unit="replicas ready", stream=stream) as bar:
        bar.update(1, 2)
        bar.fail("timed out after 5 s")
    assert stream.getvalue().startswith("waiting for replicas: timed out after 5 s, 1/2 replicas ready in ")
    stream = io.StringIO()
    try:
        with progress.Progress("bench", 4, stream=stream):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert stream.getvalue().startswith("bench: failed, 0/4 in ")


def test_progress_draws_a_bar_on_a_terminal():
    """On a terminal a rich progress bar is drawn on the stream (then the summary line)."""
    tty = _Tty()
    with progress.Progress("bench", 2, stream=tty) as bar:
        bar.advance()
        bar.advance()
    assert "bench" in tty.getvalue() and tty.getvalue().rstrip().endswith("bench: done, 2/2 in 0.0 s")
    assert list(progress.track([1, 2, 3], "items", stream=io.StringIO())) == [1, 2, 3]
