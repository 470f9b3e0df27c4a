"""The one cost module: bill = sum of node-hours x price, shares + idle = bill, reserved nodes beyond
the commitment on demand, spot prices, a window with nodes joining and leaving, tokens, the printed
figures adding up, one saving figure."""

from __future__ import annotations

import ast
import math
import pathlib
import re

import pytest

import meridian.cost
from meridian import catalog, cost, spec

ROOT = pathlib.Path(__file__).resolve().parents[3]
CHAT = cost.Owner("llama-3.1-8b", "chat-8b", "assistant")
BIG = cost.Owner("llama-3.1-70b", "reasoning-70b", "research")


def where(key: str, tier: str = "on_demand", cloud: str = "aws", gpu_type: str = "L4") -> cost.Where:
    cluster, pool = key.split("/")
    return cost.Where(key, cluster, cloud, "us-east-1", pool, gpu_type, tier)


def l4(nodes: int, key: str = "c1/l4", price: float = 0.80, **kw) -> cost.Pool:
    return cost.Pool(where(key, **kw), 1, nodes, cost.Price(price))


def h100(nodes: int, key: str = "c1/h100", committed: int | None = 1) -> cost.Pool:
    return cost.Pool(where(key, "reserved", gpu_type="H100"), 8, nodes,
                     cost.Price(31.46, committed, 55.04 if committed is not None else 0.0))


def test_bill_is_the_sum_of_node_hours_times_price():
    """Every node of every pool bills at its price, idle or busy, provisioning included."""
    pools = [l4(3), l4(2, "c2/l4", 0.70, cloud="gcp"),
             cost.Pool(where("c1/a10"), 1, 4, cost.Price(1.25), nodes_pending=2)]
    b = cost.bill(pools, [cost.Replica("r1", "c1/l4", 1, CHAT)])
    assert b.usd == pytest.approx(3 * 0.80 + 2 * 0.70 + 4 * 1.25)
    assert b.nodes == 9 and b.gpus == 9 and b.gpus_held == 1
    assert [line.usd for line in b.pools] == pytest.approx([4 * 1.25, 3 * 0.80, 2 * 0.70])


def test_shares_plus_idle_is_the_bill_pool_by_pool():
    """A replica's share is its GPUs x its pool's price per GPU; what nobody holds is the idle part,
    and shares + idle is each pool's bill and the whole bill."""
    pools = [l4(4), h100(1, committed=None)]
    reps = [cost.Replica("a", "c1/l4", 1, CHAT), cost.Replica("b", "c1/l4", 1, CHAT),
            cost.Replica("c", "c1/h100", 4, BIG), cost.Replica("d", "c1/h100", 1, CHAT)]
    b = cost.bill(pools, reps)
    shares = {(p.where.key, p.owner): p.usd for p in b.parts if p.owner is not None}
    assert shares == pytest.approx({("c1/l4", CHAT): 1.60, ("c1/h100", BIG): 4 * 31.46 / 8,
                                    ("c1/h100", CHAT): 31.46 / 8})
    idle = sorted((p.where.key, p.gpus, p.usd) for p in b.parts if p.owner is None)
    assert idle == [("c1/h100", 3, pytest.approx(3 * 31.46 / 8)), ("c1/l4", 2, pytest.approx(1.60))]
    for line in b.pools:
        mine = sum(p.usd for p in b.parts if p.where == line.pool.where)
        assert mine == pytest.approx(line.usd, abs=1e-12)
    assert b.shares_usd + b.idle_usd == pytest.approx(b.usd, abs=1e-12)
    by_model = [(r.key, r.gpus, r.usd) for r in cost.group(b.parts, "model")]
    assert by_model == [("llama-3.1-70b", 4, pytest.approx(4 * 31.46 / 8)),
                        ("llama-3.1-8b", 3, pytest.approx(1.60 + 31.46 / 8))]
    assert sum(r.usd for r in cost.group(b.parts, "team")) + b.idle_usd == pytest.approx(b.usd)
    for dim in cost.POOL_DIMS:
        rows = cost.group(b.parts, dim)
        assert sum(r.usd for r in rows) == pytest.approx(b.usd)
        assert sum(r.shares_usd + r.idle_usd for r in rows) == pytest.approx(b.usd)


