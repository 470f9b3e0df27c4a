"""Each spec kind's rules, including the cross-field ones, on small documents."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import jsonschema
import pytest
import yaml

from meridian import spec

DEPLOYMENT = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: assistant}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: llama}
  resources: {gpu_types: [L4, H100]}
  sla: {ttft_p99_ms: 800, tpot_p99_ms: 100, client_regions: [na-east, eu-west]}
"""


def _deployment(**patch) -> str:
    doc = yaml.safe_load(DEPLOYMENT)
    for dotted, value in patch.items():
        node = doc["spec"]
        *parents, leaf = dotted.split("__")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return yaml.safe_dump(doc)


def _errors(text: str) -> list[str]:
    with pytest.raises(spec.SpecError) as info:
        spec.load_text(text, "t.yaml")
    return [f"{i.path}: {i.message}" for i in info.value.issues]


def test_minimal_deployment_gets_sane_defaults():
    """A minimal deployment validates and fills documented defaults."""
    (loaded,) = spec.load_text(_deployment()).documents
    d = loaded.doc
    assert d.spec.runtime.engine == "sglang" and d.spec.runtime.mem_fraction_static == 0.88
    assert d.spec.scaling.min_replicas == 1 and d.spec.scaling.max_replicas == 10
    assert d.spec.placement.spot.allowed is False
    assert d.spec.tp_size_for("L4") == 1


def test_min_replicas_must_not_exceed_max():
    """min_replicas > max_replicas is rejected on the min_replicas field."""
    assert _errors(_deployment(scaling__min_replicas=5, scaling__max_replicas=2)) == [
        "spec.scaling.min_replicas: min_replicas (5) must be <= max_replicas (2)"]


@pytest.mark.parametrize("share", [-0.1, 1.01])
def test_spot_share_must_lie_in_unit_interval(share):
    """placement.spot.max_share outside [0, 1] is rejected."""
    (err,) = _errors(_deployment(placement__spot={"allowed": True, "max_share": share}))
    assert err.startswith("spec.placement.spot.max_share:")


def test_a_spot_hedge_needs_spot_allowed():
    """placement.spot.hedge without spot allowed is rejected on the field."""
    assert _errors(_deployment(placement__spot={"hedge": True})) == [
        "spec.placement.spot.hedge: hedge guards spot replicas against preemption: it needs "
        "placement.spot.allowed: true (on-demand replicas need no hedge)"]
    (loaded,) = spec.load_text(_deployment(placement__spot={"allowed": True, "hedge": True})).documents
    assert loaded.doc.spec.placement.spot.hedge is True


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_spot_share_bounds_are_valid(share):
    """0 and 1 are valid spot shares."""
    spec.load_text(_deployment(placement__spot={"allowed": True, "max_share": share}))


def test_gpu_type_must_exist_in_catalog():
    """An unknown GPU type is rejected with the closest catalog name."""
    assert _errors(_deployment(resources__gpu_types=["A100-80G"])) == [
        "spec.resources.gpu_types.0: unknown GPU type 'A100-80G'; did you mean 'A100-80GB'?"]


def test_regions_must_exist_in_latency_map():
    """Unknown client and cloud regions are rejected; a client region cannot stand for a cloud region."""
    errs = _errors(_deployment(sla__client_regions=["mars-1"], placement__regions=["eu-west"]))
    assert any(e.startswith("spec.sla.client_regions.0: unknown region 'mars-1'") for e in errs)
    assert "spec.placement.regions.0: 'eu-west' is a client region; a cloud region is needed here" in errs
    assert len(errs) == 2


