"""The cost floor: the least a fleet keeping the specs' rules can cost, proven by the solver."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from meridian import spec
from meridian.simulate import defaults
from scheduler.control import floor, planner
from scheduler.solver import evaluate, inputs

EXAMPLES = [defaults.examples_dir() / p for p in defaults.DEFAULT_SPECS]


@pytest.fixture(scope="module")
def examples() -> planner.SpecView:
    return planner.SpecView.of(spec.load_files(EXAMPLES), 1)


def _with(specs: planner.SpecView, name: str, **placement) -> planner.SpecView:
    doc = specs.deployments[name]
    s = doc.spec.model_copy(update={"placement": doc.spec.placement.model_copy(update=placement)})
    deps = dict(specs.deployments)
    deps[name] = doc.model_copy(update={"spec": s})
    return dataclasses.replace(specs, deployments=deps)


def _node_price(specs, cluster: str, pool: str) -> float:
    offers = {o.key: o for o in inputs.pools_from_clusters(specs.clusters.values(), specs.policy)}
    return offers[f"{cluster}/{pool}"].price_per_node_hour_usd


def test_examples_floor_is_the_70b_isolation_plus_chat_third_region(examples):
    """reasoning-70b (no spot, 4 H100s, two regions) needs the reserved p5 node in us-east-1 plus the
    cheapest H100 node in another region it may use; chat-8b (three regions, two clouds) fits on their
    spare GPUs and one spot L4 node on GCP. Nothing cheaper keeps those rules."""
    f = floor.compute(examples)
    assert f.proven and not f.unplaced
    reserved = examples.policy.reserved[0].price_per_hour_usd
    other_h100 = min(_node_price(examples, c, p) for c, p in
                     [("aws-euw1", "h100"), ("gcp-usc1", "h100"), ("azure-eus2", "h100")])
    third = min(_node_price(examples, c, "l4-spot") for c in ("gcp-usc1", "gcp-euw4", "gcp-ane1"))
    assert f.usd_per_hour == pytest.approx(reserved + other_h100 + third, abs=0.01)
    regions_70b = {k.split("/")[0] for (d, k) in f.placement if d == "reasoning-70b"}
    assert len(regions_70b) == 2
    assert "embed" not in {d for d, _ in f.placement}  # scales to zero
    # The plan that attains it is a real plan: its nodes cost what the floor says.
    assert sum(_node_price(examples, *k.split("/")) * n for k, n in f.nodes.items()) == \
        pytest.approx(f.usd_per_hour, abs=0.01)


def test_lifting_isolation_lowers_the_floor_to_the_reserved_node(examples):
    """Without the isolation rules everything fits on the already-paid reserved node."""
    relaxed = _with(_with(examples, "reasoning-70b", min_distinct_regions=1), "chat-8b",
                    min_distinct_regions=1, min_distinct_clouds=1)
    f = floor.compute(relaxed)
    assert f.proven
    assert f.usd_per_hour == pytest.approx(examples.policy.reserved[0].price_per_hour_usd, abs=0.01)
    assert f.usd_per_hour < floor.compute(examples).usd_per_hour - 50


def test_floor_is_below_every_rule_keeping_plan_at_real_demand(examples):
    """The floor is a lower bound: the solver's own plans for demands at or above the minimum, in any
    client regions, never cost less."""
    f = floor.compute(examples).usd_per_hour
    from scheduler import autoscaler, solver  # noqa: PLC0415

    pools = inputs.pools_from_clusters(examples.clusters.values(), examples.policy)
    chat_regions = examples.deployments["chat-8b"].spec.sla.client_regions
    for chat_region, n in itertools.product(chat_regions[:3], (2, 6)):
        decisions = {"chat-8b": autoscaler.Decision(n, {chat_region: n}, "test"),
                     "reasoning-70b": autoscaler.Decision(1, {"eu-west": 1}, "test"),
                     "embed": autoscaler.Decision(1, {"ap-northeast": 1}, "test")}
        prob = planner.build_problem(examples, decisions, pools, {})
        result = solver.solve(prob, time_limit_s=5.0)
        assert not result.unplaced
        assert evaluate.cost_per_hour(prob, result.placement) >= f - 1e-6


def test_scale_to_zero_specs_cost_only_their_committed_nodes(examples):
    """With every deployment allowed to scale to zero the floor is what the pools may never go below."""
    deps = {}
    for name, doc in examples.deployments.items():
        scaling = doc.spec.scaling.model_copy(update={"min_replicas": 0, "scale_to_zero": True})
        deps[name] = doc.model_copy(update={"spec": doc.spec.model_copy(update={"scaling": scaling})})
    f = floor.compute(dataclasses.replace(examples, deployments=deps))
    assert f.placement == {}
    assert f.nodes == {"aws-use1/h100": 1}
    assert f.usd_per_hour == pytest.approx(examples.policy.reserved[0].price_per_hour_usd)
    # min_replicas 0 without scale_to_zero still keeps one replica, as the autoscaler does.
    doc = examples.deployments["reasoning-70b"]
    scaling = doc.spec.scaling.model_copy(update={"min_replicas": 0, "scale_to_zero": False})
    deps["reasoning-70b"] = doc.model_copy(update={"spec": doc.spec.model_copy(update={"scaling": scaling})})
    assert floor.minimum_demand(dataclasses.replace(examples, deployments=deps))["reasoning-70b"].replicas == 1


def test_validate_prints_the_floor_and_its_plan(capsys):
    """`meridian validate --cost-floor` prints the floor and the nodes that cost it; JSON carries it
    too; without the Cluster specs it says what is missing and exits 1."""
    import json  # noqa: PLC0415

    from meridian.cli import main as cli  # noqa: PLC0415

    files = [str(p) for p in EXAMPLES]
    assert cli.main(["validate", *files, "--cost-floor"]) == 0
    out = capsys.readouterr().out
    assert "Cost floor: $92.36/h (proven optimal)" in out
    assert "  aws-use1/h100: 1 node(s): chat-8b x1, reasoning-70b x1" in out
    assert cli.main(["validate", *files, "--cost-floor", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] and data["cost_floor"]["proven"]
    assert data["cost_floor"]["nodes"]["aws-use1/h100"] == 1
    deployments_only = [str(defaults.examples_dir() / "deployments.yaml")]
    assert cli.main(["validate", *deployments_only, "--cost-floor"]) == 1
    assert "needs the Cluster specs" in capsys.readouterr().err
    assert cli.main(["validate", *deployments_only]) == 0  # without the flag the same files are valid


def _sla(specs: planner.SpecView, name: str, **sla) -> planner.SpecView:
    doc = specs.deployments[name]
    s = doc.spec.model_copy(update={"sla": doc.spec.sla.model_copy(update=sla)})
    if "always_served_regions" in sla:
        s = s.model_copy(update={"scaling": s.scaling.model_copy(update={"scale_to_zero": False})})
    deps = dict(specs.deployments)
    deps[name] = doc.model_copy(update={"spec": s})
    return dataclasses.replace(specs, deployments=deps)


def test_always_served_regions_raise_the_floor_and_every_unplaceable_deployment_says_why(examples):
    """embed scales to zero (no floor); always serving ap-northeast within a 60 ms TTFT (no paid node
    of the floor's plan is that near) puts a replica near Tokyo in the floor's plan and raises it. A TTFT target no GPU type meets leaves
    chat-8b out, with the nearest miss as the reason (not a bare name)."""
    base = floor.compute(examples)
    served = floor.compute(_sla(examples, "embed", always_served_regions=["ap-northeast"], ttft_p99_ms=60))
    assert served.usd_per_hour > base.usd_per_hour
    offers = {o.key: o for o in inputs.pools_from_clusters(examples.clusters.values(), examples.policy)}
    embed_regions = {offers[k].region for (d, k) in served.placement if d == "embed"}
    assert embed_regions & {"asia-northeast1", "japaneast"}
    impossible = floor.compute(_sla(examples, "chat-8b", ttft_p99_ms=1))
    assert impossible.unplaced == ("chat-8b",)
    assert any(r.startswith("chat-8b: ") and "> TTFT 1 ms" in r and "best is" in r for r in impossible.reasons), \
        impossible.reasons
