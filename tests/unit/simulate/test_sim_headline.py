"""SkyServe's headline (43% cheaper than on-demand) is judged on the on-demand multi-region row alone,
at equal or better SLO attainment, in the report and in ``python -m bench.simulate``."""

from __future__ import annotations

import importlib

from meridian.simulate import report

bench = importlib.import_module("bench.simulate.__main__")


def _verdict(baseline: str, saving: float, delta: float, on_demand: bool = True) -> dict:
    return {"baseline": baseline, "saving": saving, "attainment_delta": delta,
            "beats": saving > 0 and delta >= -report.ATTAINMENT_TOLERANCE, "on_demand_only": on_demand}


def test_the_single_region_row_does_not_decide_the_headline():
    """A 48% saving against od-multi-region at equal SLO meets the headline, though the rule-breaking
    single-region row is cheaper than Meridian (it used to be judged on the worse of the two)."""
    v = [_verdict("od-cheapest-region", -0.70, 0.1), _verdict("od-multi-region", 0.48, 0.0),
         _verdict("skyserve", 0.30, 0.15, on_demand=False)]
    head = report.headline_verdict(v)
    assert head == {"baseline": "od-multi-region", "saving": 0.48, "attainment_delta": 0.0, "met": True}
    assert report.headline_text(head).endswith("; met)")


def test_the_saving_at_lower_slo_attainment_does_not_meet_the_headline():
    """The same saving with 0.75 pp less of the traffic within SLO is not met, and the line says why."""
    head = report.headline_verdict([_verdict("od-multi-region", 0.48, -0.0075)])
    assert head is not None and not head["met"]
    assert "not met: the saving is there but at -0.750 pp SLO attainment" in report.headline_text(head)
    assert not report.headline_verdict([_verdict("od-multi-region", 0.20, 0.01)])["met"]


def test_no_headline_without_the_on_demand_multi_region_row():
    """A comparison that did not run od-multi-region prints no headline verdict at all."""
    assert report.headline_verdict([_verdict("od-cheapest-region", 0.5, 0.0)]) is None


def test_the_bench_prints_the_reports_headline_line():
    """The bench's summary line for the headline is the report's own wording."""
    head = report.headline_verdict([_verdict("od-multi-region", 0.478, -0.0075)])
    s = {"scenario": "skyserve-like", "traffic": "synthetic", "seed": 7, "requests": 10, "rows": [],
         "skyserve_headline": head}
    assert f"  {report.headline_text(head)}" in bench.lines(s)
