"""What the simulated control loop re-plans, and from what fleet: the initial nodes are up from the
warmup's start, a full solve (when a region is back, and every ``full_solve_interval_s``) moves a
replica left where an incremental re-plan would keep it, and a spot preemption costs no node
beyond its replacement."""

from __future__ import annotations

import pytest
from test_sim_bound import TINY_L4_POOL, even_scenario, tiny_specs, use2_cluster

from meridian import catalog
from meridian.simulate import runner


def test_the_initial_nodes_are_up_through_the_warmup(tmp_path):
    """A fleet that starts with one reserved-tier L4 node (min_nodes 1) and an empty on-demand L4
    pool, below one replica of demand: the replica runs on the node that is there from the start,
    so the measured hour bills that node alone. (The warmup's clusters were once made at the
    measured run's start: their initial nodes were still coming up through the warmup, the replica
    went to an on-demand node and stayed there into the measured hour.)"""
    specs = tiny_specs(tmp_path, "reserved", (TINY_L4_POOL,
                       "    - name: l4-reserved\n      instance_type: g6.xlarge\n      tier: reserved\n      min_nodes: 1\n"
                       "      max_nodes: 1\n      initial_nodes: 1\n" + TINY_L4_POOL))
    sc = even_scenario(tmp_path, "reserved", specs, 0.2)
    cmp = runner.run(sc, ["meridian"], jobs=1, with_bound=False)
    mer = cmp.result("meridian")
    usage = {(u["region"], u["tier"]): u["replica_hours"] for u in mer.replica_hours()}
    assert usage == {("us-east-1", "reserved"): pytest.approx(1.0)}
    assert mer.cost_usd == pytest.approx(cmp.floor.usd_per_hour, rel=1e-6)  # the reserved node's hour, no more


def test_a_replica_moved_away_by_an_outage_comes_back_to_the_paid_node_when_its_region_is_back(tmp_path):
    """The replica runs on the reserved 4-L4 node in us-east-1 (min_nodes 1: paid all along). An
    outage there for the first 12 minutes moves it to an on-demand 4-L4 node in us-east-2. When
    us-east-1 is back, demand has not changed: an incremental re-plan would leave the replica on the
    on-demand node to the end. The plan made when us-east-1's pools are offered again is a full
    solve, so the replica moves back at once (0.12 h on demand), not at the next periodic full
    solve 8 minutes later (0.32 h), and the on-demand node is released."""
    specs = tiny_specs(tmp_path, "back", (TINY_L4_POOL,
                       "    - name: l4x4-reserved\n      instance_type: g6.12xlarge\n      tier: reserved\n"
                       "      min_nodes: 1\n      max_nodes: 1\n      initial_nodes: 1\n"),
                       extra=use2_cluster("l4x4", "g6.12xlarge", 2))
    sc = even_scenario(tmp_path, "back", specs, 0.2, warmup_min=10.0,
                       outages=[{"at_h": 0.0, "duration_h": 0.2, "region": "us-east-1"}])
    mer = runner.run(sc, ["meridian"], jobs=1, with_bound=False).result("meridian")
    usage = {(u["region"], u["tier"]): u["replica_hours"] for u in mer.replica_hours()}
    # On demand from the replacement's start (after the loss is noticed and a node comes up) until
    # the replica is back on the reserved node shortly after us-east-1 returns at 0.2 h.
    assert 0.05 < usage[("us-east-2", "on_demand")] < 0.2, usage
    assert usage[("us-east-1", "reserved")] > 0.7, usage


def test_a_preempted_spot_node_is_replaced_in_its_pool_and_the_clouds_backfill_is_given_back(tmp_path):
    """chat may run wholly on spot: its replicas share one 4-L4 spot node in us-east-1 (at most 2
    nodes), beside an empty on-demand 4-L4 pool in us-east-2. At 0.3 h every spot node of us-east-1
    gets a 2-minute notice: the replacement node is ordered in the same pool at once (the pool goes
    to 2), and when the old node goes the cloud's group re-orders one in its place (target 2). The
    plan waits for the pool's own node (before, with the quota's room taken by those two orders,
    the pool offered nothing and the plan ordered an on-demand node in us-east-2) and the re-ordered
    node is given back in the next round (before, it billed 300 s idle). So the hour bills one spot
    node plus the notice's overlap ($2.04 for a $1.97/h node; before the two fixes $2.89, and $2.30
    with only the first), and nothing in us-east-2."""
    spot_pool = ("    - name: l4x4-spot\n      instance_type: g6.12xlarge\n      tier: spot\n      min_nodes: 0\n"
                 "      max_nodes: 2\n      initial_nodes: 0\n")
    placement = "  placement:\n    clouds: [aws]\n"
    spot = "    spot:\n      allowed: true\n      max_share: 1.0\n      max_share_per_region: 1.0\n"
    specs = tiny_specs(tmp_path, "spot", (TINY_L4_POOL, spot_pool), (placement, placement + spot),
                       extra=use2_cluster("l4x4", "g6.12xlarge", 2))
    sc = even_scenario(tmp_path, "spot", specs, 0.3, spot={"preemptions_per_node_hour": 0.0,
                                                          "waves": [{"at_h": 0.3, "share": 1.0, "region": "us-east-1"}]})
    cmp = runner.run(sc, ["meridian"], jobs=1, with_bound=False)
    mer = cmp.result("meridian")
    assert mer.stats["spot_nodes_preempted"] == 1
    usage = {(u["region"], u["tier"]): u["replica_hours"] for u in mer.replica_hours()}
    assert set(usage) == {("us-east-1", "spot")}, usage
    price = catalog.instances.default().lookup("aws", "g6.12xlarge", "us-east-1").spot_price_per_hour_usd
    assert price < mer.cost_usd < price * (1.0 + 3.0 / 60.0), (mer.cost_usd, price)