def test_latency_map_regions_count_for_other_documents():
    """A region added by a LatencyMap in the same set is valid in every other document."""
    extra = "apiVersion: meridian/v1\nkind: LatencyMap\nmetadata: {name: m}\nspec:\n  regions:\n" \
            "    - {name: za-south, latitude: -26.2, longitude: 28.0}\n"
    docs = spec.load_texts([("d.yaml", _deployment(sla__client_regions=["za-south"])), ("m.yaml", extra)])
    assert docs.context.latency_map.rtt_ms("za-south", "eu-west-1") > 100
    with pytest.raises(spec.SpecError, match="unknown region 'za-south'"):
        spec.load_text(_deployment(sla__client_regions=["za-south"]))


POLICY = """
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: p}
spec:
  clouds: [{name: aws}]
  priority_classes:
    - {name: critical, value: 1000}
    - {name: standard, value: 100}
"""


def test_a_priority_class_the_policy_does_not_define_is_refused():
    """Beside a capacity policy that lists priority classes, a deployment naming another class is an
    error at its line with the nearest valid name (a typo used to pass and leave the deployment at
    the default priority); alone, or with a policy that lists none, it is not checked."""
    typo = _deployment(priority_class="crtical")
    with pytest.raises(spec.SpecError) as info:
        spec.load_texts([("d.yaml", typo), ("p.yaml", POLICY)])
    [issue] = info.value.issues
    assert (issue.file, issue.path) == ("d.yaml", "spec.priority_class")
    assert "unknown priority class 'crtical'; did you mean 'critical'?" in issue.message
    assert issue.line == typo.splitlines().index("  priority_class: crtical") + 1
    spec.load_texts([("d.yaml", _deployment(priority_class="critical")), ("p.yaml", POLICY)])
    spec.load_text(typo)


TEAMS_POLICY = """
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: p}
spec:
  clouds: [{name: aws}]
  teams:
    - {name: assistant, max_gpus: 8}
    - {name: research}
"""


def test_a_team_the_policy_does_not_list_is_refused():
    """Beside a policy that lists teams, a deployment of another team is an error at its line with
    the nearest listed name: a typo used to pass and escape the team's GPU quota and budget. A
    team listed by name alone (no limits) is valid; with a policy that lists no teams, or with no
    policy, it is not checked."""
    typo = _deployment().replace("team: assistant", "team: asistant")
    with pytest.raises(spec.SpecError) as info:
        spec.load_texts([("d.yaml", typo), ("p.yaml", TEAMS_POLICY)])
    [issue] = info.value.issues
    assert (issue.file, issue.path) == ("d.yaml", "metadata.team")
    assert issue.line == next(i for i, line in enumerate(typo.splitlines(), 1) if "team: asistant" in line)
    assert "unknown team 'asistant'; did you mean 'assistant'?" in issue.message
    spec.load_texts([("d.yaml", _deployment().replace("team: assistant", "team: research")), ("p.yaml", TEAMS_POLICY)])
    spec.load_texts([("d.yaml", typo), ("p.yaml", POLICY)])
    spec.load_text(typo)


def test_the_team_must_be_listed_in_the_policy_in_use():
    """With several policies the scheduler runs under the one named ``default`` and ignores the
    others, so a team only another policy lists escapes the quotas all the same: refused."""
    default = TEAMS_POLICY.replace("metadata: {name: p}", "metadata: {name: default}").replace(
        "    - {name: research}\n", "")
    other = TEAMS_POLICY.replace("metadata: {name: p}", "metadata: {name: other}").replace(
        "    - {name: assistant, max_gpus: 8}\n", "")
    research = _deployment().replace("team: assistant", "team: research")
    with pytest.raises(spec.SpecError, match="unknown team 'research'"):
        spec.load_texts([("d.yaml", research), ("a.yaml", default), ("b.yaml", other)])
    spec.load_texts([("d.yaml", _deployment()), ("a.yaml", default), ("b.yaml", other)])


RESERVED_POLICY = """
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: p}
spec:
  clouds: [{name: aws}]
  reserved:
    - {cloud: aws, region: us-east-1, instance_type: p5.48xlarge, nodes: 1, price_per_hour_usd: 60}
"""