def test_reserved_nodes_beyond_the_commitment_bill_on_demand():
    """A reserved pool pays the committed price up to the commitment and on demand beyond; at or below
    the commitment every node pays the committed price; a replica's share uses the pool's mean per GPU."""
    assert h100(1).price.usd_per_hour(1) == pytest.approx(31.46)
    assert h100(3).price.usd_per_hour(3) == pytest.approx(31.46 + 2 * 55.04)
    assert cost.Price(31.46, 2, 55.04).usd_per_hour(1) == pytest.approx(31.46)
    b = cost.bill([h100(2)], [cost.Replica("r", "c1/h100", 4, BIG)])
    assert b.usd == pytest.approx(31.46 + 55.04)
    assert b.shares_usd == pytest.approx(4 * (31.46 + 55.04) / 16)
    assert b.idle_usd == pytest.approx(12 * (31.46 + 55.04) / 16)


def test_node_price_follows_catalog_policy_and_commitment():
    """Spot pools pay the catalog's (or the override's) spot price; a reserved pool under a commitment
    the committed price with the on-demand price beyond; an instance unknown to the catalog the
    agent's price."""
    loaded = spec.load_files([ROOT / "examples" / "capacity-policy.yaml"])
    policy = loaded.of_kind("CapacityPolicy")[0].spec
    offers = catalog.instances.default()
    g6 = offers.lookup("aws", "g6.xlarge", "us-east-1")
    p5 = offers.lookup("aws", "p5.48xlarge", "us-east-1")
    g2 = offers.lookup("gcp", "g2-standard-8", "us-central1")
    assert cost.node_price("aws", "us-east-1", "g6.xlarge", "spot", g6, policy) == cost.Price(g6.spot_price_per_hour_usd)
    assert cost.node_price("aws", "us-east-1", "g6.xlarge", "on_demand", g6, policy) == cost.Price(g6.price_per_hour_usd)
    assert cost.node_price("gcp", "us-central1", "g2-standard-8", "on_demand", g2, policy) == cost.Price(0.70)
    assert cost.node_price("gcp", "us-central1", "g2-standard-8", "spot", g2, policy) == \
        cost.Price(g2.spot_price_per_hour_usd)  # the override names no spot price
    assert cost.node_price("aws", "us-east-1", "p5.48xlarge", "reserved", p5, policy) == \
        cost.Price(31.46, 1, p5.price_per_hour_usd)
    assert cost.node_price("aws", "us-east-1", "p5.48xlarge", "on_demand", p5, policy) == cost.Price(p5.price_per_hour_usd)
    assert cost.node_price("aws", "us-east-1", "x9.huge", "on_demand", None, policy, reported_usd=3.5) == cost.Price(3.5)


def test_a_window_integrates_nodes_joining_and_leaving():
    """Over a window each observed bill holds until the next observation: 2 nodes for 30 min, 4 for
    15 min, 1 for the last 15 min bill 2x0.5 + 4x0.25 + 1x0.25 node-hours x price; shares and idle
    integrate the same way, and tokens served are counted beside them."""
    t0 = 1_000_000.0
    m = cost.Meter()
    rep = [cost.Replica("r1", "c1/l4", 1, CHAT)]
    m.observe(t0, cost.bill([l4(2)], rep), {"llama-3.1-8b": cost.Tokens(10.0, 5.0)})
    m.observe(t0 + 1800, cost.bill([l4(4)], rep + [cost.Replica("r2", "c1/l4", 1, CHAT)]))
    m.observe(t0 + 2700, cost.bill([l4(1)], rep))
    w = m.window(t0 + 3600)
    node_hours = 2 * 0.5 + 4 * 0.25 + 1 * 0.25
    assert (w.start_s, w.end_s, w.hours) == (t0, t0 + 3600, pytest.approx(1.0))
    assert w.usd == pytest.approx(node_hours * 0.80)
    assert w.pools[0].node_hours == pytest.approx(node_hours)
    assert w.shares_usd == pytest.approx((1 * 0.5 + 2 * 0.25 + 1 * 0.25) * 0.80)
    assert w.shares_usd + w.idle_usd == pytest.approx(w.usd)
    assert w.usd_per_hour == pytest.approx(w.usd)
    assert w.tokens["llama-3.1-8b"].total == pytest.approx(15.0 * 1800)
    assert m.window().end_s == t0 + 2700 and m.window().usd == pytest.approx((2 * 0.5 + 4 * 0.25) * 0.80)
    doc = cost.document.of_window(w)
    assert doc["usd"] == pytest.approx(w.usd) and doc["node_hours"] == pytest.approx(node_hours)
    assert doc["per_million_tokens"]["fleet"]["usd_per_million_tokens"] == pytest.approx(w.usd / 27000 * 1e6)


