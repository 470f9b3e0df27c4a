"""The scheduler's bill from what agents report: pools priced as the solver prices them, owners and
teams from the specs, lost clusters apart, tokens from the routers' reports; and a plan's cost
billing a reserved pool's nodes beyond the commitment on demand, as the bill does."""

from __future__ import annotations

import pytest

from meridian import catalog, cost, spec
from meridian.fleet import models as fm
from meridian.simulate import defaults
from scheduler import testing
from scheduler.control import billing, planner
from scheduler.control import fleet as fleet_mod
from scheduler.solver import evaluate, problem
from scheduler.state import records

EXAMPLES = [defaults.examples_dir() / p for p in defaults.DEFAULT_SPECS]


def _specs() -> planner.SpecView:
    return planner.SpecView.of(spec.load_files(EXAMPLES), 1)


def _report(rid: str, pool: str, gpus: int, deployment: str, served: str = "") -> fm.ReplicaReport:
    return fm.ReplicaReport(rid, deployment, "r1", f"http://{rid}", fm.ReplicaState.READY, pool_id=pool,
                            gpu_count=gpus, served_model_name=served)


def _fleet() -> fleet_mod.FleetView:
    view = fleet_mod.FleetView(lost_after_s=10.0)
    use1 = fm.ClusterIdentity("aws-use1", fm.Cloud.AWS, "us-east-1")
    euw1 = fm.ClusterIdentity("aws-euw1", fm.Cloud.AWS, "eu-west-1")
    view.connect(use1, 0.0)
    view.inventory("aws-use1", [
        testing.gpu_pool("h100", gpu_type="H100", nodes=2, nodes_max=2, gpus_per_node=8, tier=fm.Tier.RESERVED,
                         instance_type="p5.48xlarge", price_per_node_hour_usd=99.0),
        testing.gpu_pool("l4-spot", nodes=2, tier=fm.Tier.SPOT, price_per_node_hour_usd=99.0)], True, 0.0)
    view.report("aws-use1", [_report("big", "h100", 4, "reasoning-70b"),
                             _report("chat", "l4-spot", 1, "chat-8b", "llama-3.1-8b")], True, 0.0)
    view.connect(euw1, 0.0)
    view.inventory("aws-euw1", [testing.gpu_pool("l4", nodes=3)], True, 0.0)
    view.report("aws-euw1", [_report("c2", "l4", 1, "chat-8b")], True, 0.0)
    return view


def test_reported_pools_bill_at_the_solvers_prices_with_owners_from_the_specs():
    """The agent's own price is not the bill's: the reserved p5 pool bills the policy's committed
    $31.46 for its first node and the catalog's on-demand price for the second, the spot pool the
    catalog's spot price; replicas are their served model's and their deployment's team's."""
    specs = _specs()
    view = _fleet()
    got = billing.bill_now(view.snapshot(1.0), specs)
    offers = catalog.instances.default()
    p5 = offers.lookup("aws", "p5.48xlarge", "us-east-1").price_per_hour_usd
    g6 = offers.lookup("aws", "g6.xlarge", "us-east-1").spot_price_per_hour_usd
    l4_euw1 = offers.lookup("aws", "g6.xlarge", "eu-west-1").price_per_hour_usd
    b = got.reachable
    assert b.usd == pytest.approx(31.46 + p5 + 2 * g6 + 3 * l4_euw1)
    assert b.shares_usd + b.idle_usd == pytest.approx(b.usd)
    teams = {r.key: r.gpus for r in cost.group(b.parts, "team")}
    assert teams == {"research": 4, "assistant": 2}
    models = {r.key for r in cost.group(b.parts, "model")}
    assert models == {"llama-3.1-70b", "llama-3.1-8b"}  # the 70b's served name comes from its spec
    assert got.lost_clusters == () and got.unreachable.usd == 0


def test_a_lost_clusters_pools_are_apart_from_the_bill():
    """A cluster silent past lost_after_s leaves the bill; its last reported pools are given apart."""
    specs = _specs()
    view = _fleet()
    view.seen("aws-use1", 20.0)
    view.sweep(20.0)
    got = billing.bill_now(view.snapshot(20.0), specs)
    l4_euw1 = catalog.instances.default().lookup("aws", "g6.xlarge", "eu-west-1").price_per_hour_usd
    assert got.lost_clusters == ("aws-euw1",)
    assert got.unreachable.usd == pytest.approx(3 * l4_euw1)
    assert {line.pool.where.cluster for line in got.reachable.pools} == {"aws-use1"}


def test_tokens_per_second_from_traffic():
    """Tokens served per second are the routers' request rates x tokens per request, per model."""
    demand = [records.Demand("m", "na-east", 2.0, 0.0, 0, 0.0, 500.0, 100.0, 0.0),
              records.Demand("m", "eu-west", 1.0, 0.0, 0, 0.0, 200.0, 50.0, 0.0)]
    assert billing.tokens_per_s(demand) == {"m": cost.Tokens(1200.0, 250.0)}


def test_a_plans_cost_bills_reserved_nodes_beyond_the_commitment_on_demand():
    """Two reserved p5 nodes running under a one-node commitment: the plan's cost is what the bill
    says, the committed price for one node and the on-demand price for the other."""
    specs = _specs()
    pool = testing.gpu_pool("h100", gpu_type="H100", nodes=2, nodes_max=2, gpus_per_node=8, tier=fm.Tier.RESERVED,
                            instance_type="p5.48xlarge")
    pool = fm.GpuPool(**{**pool.__dict__, "nodes_min": 2})
    offer = problem.PoolOffer.of("aws-use1", "aws", "us-east-1", pool, price_per_node_hour_usd=31.46)
    prob = planner.build_problem(specs, {}, [offer], {})
    p5 = catalog.instances.default().lookup("aws", "p5.48xlarge", "us-east-1").price_per_hour_usd
    assert evaluate.cost_per_hour(prob, problem.Placement()) == pytest.approx(31.46 + p5)