CLUSTER_USE1 = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: use1}
spec:
  cloud: aws
  region: us-east-1
  auth: {token_env: T}
  pools:
    - {name: h100, instance_type: p5.48xlarge, tier: TIER}
    - {name: l4, instance_type: g6.xlarge, tier: reserved}
"""


def test_a_reserved_commitment_no_pool_takes_is_refused():
    """A commitment that no reserved pool of the set's clusters in its region matches is paid every
    hour and serves nothing (the pool declared on-demand, or the instance type mistyped): an error at
    the commitment naming the reserved pools there. A set without clusters in that region is not
    checked (the agents there may carry their own cluster files)."""
    with pytest.raises(spec.SpecError) as info:
        spec.load_texts([("p.yaml", RESERVED_POLICY), ("c.yaml", CLUSTER_USE1.replace("TIER", "on_demand"))])
    [issue] = info.value.issues
    assert (issue.file, issue.path) == ("p.yaml", "spec.reserved.0.instance_type")
    assert issue.line == RESERVED_POLICY.splitlines().index(
        "    - {cloud: aws, region: us-east-1, instance_type: p5.48xlarge, nodes: 1, price_per_hour_usd: 60}") + 1
    assert issue.message == ("no reserved-tier pool of p5.48xlarge in aws/us-east-1 takes this commitment (1 node(s) "
                             "paid every hour, serving nothing); reserved pools of the clusters there: use1/l4 (g6.xlarge)")
    spec.load_texts([("p.yaml", RESERVED_POLICY), ("c.yaml", CLUSTER_USE1.replace("TIER", "reserved"))])
    spec.load_texts([("p.yaml", RESERVED_POLICY),
                     ("c.yaml", CLUSTER_USE1.replace("TIER", "on_demand").replace("us-east-1", "us-west-2"))])


def test_the_declared_requests_must_fit_the_context():
    """With runtime.context_length, a mean request and the p99 prompt must fit in it (the replicas
    refuse longer ones); an embedding has no output tokens to count."""
    assert any("workload.prompt_tokens_mean: a mean request (8000 prompt + 256 output tokens) does not fit "
               "runtime.context_length (8192)" in e
               for e in _errors(_deployment(runtime__context_length=8192, workload__prompt_tokens_mean=8000)))
    assert any("workload.prompt_tokens_p99: prompt_tokens_p99 (9000) exceeds runtime.context_length (8192)" in e
               for e in _errors(_deployment(runtime__context_length=8192, workload__prompt_tokens_p99=9000)))
    spec.load_text(_deployment(runtime__context_length=8192, workload__prompt_tokens_mean=7000))
    spec.load_text(_deployment(runtime__context_length=512, runtime__is_embedding=True, sla__tpot_p99_ms=None,
                               workload__prompt_tokens_mean=512))


def test_model_must_fit_each_allowed_gpu_type():
    """A 70B model on one L4 is rejected with the memory it needs."""
    text = _deployment(model={"source": "meta-llama/Llama-3.1-70B-Instruct", "served_name": "big"},
                       resources={"gpu_types": ["L4"]})
    (err,) = _errors(text)
    assert "does not fit" in err and "132 GiB" in err


def test_gpus_by_type_sets_tensor_parallelism():
    """A 70B model takes 4 H100s or 8 A100-80GBs per replica; tp follows the GPU count."""
    text = _deployment(model={"source": "meta-llama/Llama-3.1-70B-Instruct", "served_name": "big"},
                       resources={"gpus_per_replica": 4, "gpu_types": ["H100", "A100-80GB"],
                                  "gpus_by_type": {"A100-80GB": 8}})
    d = spec.load_text(text).documents[0].doc
    assert (d.spec.tp_size_for("H100"), d.spec.tp_size_for("A100-80GB")) == (4, 8)


def test_generative_model_needs_tpot_and_embedding_does_not():
    """tpot_p99_ms is required for generative models only."""
    assert _errors(_deployment(sla={"ttft_p99_ms": 500, "client_regions": ["na-east"]})) == [
        "spec.sla.tpot_p99_ms: a generative model needs tpot_p99_ms"]
    spec.load_text(_deployment(sla={"ttft_p99_ms": 500, "client_regions": ["na-east"]},
                               runtime={"is_embedding": True}))


def test_scale_to_zero_needs_min_zero_and_engine_flags_are_owned():
    """scale_to_zero with min_replicas > 0 and extra_args overriding owned flags are errors."""
    assert _errors(_deployment(scaling__scale_to_zero=True)) == [
        "spec.scaling.scale_to_zero: scale_to_zero needs min_replicas: 0 (got 1)"]
    (err,) = _errors(_deployment(runtime={"extra_args": ["--port=1"]}))
    assert err.startswith("spec.runtime.extra_args: --port is set by Meridian from the spec")


def test_unknown_fields_are_errors():
    """An unknown field is an error with the closest valid field name."""
    assert _errors(_deployment(sla__ttft_p99=5)) == ["spec.sla.ttft_p99: unknown field 'ttft_p99'; did you mean 'ttft_p99_ms'?"]


def test_policy_rules():
    """A policy's clouds, priority classes and reserved instance types are checked together."""
    text = """
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: default}
spec:
  clouds: [{name: aws, regions_allowed: [us-east-1], regions_blocked: [us-east-1]}, {name: aws}]
  reserved: [{cloud: gcp, region: us-central1, instance_type: a3-highgpu-9g, nodes: 1, price_per_hour_usd: 1}]
  priority_classes: [{name: a, value: 5, preempts: [a]}]
"""
    errs = _errors(text)
    assert "spec.clouds.1: duplicate cloud 'aws'" in errs
    assert "spec.clouds.0.regions_blocked: regions both allowed and blocked: ['us-east-1']" in errs
    assert "spec.priority_classes.0.preempts.0: a class cannot preempt itself" in errs
    assert any(e.startswith("spec.reserved.0.instance_type: unknown gcp instance type 'a3-highgpu-9g'; did you mean 'a3-highgpu-8g'") for e in errs)


