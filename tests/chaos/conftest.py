"""The chaos suite's fixtures: one world for the whole module (started once, made whole between
faults), the outcomes of every fault, and the table printed in pytest's terminal summary (CI prints
only what pytest prints) and written to the run's temp dir."""

from __future__ import annotations

import pathlib

import pytest_asyncio

from meridian.demo import processes
from tests.chaos import report
from tests.chaos import world as world_mod

_TABLE_FILE: list[pathlib.Path] = []


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("chaos")
    _TABLE_FILE[:] = [workdir / "chaos-table.txt"]
    w = world_mod.World(workdir)
    try:
        await w.start()
        yield w
    finally:
        await w.stop()
        leftover = w.fleet.procs.stragglers()
        assert leftover == [], f"processes of the chaos run outlived it: {processes.describe(leftover)}"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not report.OUTCOMES:
        return
    text = report.table(report.OUTCOMES)
    terminalreporter.write_sep("=", "chaos suite")
    terminalreporter.write(text)
    if _TABLE_FILE:
        _TABLE_FILE[0].write_text(text)
        terminalreporter.write_line(f"(also in {_TABLE_FILE[0]})")
