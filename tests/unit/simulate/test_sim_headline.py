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


def _run(seed: int, usd: float, bound: float, worst: float, met: bool) -> dict:
    return {"scenario": "skyserve-like", "traffic": "synthetic", "seed": seed, "requests": 10,
            "rows": [{"policy": "meridian", "usd_per_hour": usd, "slo": 0.999, "min_region_slo": worst,
                      "min_region": "ap-south", "failed": 0}],
            "bound_usd_per_hour": bound, "meridian_above_bound": usd / bound - 1, "bound_target_met": met,
            "saving_vs_skyserve": 0.2, "skyserve_target_met": True,
            "skyserve_headline": {"baseline": "od-multi-region", "saving": 0.45, "attainment_delta": 0.0,
                                  "met": met}}


def test_the_bench_says_over_its_seeds_how_often_each_target_held():
    """Three days of one scenario: the line over the seeds gives the mean and range of Meridian's
    cost and distance to the bound, and counts the seeds on which each target held, so one lucky
    seed cannot stand for the scenario."""
    agg = bench.over_seeds([_run(7, 66.0, 60.0, 0.996, True), _run(8, 80.0, 60.0, 0.97, False),
                            _run(9, 78.0, 60.0, 0.99, False)])
    assert agg["seeds"] == [7, 8, 9]
    assert agg["bound_target_met"] == "1/3" and agg["skyserve_target_met"] == "3/3"
    assert agg["skyserve_headline_met"] == "1/3"
    text = "\n".join(bench.seed_lines(agg))
    assert "over seeds 7-9" in text
    assert "meridian $74.67 ($66.00..$80.00)/h" in text
    assert "vs the bound +24.4% (+10.0%..+33.3%)" in text
    assert "within 10% of the bound at >= 99.5% per region 1/3" in text


def test_the_bench_prints_the_steady_and_burst_parts_above_the_bound_that_add_up():
    """Per run the bench names the excess, its steady part and bursts and the costliest hours; over
    the seeds, the two parts per hour of the run."""
    runs = []
    for seed, steady, burst in ((7, 48.0, 72.0), (8, 72.0, 24.0)):
        r = _run(seed, 66.0, 60.0, 0.996, True)
        r["hours"] = 24.0
        r["bound_proven"] = True
        r["above_bound_split"] = {"usd": steady + burst, "steady_usd": steady, "burst_usd": burst,
                                  "median_usd_per_hour": steady / 24.0, "hours": [{"utc_hour": 16, "usd": 52.3}]}
        runs.append(r)
    assert "  meridian above the bound: $120 = steady $48 (up to the median 5-minute distance, $2.00/h) + bursts " \
           "$72 (60%); costliest hours (UTC): 16:00 $52" in bench.lines(runs[0])
    text = "\n".join(bench.seed_lines(bench.over_seeds(runs)))
    assert "steady $2.50 ($2.00..$3.00)/h + bursts $2.00 ($1.00..$3.00)/h" in text


def test_the_bench_refuses_a_seed_count_below_one(capsys):
    import pytest
    with pytest.raises(SystemExit):
        bench.main(["--seeds", "0"])
    assert "--seeds must be at least 1, got 0" in capsys.readouterr().err
