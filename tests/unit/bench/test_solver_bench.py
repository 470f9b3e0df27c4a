"""The solver benchmark's figures: one objective, the best bound any part proved, the gap on the part
a plan can change, and a --reference run that prints the best plan it finds."""

from __future__ import annotations

import importlib

import pytest

bench_main = importlib.import_module("bench.solver.__main__")


def test_bench_row_compares_the_plan_with_bounds_on_the_same_objective():
    """On a small fleet with a reference run: the best bound is at most both plans' objective, the
    gap on the changeable part is the gap with the nodes every plan pays taken off both sides, and
    the best known plan is the better of the two."""
    r = bench_main.run("12x16", time_limit_s=2.0, seed=5, reference_s=4.0)
    assert r["bound"] <= r["objective"] + 1e-6 and r["bound"] <= r["reference"] + 1e-6
    assert r["sunk"] > 0  # the seeded fleet has reserved nodes
    assert r["gap_changeable"] == pytest.approx((r["objective"] - r["bound"]) / (r["objective"] - r["sunk"]))
    assert r["gap_changeable"] >= r["gap"]
    assert r["known"] == min(r["objective"], r["reference"])
    assert r["incr_mode"] == "incremental"


def test_bench_prints_the_reference_plan_and_one_row_per_fleet(capsys: pytest.CaptureFixture[str]):
    """``--reference`` prints the plan and bound the long run found (stderr) beside the table row."""
    assert bench_main.main(["--sizes", "12x16", "--time-limit", "1", "--bound-s", "0", "--reference", "2",
                            "--seed", "5"]) == 0
    out = capsys.readouterr()
    assert "12x16: reference plan" in out.err and "bound" in out.err
    rows = [line for line in out.out.splitlines() if line.strip().startswith("12x16 ")]
    assert len(rows) == 1
    assert "12x16: best known" in out.out