def test_more_gpus_held_than_reported_leaves_no_idle_and_unknown_pools_are_listed():
    """Replicas holding more GPUs than the pool reports split its bill (no idle part, shares = bill); a
    replica on a pool not in the inventory has no price and is listed apart."""
    reps = [cost.Replica("a", "c1/l4", 1, CHAT), cost.Replica("b", "c1/l4", 1, CHAT),
            cost.Replica("x", "c9/gone", 1, CHAT)]
    b = cost.bill([l4(1)], reps)
    assert b.usd == pytest.approx(0.80) and b.shares_usd == pytest.approx(0.80) and b.idle_usd == 0
    assert [r.replica_id for r in b.unpriced] == ["x"]


def test_cost_per_million_tokens_in_the_document():
    """Each model's share and the whole bill over the tokens served per hour; none served: no figure."""
    b = cost.bill([l4(2)], [cost.Replica("a", "c1/l4", 1, CHAT), cost.Replica("c", "c1/l4", 1, BIG)])
    doc = cost.document.of_bill(b, at_s=0.0, tokens_per_s={"llama-3.1-8b": cost.Tokens(300.0, 100.0)})
    units = {u["model"]: u for u in doc["per_million_tokens"]["models"]}
    assert units["llama-3.1-8b"]["usd_per_million_tokens"] == pytest.approx(0.80 / (400 * 3600) * 1e6)
    assert units["llama-3.1-70b"]["usd_per_million_tokens"] is None
    assert doc["per_million_tokens"]["fleet"]["usd_per_million_tokens"] == pytest.approx(1.60 / (400 * 3600) * 1e6)
    assert doc["usd_per_hour"] == pytest.approx(doc["shares_usd_per_hour"] + doc["idle_usd_per_hour"])


def test_printed_columns_add_up_to_the_printed_bill():
    """Rounded to cents, each table's $ column and the headline's shares and idle add up to the printed
    bill (largest remainder), for amounts whose plain rounding would not."""
    pools = [cost.Pool(where(f"c{i}/l4"), 1, 3, cost.Price(1 / 3)) for i in range(3)]
    reps = [cost.Replica(f"r{i}", f"c{i}/l4", 1, cost.Owner(f"m{i}", f"d{i}", "t")) for i in range(3)]
    doc = cost.document.of_bill(cost.bill(pools, reps), at_s=0.0)
    bill, shares, idle = cost.text.split(doc)
    assert (bill, round(shares + idle, 2)) == (3.00, 3.00) and [round(x / 3, 2) for x in (1, 2)] == [0.33, 0.67]
    head = "\n".join(cost.text.headline(doc))
    assert f"replicas' shares: ${shares:,.2f}/h" in head and f"idle GPUs on paid nodes: ${idle:,.2f}/h" in head
    for dim in ("model", "team", "cloud", "cluster"):
        lines = [re.split(r"\s{2,}", line.strip()) for line in cost.text.table(doc, dim).splitlines()[2:]
                 if line.strip() and not line.startswith("-")]
        column = [float(cells[2]) for cells in lines[:-1]]
        assert lines[-1][0] == "bill" and float(lines[-1][2]) == bill, dim
        assert round(sum(column), 2) == bill, (dim, column)
    assert cost.text.apportion([1 / 3] * 3) == [0.34, 0.33, 0.33]
    assert cost.text.apportion([0.333, 0.333], total=0.67) == [0.34, 0.33]


def test_one_saving_figure():
    """Saving is (baseline - candidate) / baseline: its denominator is the baseline's cost."""
    assert cost.saving(100.0, 89.4) == pytest.approx(0.106)
    assert cost.saving(89.4, 100.0) == pytest.approx(-0.118568, rel=1e-5)
    assert math.isnan(cost.saving(0.0, 1.0))
    assert cost.SAVING_DEFINITION == "(baseline - meridian) / baseline"


def test_bad_inputs_are_refused_with_the_field_named():
    """A negative price or node count, or a pool listed twice, is refused naming what is wrong."""
    with pytest.raises(ValueError, match="prices must be >= 0"):
        cost.Price(-1.0)
    with pytest.raises(ValueError, match="nodes and gpus_per_node"):
        cost.Pool(where("c1/l4"), 1, -1, cost.Price(1.0))
    with pytest.raises(ValueError, match="listed twice"):
        cost.bill([l4(1), l4(2)], [])
    with pytest.raises(ValueError, match="unknown dimension"):
        cost.group([], "colour") or cost.Part(where("c1/l4"), None, 0, 0, 0).key("colour")


def test_the_cost_module_imports_no_component():
    """meridian/cost is kernel: no module of it imports scheduler, router, agents or runtime_adapter."""
    root = pathlib.Path(meridian.cost.__file__).parent
    offenders = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}: {n}" for n in names
                          if n.split(".")[0] in {"scheduler", "router", "agents", "runtime_adapter"}]
    assert not offenders
    assert all(hasattr(meridian.cost, name) for name in meridian.cost.__all__)
