"""Where a client region under the per-region target (99.5% of its requests within SLO) missed it:
the report names the windows and the causes, and the figures add up to the region's own."""

from __future__ import annotations

import pytest
from test_sim_bound import _two_regions, even_scenario, tiny_specs

from bench.simulate import __main__ as bench_simulate
from meridian import catalog
from meridian.simulate import metrics, report, runner


def test_the_report_says_in_which_window_and_for_what_a_client_region_missed_its_slo(tmp_path):
    """The tiny fleet's na-east is served from us-east-1, with an empty pool in us-east-2. us-east-1
    is down from 0.5 h for 15 minutes: until a node in us-east-2 is up and its replica loaded,
    na-east's requests fail. The region ends under 99.5%, and the report puts most of its misses in
    the outage window, as failures; the steady state's few are TTFT and TPOT tails."""
    cmp = runner.run(_two_regions(tmp_path, outage=True), ["meridian"], jobs=1, with_bound=False)
    mer = cmp.result("meridian")
    [rm] = metrics.region_misses(mer)
    region = mer.regions["na-east"]
    assert rm.region == "na-east"
    assert rm.requests == pytest.approx(region.requests, rel=1e-9)
    assert rm.met == pytest.approx(region.met_slo, rel=1e-6)
    assert rm.attainment < metrics.REGION_TARGET_SHARE
    assert sum(w.missed for w in rm.windows) == pytest.approx(rm.missed, rel=1e-6)
    first = rm.windows[0]
    assert first.window.startswith("outage us-east-1"), rm.windows
    assert first.missed > 0.8 * rm.missed, rm.windows
    assert set(first.causes) <= {"no_replica", "replica_died", "queue_full", "max_rtt", "ttft", "tpot"}
    assert first.causes.keys() & {"no_replica", "replica_died"}, first.causes
    [steady] = [w for w in rm.windows if w.window == "steady"]
    assert set(steady.causes) <= {"ttft", "tpot"}, steady.causes

    text = report.text(cmp)
    assert "Client regions under 99.50% of their requests within SLO" in text
    [line] = [ln for ln in text.splitlines() if ln.startswith("  na-east ")]
    assert f": {rm.missed:,.0f} of {rm.requests:,.0f} requests missed: {first.window} {first.missed:,.0f} of " in line
    assert "failed, " in line  # the causes, in words

    doc = report.as_dict(cmp)
    [row] = doc["meridian_region_misses"]
    assert row["client_region"] == "na-east" and row["windows"][0]["window"] == first.window
    assert row["missed"] == pytest.approx(rm.missed, abs=0.1)


def test_a_day_without_a_fault_says_every_region_kept_the_target(tmp_path):
    """The tiny fleet with a TTFT target its prompt tail keeps (2 s), at 0.2 requests/s and no fault:
    na-east keeps 99.5%, and the report says so instead of listing regions."""
    specs = tiny_specs(tmp_path, "calm", ("ttft_p99_ms: 800", "ttft_p99_ms: 2000"))
    cmp = runner.run(even_scenario(tmp_path, "calm", specs, 0.2), ["meridian"], jobs=1, with_bound=False)
    [rm] = metrics.region_misses(cmp.result("meridian"))
    assert rm.attainment >= metrics.REGION_TARGET_SHARE
    assert "Every client region: at least 99.50% of its requests within SLO." in report.text(cmp)


def test_nodes_billed_in_a_region_while_it_is_down_are_named_beside_the_bound(tmp_path):
    """The us-east-1 outage of the two-region fleet: Meridian's nodes there beyond the pool's
    minimum (one node) bill for the 15 minutes nobody can release them. The run counts exactly
    those node-hours at the pool's price (a whole number of nodes x 0.25 h), and the report says so
    beside the bound; a day without an outage counts nothing and prints no such line."""
    price = catalog.instances.default().lookup("aws", "g6.xlarge", "us-east-1").price_per_hour_usd
    cmp = runner.run(_two_regions(tmp_path, outage=True), ["meridian"], jobs=1)
    down = cmp.result("meridian").stats["down_region_extra_usd"]
    nodes = down / (0.25 * price)
    assert nodes >= 1 and nodes == pytest.approx(round(nodes), abs=1e-6), down
    assert f"Of Meridian's bill, ${down:,.2f} paid for nodes in regions while they were down" in report.text(cmp)
    summary = bench_simulate.summary(cmp, "synthetic")
    assert summary["down_region_extra_usd"] == down
    assert any(ln.startswith(f"  of meridian's bill, ${down:,.2f} paid for nodes in regions while they were down")
               for ln in bench_simulate.lines(summary))
    calm = runner.run(_two_regions(tmp_path, outage=False), ["meridian"], jobs=1)
    assert calm.result("meridian").stats["down_region_extra_usd"] == 0.0
    assert "while they were down" not in report.text(calm)
    assert not any("while they were down" in ln for ln in bench_simulate.lines(bench_simulate.summary(calm, "synthetic")))
