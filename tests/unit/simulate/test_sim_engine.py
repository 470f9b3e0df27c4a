"""Whole runs on small scenarios: deterministic per seed, faults hurt whom they should, and each
policy places replicas by its own rule."""

from __future__ import annotations

import pytest

from meridian.simulate import engine, metrics, policies, runner, trace


def _run(sc, name):
    return engine.run(sc, sc.load_specs(), trace.build(sc), policies.get(name))


def _comparable(result) -> dict:
    d = result.to_dict()
    d["stats"] = {k: v for k, v in d["stats"].items() if k not in ("wall_s", "plan_s")}
    return d


def _usage(result) -> list[dict]:
    return result.replica_hours()


@pytest.fixture(scope="module")
def all_policies():
    """Every policy on one small scenario with a spot wave (one run each; shared by the rule tests)."""
    from meridian.simulate import defaults, scenario  # noqa: PLC0415

    sc = scenario.parse({
        "name": "rules", "specs": list(defaults.DEFAULT_SPECS), "hours": 2.0, "start_utc_hour": 14.0, "seed": 5,
        "warmup_min": 20.0, "fidelity": {"samples_per_stream": 4},
        "traffic": [
            {"deployment": "chat-8b", "peak_rps": {"na-east": 2.0, "eu-west": 1.5, "ap-south": 0.5}},
            {"deployment": "reasoning-70b", "peak_rps": {"na-east": 0.8, "eu-west": 0.5}},
            {"deployment": "embed", "peak_rps": {"na-east": 10.0, "eu-west": 8.0}},
        ],
        "spot": {"waves": [{"at_h": 1.0, "region": "eu-west-1", "share": 1.0}]},
    }, defaults.examples_dir(), "rules")
    runner.quiet_components()
    cmp = runner.run(sc, policies.DEFAULT, jobs=1)
    return {r.policy: r for r in cmp.results}


def test_same_seed_same_result(make_scenario):
    """Two runs of one policy on one scenario and seed give the same result, to the last request."""
    sc = make_scenario(spot={"waves": [{"at_h": 0.5, "region": "eu-west-1", "share": 0.8}]})
    a, b = _run(sc, "meridian"), _run(sc, "meridian")
    assert _comparable(a) == _comparable(b)
    assert a.total.requests > 10_000


def test_region_outage_hurts_the_single_region_baseline(make_scenario):
    """An outage of the single region the on-demand baseline lives in lowers its SLO attainment
    (requests fail for the hour), while Meridian, spread over regions, keeps serving."""
    calm = make_scenario()
    stormy = make_scenario(outages=[{"at_h": 0.5, "duration_h": 1.0, "region": "us-east-1"}])
    base_calm, base_out = _run(calm, "od-cheapest-region"), _run(stormy, "od-cheapest-region")
    assert any("us-east-1" in n for n in base_out.notes)
    assert base_out.total.attainment < base_calm.total.attainment - 0.2
    assert base_out.stats["failed_no_replica"] > 0
    meridian_out = _run(stormy, "meridian")
    assert meridian_out.total.attainment > base_out.total.attainment + 0.2


def test_spot_preemptions_cost_money_or_slo(make_scenario):
    """Against a day without any preemption, a day of preemption waves makes the spot-heavy
    SkyServe-like policy pay more or meet the SLO less (replacement nodes, lost replicas)."""
    calm = make_scenario(spot={"preemptions_per_node_hour": 0.0})
    waves = [{"at_h": h, "region": r, "share": 1.0} for h in (0.25, 0.75, 1.25, 1.75)
             for r in ("eu-west-1", "us-east-1", "us-central1", "europe-west4", "ap-south-1", "japaneast",
                       "westeurope", "asia-northeast1")]
    stormy = make_scenario(spot={"preemptions_per_node_hour": 0.5, "waves": waves})
    quiet, hit = _run(calm, "skyserve"), _run(stormy, "skyserve")
    assert quiet.stats["spot_nodes_preempted"] == 0
    assert hit.stats["spot_nodes_preempted"] > 0
    assert hit.cost_usd > quiet.cost_usd or hit.total.attainment < quiet.total.attainment


