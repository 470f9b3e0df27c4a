"""The demand-following bound: per tick the least cost of a fleet serving that tick's requests
within the SLAs, summed; no policy that serves the demand costs less."""

from __future__ import annotations

import datetime
import pathlib

import pytest

from meridian import catalog
from meridian.simulate import bound, excess, report, runner, scenario
from scheduler.control import planner
from scheduler.solver import throughput

DATA = pathlib.Path(__file__).parent / "data"


def _even_trace(path: pathlib.Path) -> pathlib.Path:
    start = datetime.datetime(2023, 11, 16, 18, 0, 0)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += [(start + datetime.timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0,600,250"
             for i in range(3600)]
    path.write_text("\n".join(rows) + "\n")
    return path


# The tiny fleet's one pool, as tiny-specs.yaml declares it (tests swap it for their own pools).
TINY_L4_POOL = ("    - name: l4\n      instance_type: g6.xlarge\n      tier: on_demand\n      min_nodes: 0\n"
                "      max_nodes: 8\n      initial_nodes: 0\n")


def tiny_specs(tmp_path: pathlib.Path, name: str, *swaps: tuple[str, str], extra: str = "") -> pathlib.Path:
    """tiny-specs.yaml with the first ``old`` of each ``(old, new)`` swap replaced by ``new`` and
    ``extra`` appended, written to ``name``.yaml under ``tmp_path``."""
    text = (DATA / "tiny-specs.yaml").read_text()
    for old, new in swaps:
        assert old in text, f"tiny-specs.yaml no longer holds {old!r}"
        text = text.replace(old, new, 1)
    path = tmp_path / f"{name}.yaml"
    path.write_text(text + extra)
    return path


def even_scenario(tmp_path: pathlib.Path, name: str, specs: pathlib.Path, rps: float, *, warmup_min: float = 20.0,
                  outages: list[dict] | None = None, spot: dict | None = None) -> scenario.Scenario:
    """One hour of ``rps`` chat requests from na-east, one a second scaled, prompts as the spec says."""
    trace_file = _even_trace(tmp_path / "even.csv")
    data = {"name": name, "specs": [str(specs)], "hours": 1.0, "warmup_min": warmup_min,
            "traffic": [{"deployment": "chat", "peak_rps": {"na-east": rps},
                         "trace": {"file": str(trace_file), "diurnal": False, "tokens": "spec"}}],
            "outages": outages or [], **({"spot": spot} if spot is not None else {})}
    return scenario.parse(data, tmp_path, name)


def _tiny(tmp_path: pathlib.Path, rps: float) -> scenario.Scenario:
    return even_scenario(tmp_path, "tiny", DATA / "tiny-specs.yaml", rps)


def test_bound_equals_the_hand_computed_fleet(tmp_path):
    """At a steady 1.5 requests/s, with one L4 serving 0.587 requests/s within the SLA, every tick
    needs floor(1.5 / 0.587) = 2 L4 nodes at $0.8048/h: the bound over the hour is 2 x $0.8048,
    from one distinct demand solved once and proven."""
    sc = _tiny(tmp_path, 1.5)
    specs, tr = runner.prepare(sc)
    view = planner.SpecView.of(specs, 1)
    cap = throughput.capacity_rps(view.deployments["chat"].spec)
    assert int(1.5 // cap) == 2
    price = catalog.instances.default().lookup("aws", "g6.xlarge", "us-east-1").price_per_hour_usd
    b = bound.compute(view, tr)
    assert b.proven and b.distinct_demands == 1 and b.ticks == 60
    assert b.usd == pytest.approx(2 * price, rel=1e-6)
    assert b.usd_per_hour == pytest.approx(2 * price, rel=1e-6)


def test_the_deployments_minimum_holds_below_one_replica_of_demand(tmp_path):
    """Below one replica's worth of requests the bound is still the deployment's minimum (one L4)."""
    sc = _tiny(tmp_path, 0.2)
    specs, tr = runner.prepare(sc)
    price = catalog.instances.default().lookup("aws", "g6.xlarge", "us-east-1").price_per_hour_usd
    assert bound.compute(planner.SpecView.of(specs, 1), tr).usd == pytest.approx(price, rel=1e-6)


def test_no_policy_that_meets_the_slo_costs_less_than_the_bound(tmp_path):
    """Every policy run on the tiny scenario that meets the SLO for at least 99% of the requests
    any fleet could serve within it (the attainable share: its longest prompts miss on an L4 even
    idle) costs at least the bound, which the comparison prints beside the floor (text and JSON)."""
    cmp = runner.run(_tiny(tmp_path, 1.5), jobs=1)
    assert cmp.bound is not None
    can = cmp.attainable[("chat", "na-east")].share
    assert 0.9 < can < 1.0
    met = [r for r in cmp.results if r.total.attainment >= 0.99 * can]
    assert met, [(r.policy, r.total.attainment) for r in cmp.results]
    for r in met:
        assert r.cost_usd >= cmp.bound.usd - 1e-9, r.policy
    assert "Demand-following bound: $1.61/h" in report.text(cmp)
    assert report.as_dict(cmp, include_series=False)["demand_bound"]["usd"] == pytest.approx(cmp.bound.usd, abs=1e-3)


def test_the_report_splits_meridians_cost_above_the_bound_into_steady_and_bursts(tmp_path):
    """The split of Meridian's excess over the bound (``excess``) adds up to its cost minus the
    bound, per tick of the bound and per 5-minute bucket of the bill, in the text and the JSON."""
    cmp = runner.run(_tiny(tmp_path, 1.5), ["meridian"], jobs=1)
    mer = cmp.result("meridian")
    assert len(cmp.bound.usd_by_tick) == cmp.bound.ticks
    assert sum(cmp.bound.usd_by_tick) == pytest.approx(cmp.bound.usd)
    split = report.as_dict(cmp, include_series=False)["meridian_above_bound"]
    assert split["usd"] == pytest.approx(mer.cost_usd - cmp.bound.usd, abs=1e-3)
    assert split["steady_usd"] + split["burst_usd"] == pytest.approx(split["usd"], abs=1e-3)
    assert excess.text(report.above_bound(cmp)) in report.text(cmp)
    # Where it sits: Meridian's READY replica-hours against the bound's fleet, per deployment, GPU
    # type and tier, adding up to the run's replica-hours; in the text and the JSON.
    rows = report.as_dict(cmp, include_series=False)["meridian_fleet_against_bound"]
    assert rows and {r["deployment"] for r in rows} == {"chat"}
    assert sum(r["replica_hours"] for r in rows) == pytest.approx(sum(mer.usage.values()), abs=0.01)
    assert sum(r["bound_replica_hours"] for r in rows) == pytest.approx(sum(cmp.bound.replica_hours.values()), abs=0.01)
    text = report.text(cmp)
    assert "Replica-hours by deployment, GPU type and tier: Meridian's READY replicas against the bound's" in text
    line = next(ln for ln in text.splitlines() if ln.split()[:3] == ["chat", rows[0]["gpu_type"], rows[0]["tier"]])
    assert f"{rows[0]['replica_hours']:,.1f}" in line and f"{rows[0]['bound_replica_hours']:,.1f}" in line


def use2_cluster(pool: str, instance_type: str, max_nodes: int) -> str:
    """A second cluster's spec (aws-use2, us-east-2) with one empty on-demand pool, to append."""
    return f"""---
apiVersion: meridian/v1
kind: Cluster
metadata:
  name: aws-use2
spec:
  cloud: aws
  region: us-east-2
  provider: sim
  auth:
    token_env: MERIDIAN_TOKEN_AWS_USE2
  scheduler:
    address: 127.0.0.1:7070
  pools:
    - name: {pool}
      instance_type: {instance_type}
      tier: on_demand
      min_nodes: 0
      max_nodes: {max_nodes}
      initial_nodes: 0
"""


def _two_regions(tmp_path: pathlib.Path, outage: bool) -> scenario.Scenario:
    """The tiny fleet with its us-east-1 pool holding one node at all times (min_nodes 1) and a
    second L4 pool in us-east-2 at the same price, optionally with us-east-1 down for 15 minutes."""
    specs = tiny_specs(tmp_path, "two", ("      min_nodes: 0\n      max_nodes: 8\n      initial_nodes: 0\n",
                                         "      min_nodes: 1\n      max_nodes: 8\n      initial_nodes: 1\n"),
                       extra=use2_cluster("l4", "g6.xlarge", 8))
    return even_scenario(tmp_path, "two", specs, 1.5,
                         outages=[{"at_h": 0.5, "duration_h": 0.25, "region": "us-east-1"}] if outage else [])


def test_a_region_that_is_down_serves_nothing_in_the_bound_but_its_minimum_nodes_bill(tmp_path):
    """Two L4s serve the demand; one of them is the us-east-1 node every fleet keeps (min_nodes 1).
    While us-east-1 is down (15 of the 60 minutes) both must run in us-east-2 and the node that
    cannot serve still bills: 3 L4s for a quarter of the hour, 2 for the rest."""
    price = catalog.instances.default().lookup("aws", "g6.xlarge", "us-east-1").price_per_hour_usd
    for outage, nodes in ((False, 2.0), (True, 0.75 * 2 + 0.25 * 3)):
        sc = _two_regions(tmp_path, outage)
        specs, tr = runner.prepare(sc)
        down = sc.outage_ticks()
        assert down == ([(30, 45, "us-east-1")] if outage else [])
        b = bound.compute(planner.SpecView.of(specs, 1), tr, down=down)
        assert b.proven
        assert b.usd == pytest.approx(nodes * price, rel=1e-6), outage
        assert b.usd_by_tick[30] == pytest.approx((3 if outage else 2) * price / 60.0, rel=1e-6)
        # Its fleet: two L4 replicas all hour either way (the down node bills but holds none).
        assert dict(b.replica_hours) == pytest.approx({("chat", "L4", "on_demand"): 2.0}), outage
    # The comparison (meridian simulate, bench.simulate) gives its bound the scenario's outage.
    assert runner.run(sc, ["meridian"], jobs=1).bound.usd == pytest.approx(b.usd, rel=1e-9)
