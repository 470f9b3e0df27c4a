"""The table of faults and outcomes, as text (rich), for the terminal summary and a file."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from tests.chaos import outcome as outcome_mod

# Every fault's outcome, in the order run (the terminal summary prints them).
OUTCOMES: list[outcome_mod.Outcome] = []

HEADERS = ("fault", "requests (non-stream/stream)", "failed (non-stream/stream)", "streams broken", "duplicates",
           "clients hurt (s)", "fleet whole (s)", "router upstream errors", "lost / twice", "result")


def table(outcomes: list[outcome_mod.Outcome]) -> str:
    t = Table(title="Chaos suite: faults under steady load through the router", title_justify="left")
    for h in HEADERS:
        t.add_column(h, overflow="fold")
    for o in outcomes:
        restored = f"{o.restored_s:.1f}" if o.restored_s is not None else "never"
        t.add_row(o.fault.name, f"{o.requests}/{o.streams}", f"{o.failed_unary}/{o.failed_streams}",
                  f"{o.broken} (<= {o.fault.expect.broken_streams})", str(o.duplicates),
                  f"{o.service_s:.1f} (<= {o.fault.expect.service_s:g})",
                  f"{restored} (<= {o.fault.expect.restored_s:g})",
                  " ".join(f"{k.split(':', 1)[1]}={v}" for k, v in o.router.items() if k.startswith("upstream_errors:"))
                  or "-", "none" if not o.problems else "; ".join(o.problems)[:120],
                  "pass" if o.passed else "FAIL")
    out = io.StringIO()
    Console(file=out, width=240, force_terminal=False, color_system=None).print(t)
    return out.getvalue()