def test_single_region_baseline_stays_on_demand_in_one_region(all_policies):
    """od-cheapest-region runs every replica in one region and never on spot."""
    rows = _usage(all_policies["od-cheapest-region"])
    assert rows
    assert len({r["region"] for r in rows}) == 1
    assert all(r["tier"] != "spot" for r in rows)


def test_multi_region_baseline_never_uses_spot_and_keeps_isolation(all_policies):
    """od-multi-region never runs a replica on spot, and keeps reasoning-70b in two regions."""
    rows = _usage(all_policies["od-multi-region"])
    assert all(r["tier"] != "spot" for r in rows)
    assert len({r["region"] for r in rows if r["deployment"] == "reasoning-70b"}) >= 2


def test_skyserve_like_puts_spot_allowed_models_on_spot_only_where_allowed(all_policies):
    """The SkyServe-like policy runs chat-8b and embed on spot, and reasoning-70b (spot not allowed)
    on on-demand or reserved capacity only."""
    rows = _usage(all_policies["skyserve"])
    spot = {r["deployment"] for r in rows if r["tier"] == "spot"}
    assert {"chat-8b", "embed"} & spot
    assert "reasoning-70b" not in spot


def test_meridian_respects_spot_rules_and_isolation(all_policies):
    """Meridian (and its round-robin twin) never put reasoning-70b on spot and keep it in two regions."""
    for name in ("meridian", "round-robin"):
        rows = _usage(all_policies[name])
        assert not [r for r in rows if r["deployment"] == "reasoning-70b" and r["tier"] == "spot"]
        assert len({r["region"] for r in rows if r["deployment"] == "reasoning-70b"}) >= 2


def test_round_robin_routes_meridians_placement_without_latency_awareness(all_policies):
    """round-robin uses Meridian's placement policy with the round_robin router policy and no
    max_rtt_ms reach; both serve the same trace (same number of requests)."""
    m, rr = all_policies["meridian"], all_policies["round-robin"]
    assert (m.routing, rr.routing) == ("latency", "round_robin")
    # Region-unaware, as a plain global load balancer: Mumbai's chat goes to replicas an ocean away
    # (and saturates the small ones the latency policy keeps for nearby clients), so fewer requests
    # meet the SLA than with the latency policy on the very same replicas.
    assert rr.regions["ap-south"].attainment < m.regions["ap-south"].attainment - 0.05
    assert rr.total.attainment < m.total.attainment
    assert m.placement == rr.placement
    assert m.total.requests == pytest.approx(rr.total.requests, rel=1e-9)


def test_rule_keeping_policies_cost_at_least_the_specs_floor(all_policies):
    """The cost floor is a lower bound on every policy that keeps the specs' rules: Meridian, its
    round-robin twin and od-multi-region each bill at least the floor per hour (od-cheapest-region lifts
    isolation, so the floor does not bind it)."""
    from meridian import spec  # noqa: PLC0415
    from meridian.simulate import defaults  # noqa: PLC0415
    from scheduler.control import floor, planner  # noqa: PLC0415

    specs = planner.SpecView.of(spec.load_files([defaults.examples_dir() / p for p in defaults.DEFAULT_SPECS]), 1)
    f = floor.compute(specs)
    assert f.proven
    for name in ("meridian", "round-robin", "od-multi-region"):
        assert all_policies[name].cost_per_hour_usd >= f.usd_per_hour, name


def test_requests_served_beyond_max_rtt_miss_their_slo_and_are_named_so(all_policies):
    """Region-unaware round robin sends chat-8b's requests across oceans: beyond its 90 ms max_rtt_ms
    they miss the SLO whatever their TTFT, counted by cause per client region; Meridian's routing
    keeps steady-state requests within reach."""
    rr, meridian = all_policies["round-robin"], all_policies["meridian"]
    beyond = sum(c.steady.get("max_rtt", 0.0) for (d, _), c in rr.cells.items() if d == "chat-8b")
    assert beyond > 0
    assert all(c.steady.get("max_rtt", 0.0) == 0.0 for (d, _), c in meridian.cells.items() if d == "chat-8b")
    assert any("served beyond max_rtt_ms" in v.why for v in metrics.region_view(rr))
