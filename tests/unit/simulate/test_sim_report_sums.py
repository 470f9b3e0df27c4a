"""The simulate report's figures agree with each other (issue 18): per-region and per-deployment
failure counts add up to the policy's total, 100.00% never stands beside a failure, and every SLO
column names its denominator."""

from __future__ import annotations

import re

import pytest

from meridian.simulate import report, runner


@pytest.fixture
def outage_report(make_scenario) -> tuple[runner.Comparison, str]:
    sc = make_scenario(hours=1.0, outages=[{"at_h": 0.25, "duration_h": 0.25, "region": "us-east-1"}])
    cmp = runner.run(sc, ["meridian", "round-robin"], jobs=1, with_bound=False)
    return cmp, report.text(cmp)


def _section(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].strip())
    return lines[start + 3:end]  # title, header, rule


def _n(cell: str) -> int:
    return int(cell.replace(",", ""))


def test_region_and_deployment_failures_add_up_to_the_total(outage_report):
    """With an outage failing requests, each policy's per-region failed counts and per-deployment
    failed counts sum to the failed count of its row in the first table."""
    cmp, text = outage_report
    totals = {r.policy: round(r.total.failed) for r in cmp.results}  # as the first table prints it
    for name, n in totals.items():
        assert re.search(rf"^{name} .* {n:,} ", text, re.M)
    assert set(totals) == {"meridian", "round-robin"} and totals["meridian"] > 0
    by_region: dict[str, int] = {}
    for line in _section(text, "SLO attainment (share of the client region's requests)"):
        cells = line.split()
        by_region[cells[0]] = by_region.get(cells[0], 0) + _n(cells[3])
    assert by_region == totals
    for line in _section(text, "Per deployment (SLO met"):
        cells = line.split()
        failed = [_n(c) for c in re.findall(r"/ ([\d,]+)", line)]
        assert sum(failed) == totals[cells[0]]
    moments = _section(text, "Meridian's failed requests by cause")
    assert sum(_n(line.split()[-1]) for line in moments) == totals["meridian"]


def test_no_full_attainment_beside_a_failure(outage_report):
    """A row that shows any failed request never shows 100.00% SLO met (attainment rounds down)."""
    _, text = outage_report
    for line in text.splitlines():
        for pct, failed in re.findall(r"(\d+\.\d\d)% / ([\d,]+)", line):
            assert not (pct == "100.00" and _n(failed) > 0), line
    for line in _section(text, "SLO attainment (share of the client region's requests)"):
        cells = line.split()
        assert not (cells[2] == "100.00%" and _n(cells[3]) > 0), line
    assert report.attainment_text(0.99999) == "99.99%" and report.attainment_text(1.0) == "100.00%"


def test_slo_columns_name_their_denominators(outage_report):
    """The first table's note, the per-region and the per-deployment titles say what each SLO share
    is a share of."""
    _, text = outage_report
    assert "SLO met: share of all requests, failed ones included" in text
    assert "share of the client region's requests" in text
    assert "share of the deployment's requests" in text