def test_cluster_rules():
    """A cluster's pools must be offered in its region and keep min <= initial <= max."""
    text = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c}
spec:
  cloud: aws
  region: eu-west-1
  auth: {token_env: T}
  pools:
    - {name: p, instance_type: p5en.48xlarge}
    - {name: p, instance_type: g6.xlarge, min_nodes: 1, max_nodes: 3, initial_nodes: 4}
"""
    errs = _errors(text)
    assert "spec.pools.1: duplicate pool name 'p'" in errs
    assert any(e.startswith("spec.pools.0.instance_type: p5en.48xlarge is not offered in eu-west-1") for e in errs)
    assert "spec.pools.1.initial_nodes: initial_nodes (4) must lie in [min_nodes, max_nodes]" in errs


def test_json_schema_accepts_examples_and_rejects_unknown_fields(repo_root):
    """`meridian schema` prints a JSON Schema that validates the examples and rejects unknown fields."""
    out = subprocess.run([sys.executable, "-m", "meridian.cli.main", "schema"], capture_output=True, text=True,
                         check=True, cwd=repo_root)
    schema = json.loads(out.stdout)
    validator = jsonschema.Draft202012Validator(schema)
    for path in pathlib.Path(repo_root, "examples").glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                validator.validate(doc)
    bad = yaml.safe_load(DEPLOYMENT)
    bad["spec"]["sla"]["typo"] = 1
    assert not validator.is_valid(bad)


def test_spec_reference_doc_is_current(repo_root):
    """docs/spec-reference.md is what `meridian schema --format markdown` renders from the models."""
    from meridian.spec import reference

    committed = pathlib.Path(repo_root, "docs", "spec-reference.md").read_text()
    assert committed == reference.render(), "run `meridian schema --format markdown -o docs/spec-reference.md`"
