"""Admin API and CLI: authenticated apply (all-or-nothing, errors with file/line/field), get, delete,
dry-run plan with diff, cost and SLA risks."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re

import grpc
import pytest
from tests.unit.scheduler.service_harness import ADMIN_TOKEN, ROUTER_TOKEN, TOKENS, leading

from meridian import spec
from meridian.cli import main as cli
from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import routing_pb2_grpc
from scheduler import testing
from scheduler.admin import client as admin_client
from scheduler.solver import throughput

ROOT = pathlib.Path(__file__).resolve().parents[4]
EXAMPLES = sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))

DEPLOYMENT = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: assistant}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: %d, max_replicas: 4, scale_up_delay_s: 0}
"""
BROKEN = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: broken}
spec:
  model: {source: x/y, served_name: broken}
  resources: {gpu_types: [H1000]}
  sla: {ttft_p99_ms: 500, client_regions: [na-east]}
  scaling: {min_replicas: -5, max_replicas: 2}
"""


def client(svc, token: str = ADMIN_TOKEN) -> admin_client.AdminClient:
    return admin_client.AdminClient(f"http://127.0.0.1:{svc.admin_port}", token, env={})


async def call(fn, *args):
    """The admin client is synchronous (urllib): run it off the loop that serves the API."""
    return await asyncio.to_thread(fn, *args)


async def test_every_v1_route_needs_the_admin_token(make_service):
    """Without the admin bearer token (or with a wrong one) the API answers 401 and counts it; /healthz
    stays open."""
    svc = await make_service()
    for token in ("wrong", ""):
        with pytest.raises(admin_client.AdminError) as err:
            await call(admin_client.AdminClient(f"http://127.0.0.1:{svc.admin_port}", token or "x", env={}).list)
        assert err.value.status == 401
    assert svc.metrics.registry.get_sample_value("meridian_scheduler_auth_failures_total",
                                                 {"surface": "admin", "reason": "bad_token"}) == 2


async def test_apply_stores_documents_and_reports_actions(make_service):
    """Applying the examples creates every document; applying them again reports them unchanged and
    leaves the generation alone; a changed document is reported configured."""
    svc = await make_service()
    c = client(svc)
    files = c.read_files(EXAMPLES)
    first = await call(c.apply, files)
    assert {a["action"] for a in first["applied"]} == {"created"} and len(first["applied"]) == 14
    again = await call(c.apply, files)
    assert {a["action"] for a in again["applied"]} == {"unchanged"}
    assert again["generation"] == first["generation"]
    changed = await call(c.apply, [{"name": "d.yaml", "text": DEPLOYMENT % 3}])
    assert changed["applied"] == [{"kind": "ModelDeployment", "name": "chat", "action": "created"}]
    changed = await call(c.apply, [{"name": "d.yaml", "text": DEPLOYMENT % 2}])
    assert changed["applied"][0]["action"] == "configured" and changed["generation"] > first["generation"]
    assert any("MERIDIAN_TOKEN_AWS_USE1" in w for w in first["warnings"])


async def test_rejected_apply_changes_nothing_and_lists_every_error(make_service):
    """One invalid document among valid ones: nothing is stored, and every problem comes back with
    its file, line and field path."""
    svc = await make_service()
    c = client(svc)
    before = await call(c.list)
    with pytest.raises(admin_client.AdminError) as err:
        await call(c.apply, [{"name": "good.yaml", "text": DEPLOYMENT % 2}, {"name": "bad.yaml", "text": BROKEN}])
    assert err.value.status == 422
    issues = err.value.body["issues"]
    where = {(i["file"], i["path"]) for i in issues}
    assert ("bad.yaml", "spec.resources.gpu_types.0") in where
    assert ("bad.yaml", "spec.scaling.min_replicas") in where
    assert all(i["line"] for i in issues)
    assert any("H100" in i["message"] for i in issues)  # did-you-mean hint from the spec models
    after = await call(c.list)
    assert after == before
    assert await svc.spec_store.generation() == 0


async def test_get_and_delete(make_service):
    """get lists by kind alias and returns one document; delete removes it and bumps the generation;
    deleting what is absent is a 404."""
    svc = await make_service()
    c = client(svc)
    await call(c.apply, c.read_files(EXAMPLES))
    deployments = await call(c.list, "deployment")
    assert sorted(i["name"] for i in deployments["items"]) == ["chat-8b", "embed", "reasoning-70b"]
    one = await call(c.get, "ModelDeployment", "embed")
    assert one["document"]["spec"]["model"]["served_name"] == "bge-large-en"
    gen = await svc.spec_store.generation()
    done = await call(c.delete, "deployment", "embed")
    assert done["deleted"] == {"kind": "ModelDeployment", "name": "embed"} and done["generation"] > gen
    with pytest.raises(admin_client.AdminError) as err:
        await call(c.get, "deployment", "embed")
    assert err.value.status == 404
    with pytest.raises(admin_client.AdminError) as err:
        await call(c.delete, "deployment", "embed")
    assert err.value.status == 404
    with pytest.raises(admin_client.AdminError) as err:
        await call(c.list, "gadgets")
    assert err.value.status == 400 and "ModelDeployment" in str(err.value)


async def test_delete_that_would_invalidate_the_rest_is_refused(make_service):
    """Deleting a LatencyMap whose region another stored document uses is refused, naming the problem."""
    svc = await make_service()
    c = client(svc)
    lmap = "apiVersion: meridian/v1\nkind: LatencyMap\nmetadata: {name: extra}\nspec:\n  regions:\n" \
           "    - {name: moon-base, kind: client, latitude: 0, longitude: 0}\n"
    dep = (DEPLOYMENT % 1).replace("client_regions: [na-east]", "client_regions: [moon-base]")
    await call(c.apply, [{"name": "map.yaml", "text": lmap}, {"name": "dep.yaml", "text": dep}])
    with pytest.raises(admin_client.AdminError) as err:
        await call(c.delete, "latencymap", "extra")
    assert err.value.status == 422 and "moon-base" in json.dumps(err.value.body)
    assert await svc.spec_store.get("LatencyMap", "extra") is not None


async def test_plan_is_a_dry_run_with_diff_cost_and_risks(make_service):
    """plan shows the placement for the given specs against the live fleet, its diff against what runs
    and the cost before and after, and stores nothing."""
    svc = await leading(await make_service())
    c = client(svc)
    await call(c.apply, [{"name": "d.yaml", "text": DEPLOYMENT % 1}])
    agent = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", TOKENS["c1"], cloud=fm.Cloud.AWS,
                              region="us-east-1")
    cluster = testing.FakeCluster(agent, [testing.gpu_pool("l4", nodes=4, nodes_max=4)])
    await cluster.connect()
    try:
        await testing.wait_for(lambda: svc.loop.plan and svc.executor.open_records(), what="first directives")

        async def one_ready() -> bool:
            await cluster.step()
            return [r.state for r in cluster.replicas.values()] == [fm.ReplicaState.READY]

        await testing.wait_for(one_ready, interval_s=0.2, what="one replica ready")
        report = await call(c.plan, [{"name": "d.yaml", "text": DEPLOYMENT % 3}])
        assert report["basis"] == "live fleet"
        assert report["placement"] == {"chat": {"c1/l4": 3}}
        assert report["diff"] == [{"deployment": "chat", "pool": "c1/l4", "current": 1, "target": 3, "delta": 2}]
        assert report["cost_per_hour_usd"]["after"] > report["cost_per_hour_usd"]["before"] > 0
        assert report["changes"][0]["action"] == "would configure"  # a dry run: nothing was configured
        assert any("every replica is in us-east-1" in r for r in report["risks"]), report["risks"]
        assert (await svc.spec_store.get("ModelDeployment", "chat")).body.count('"min_replicas":1')
        far = (DEPLOYMENT % 1).replace("client_regions: [na-east]", "client_regions: [ap-south], max_rtt_ms: 50")
        risky = await call(c.plan, [{"name": "d.yaml", "text": far}])
        # Nothing within 50 ms of Mumbai: served from Virginia (within the TTFT SLA), named as a risk.
        assert not risky["unplaced"] and any("exceeds max_rtt_ms 50" in r for r in risky["risks"]), risky["risks"]
        assert [(u["client_region"], u["constraint"], u["served_from"]) for u in risky["uncovered"]] == [
            ("ap-south", "max_rtt", "c1/l4")]
        slow = far.replace("ttft_p99_ms: 2000", "ttft_p99_ms: 150")
        unserved = await call(c.plan, [{"name": "d.yaml", "text": slow}])
        assert unserved["unplaced"] and any("unplaced" in r for r in unserved["risks"])
        # The cause is the TTFT target (Virginia is 173 ms from Mumbai), not the GPU type.
        assert {u["constraint"] for u in unserved["unplaced"]} == {"ttft"}
        assert [(u["client_region"], u["constraint"]) for u in unserved["uncovered"]] == [("ap-south", "ttft")]
    finally:
        await agent.close()


async def test_cli_apply_get_delete_plan(make_service, tmp_path, capsys, monkeypatch):
    """The meridian apply/get/plan/delete commands talk to the admin API and exit 0, or 1 with every
    error on a rejected apply."""
    svc = await make_service()
    monkeypatch.setenv("MERIDIAN_SCHEDULER_URL", f"http://127.0.0.1:{svc.admin_port}")
    monkeypatch.setenv("MERIDIAN_ADMIN_TOKEN", ADMIN_TOKEN)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(DEPLOYMENT % 1)
    bad.write_text(BROKEN)
    assert await call(cli.main, ["apply", "-f", str(good)]) == 0
    assert "ModelDeployment/chat created" in capsys.readouterr().out
    assert await call(cli.main, ["apply", "-f", str(good), "-f", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:7: spec.resources.gpu_types.0:" in err and "nothing was changed" in err
    assert await call(cli.main, ["get"]) == 0
    assert "ModelDeployment  chat" in capsys.readouterr().out
    assert await call(cli.main, ["get", "deployment", "chat"]) == 0
    assert "served_name: chat" in capsys.readouterr().out
    assert await call(cli.main, ["plan", "-f", str(good)]) == 0
    out = capsys.readouterr().out
    assert "Cost per hour:" in out and "SLA risks:" in out
    assert "unchanged" in out and "configured" not in out
    assert "Cost floor" not in out  # no Cluster specs stored: nothing to build a fleet from
    assert await call(cli.main, ["delete", "deployment", "chat"]) == 0
    assert "ModelDeployment/chat deleted" in capsys.readouterr().out
    assert await call(cli.main, ["apply", "-f", str(ROOT / "examples")]) == 0  # a directory: its YAML files
    assert capsys.readouterr().out.count(" created") == 14
    # With the Cluster specs stored, plan also shows what the specs' rules alone cost (the cost floor).
    assert await call(cli.main, ["plan", "-f", str(ROOT / "examples" / "deployments.yaml")]) == 0
    assert "Cost floor of these specs: $92.36/h (proven)" in capsys.readouterr().out


def impossible_examples() -> list[dict]:
    """The example specs with embed's TTFT target at 1 ms: no declared pool can meet it anywhere."""
    files = admin_client.AdminClient.read_files(EXAMPLES)
    for f in files:
        if f["name"].endswith("deployments.yaml"):
            f["text"] = f["text"].replace("ttft_p99_ms: 150", "ttft_p99_ms: 1")
    return files


async def test_apply_refuses_an_sla_no_declared_capacity_can_meet_unless_accepted(make_service):
    """A TTFT target of 1 ms: apply answers 422 naming, per client region, the nearest miss (GPU type,
    region, RTT + prefill + headroom > TTFT) and stores nothing; with allow_unmet_sla it is applied,
    each unmet region a warning."""
    svc = await make_service()
    c = client(svc)
    with pytest.raises(admin_client.AdminError) as err:
        await call(c.apply, impossible_examples())
    assert err.value.status == 422 and "nothing was changed" in str(err.value)
    issues = err.value.body["issues"]
    assert {i["path"] for i in issues} == {f"spec.sla.client_regions.{k}" for k in range(3)}
    msg = next(i["message"] for i in issues if i["path"].endswith(".2"))
    assert "from ap-northeast: best is A100-80GB in japaneast" in msg and "> TTFT 1 ms" in msg, msg
    assert "ms RTT + " in msg and "ms prefill of 512 tokens" in msg and "(ttft; " in msg
    assert all(i["file"].endswith("deployments.yaml") and i["line"] for i in issues)
    assert await svc.spec_store.generation() == 0 and await call(c.list) == {"items": [], "generation": 0}
    done = await call(lambda: c.apply(impossible_examples(), allow_unmet_sla=True))
    assert len(done["applied"]) == 14
    assert sum("accepted an unmet SLA" in w for w in done["warnings"]) == 3
    # Re-applying something else leaves the accepted deployment alone: it is not held against that apply.
    again = await call(c.apply, [{"name": "d.yaml", "text": DEPLOYMENT % 1}])
    assert again["applied"] == [{"kind": "ModelDeployment", "name": "chat", "action": "created"}]


async def test_apply_warns_as_validate_does_of_a_stale_profile_and_a_queue_at_the_edge(make_service, tmp_path,
                                                                                        capsys, monkeypatch):
    """What `meridian validate` warns of, `meridian apply` warns of too, and still applies: a
    throughput profile measured on another workload (file and line of the field), and an embedding
    model on L4s only with a 70 ms target, whose queue at capacity breaks it from every pool. The
    examples as shipped apply without either warning."""
    svc = await make_service()
    c = client(svc)
    plain = await call(c.apply, admin_client.AdminClient.read_files(EXAMPLES))
    assert not any("throughput_profile" in w or "queue" in w for w in plain["warnings"]), plain["warnings"]
    files = admin_client.AdminClient.read_files(EXAMPLES)
    for f in files:
        if f["name"].endswith("deployments.yaml"):
            f["text"] = (f["text"].replace("ttft_p99_ms: 150", "ttft_p99_ms: 70")
                         .replace("    min_gpu_memory_gib: 16\n", "    gpu_types: [L4]\n")
                         .replace("{prompt_tokens_mean: 512, output_tokens_mean: 256}",
                                  "{prompt_tokens_mean: 2048, output_tokens_mean: 256}"))
            path = tmp_path / "deployments.yaml"
            path.write_text(f["text"])
    done = await call(c.apply, files)
    assert [a["action"] for a in done["applied"] if a["name"] in ("embed", "reasoning-70b")] == ["configured"] * 2
    stale = [w for w in done["warnings"] if "throughput_profile was measured on another workload" in w]
    assert len(stale) == 1 and "deployments.yaml:" in stale[0] and "spec.resources.throughput_profile_workload" in stale[0]
    queue = sorted(w.split(":", 1)[0] for w in done["warnings"] if "at the edge of TTFT once a replica's queue" in w)
    assert queue == ["embed/ap-northeast", "embed/eu-west", "embed/na-east"], done["warnings"]
    monkeypatch.setenv("MERIDIAN_SCHEDULER_URL", f"http://127.0.0.1:{svc.admin_port}")
    monkeypatch.setenv("MERIDIAN_ADMIN_TOKEN", ADMIN_TOKEN)
    assert await call(cli.main, ["apply", "-f", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: embed/na-east: every pool the SLA allows is at the edge of TTFT" in err, err
    assert "throughput_profile was measured on another workload" in err


async def test_cli_apply_and_validate_refuse_an_unmet_sla_with_the_nearest_miss(make_service, tmp_path, capsys,
                                                                                 monkeypatch):
    """meridian validate and meridian apply exit 1 on the impossible SLA with the nearest-miss line;
    --allow-unmet-sla makes both exit 0 with warnings."""
    svc = await make_service()
    monkeypatch.setenv("MERIDIAN_SCHEDULER_URL", f"http://127.0.0.1:{svc.admin_port}")
    monkeypatch.setenv("MERIDIAN_ADMIN_TOKEN", ADMIN_TOKEN)
    paths = []
    for f in impossible_examples():
        path = tmp_path / pathlib.Path(f["name"]).name
        path.write_text(f["text"])
        paths.append(str(path))
    assert await call(cli.main, ["validate", *paths]) == 1
    captured = capsys.readouterr()
    assert "embed/ap-northeast: UNMET (ttft): best is A100-80GB in japaneast" in captured.out
    deployments = next(p for p in paths if p.endswith("deployments.yaml"))
    embed = next(d for d in spec.load_files([deployments]).documents if d.name == "embed")
    line = embed.line_of("spec", "sla", "client_regions", 0)
    assert f"deployments.yaml:{line}: spec.sla.client_regions.0: no declared capacity meets the SLA from na-east: " \
           "best is H100 in us-east-1 (aws-use1/h100): 6.7 ms RTT + 0.7 ms prefill of 512 tokens + 10 ms headroom " \
           "> TTFT 1 ms" in captured.err, captured.err
    assert await call(cli.main, ["validate", *paths, "--allow-unmet-sla"]) == 0
    assert "warning: " in capsys.readouterr().err
    args = [a for p in paths for a in ("-f", p)]
    assert await call(cli.main, ["apply", *args]) == 1
    err = capsys.readouterr().err
    assert "no declared capacity meets the SLA from ap-northeast" in err and "nothing was changed" in err
    assert await svc.spec_store.generation() == 0
    assert await call(cli.main, ["apply", *args, "--allow-unmet-sla"]) == 0
    assert "warning: accepted an unmet SLA" in capsys.readouterr().err


EMBED = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: embed}
spec:
  model: {source: BAAI/bge-large-en-v1.5, served_name: embed}
  runtime: {is_embedding: true}
  resources: {gpu_types: [L4]}
  sla: {ttft_p99_ms: 60, client_regions: [na-east, eu-west, ap-south], always_served_regions: [eu-west]}
  scaling: {min_replicas: 1, max_replicas: 4, scale_up_delay_s: 0}
"""


async def sla_regions_once_covered(c, cluster, name: str, region: str) -> dict:
    """Step the fake cluster until deployment ``name``'s SLA status shows a replica covering
    ``region``; its regions by name."""
    async def covered() -> dict | None:
        await cluster.step()
        item = await call(c.get, "deployment", name)
        regions = {r["client_region"]: r for r in item["sla"]["regions"]}
        return regions if regions[region]["covered_by"] else None

    return await testing.wait_for(covered, interval_s=0.2, what=f"a replica covering {region}")


async def test_get_deployment_shows_the_sla_per_client_region(make_service, capsys, monkeypatch):
    """meridian get deployment NAME prints, per client region: covered by which replicas, expected
    TTFT p99 (RTT + prefill + headroom, and an embedding replica's queue wait at capacity), the TTFT p99
    routers report, and why a region is unmet or at risk; the
    admin API serves the same under the item's "sla"."""
    svc = await leading(await make_service())
    c = client(svc)
    await call(c.apply, [{"name": "e.yaml", "text": EMBED}])
    agent = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", TOKENS["c1"], cloud=fm.Cloud.AWS,
                              region="us-east-1")
    cluster = testing.FakeCluster(agent, [testing.gpu_pool("l4", nodes=2, nodes_max=4)])
    await cluster.connect()
    try:
        now = svc.clock.now()
        report = fm.TrafficReport("router-a", "na-east", now - 10, now, (
            fm.TrafficSample("embed", "na-east", requests=20, ttft_p99_ms=31.0),))
        async with grpc.aio.insecure_channel(f"127.0.0.1:{svc.grpc_port}") as ch:
            await routing_pb2_grpc.RoutingServiceStub(ch).ReportTraffic(wire.traffic_to_pb(report, ROUTER_TOKEN))

        regions = await sla_regions_once_covered(c, cluster, "embed", "na-east")
        na = regions["na-east"]
        assert na["required"] and na["covered"]
        assert na["covered_by"][0]["cluster"] == "c1" and na["covered_by"][0]["gpu_type"] == "L4"
        # An embedding replica's p99 queue wait at capacity counts, as the latency filter counts it:
        # 6.7 ms RTT + 5.7 ms prefill + 62 ms + 10 ms headroom breaks 60 ms once the L4 is loaded.
        wait = na["covered_by"][0]["queue_wait_p99_ms"]
        assert wait == pytest.approx(throughput.assess(spec.load_text(EMBED).documents[0].doc.spec, "L4").wait_ms, abs=0.1) and wait > 50
        assert na["expected_ttft_p99_ms"] == pytest.approx(6.7 + 5.7 + wait + 10, abs=1.0)
        assert (na["status"], na["cause"]) == ("at_risk", "queue")
        assert na["reason"].startswith(f"expected TTFT p99 {na['expected_ttft_p99_ms']:g} ms > target 60 ms once ")
        assert na["measured_ttft_p99_ms"] == 31.0 and na["traffic_rps"] == 2.0
        eu = regions["eu-west"]  # always served, but no pool is within 60 ms of it
        assert (eu["always_served"], eu["status"], eu["cause"]) == (True, "unmet", "ttft")
        assert "no replica of embed within reach of eu-west" in eu["reason"]
        south = regions["ap-south"]  # no traffic, not always served
        assert (south["required"], south["status"]) == (False, "not_required")
        monkeypatch.setenv("MERIDIAN_SCHEDULER_URL", f"http://127.0.0.1:{svc.admin_port}")
        monkeypatch.setenv("MERIDIAN_ADMIN_TOKEN", ADMIN_TOKEN)
        assert await call(cli.main, ["get", "deployment", "embed"]) == 0
        out = capsys.readouterr().out
        assert "# sla: TTFT p99 60 ms, per client region" in out
        assert "#   na-east: at_risk (queue): covered by " in out and "(c1, us-east-1, L4, 6.7 ms)" in out
        assert "of it queue wait at capacity); measured 31 ms; 2 req/s" in out
        assert "measured 31 ms; 2 req/s" in out
        assert "#   eu-west: UNMET (ttft): no replica within reach" in out and "always served" in out
        # The leader's last autoscaler decision, in the item and as comment lines (the loop keeps
        # ticking between the two calls, so each is checked for what it must say, not compared).
        decided = (await call(c.get, "deployment", "embed"))["autoscaling"]
        assert set(decided) == {"replicas", "by_region", "slo_breach", "reason"}
        assert decided["replicas"] >= 1 and decided["by_region"].get("na-east", 0) >= 1 and decided["reason"]
        assert sum(decided["by_region"].values()) == decided["replicas"] and decided["slo_breach"] is False
        assert re.search(r"^# autoscaler: \d+ replicas? wanted \(na-east \d+\)$", out, re.M), out
        assert re.search(r"^#   why: \S", out, re.M), out
    finally:
        await agent.close()


def test_the_autoscaler_lines_say_what_was_wanted_where_and_why():
    """The decision as meridian get deployment prints it: the count, the regions with replicas, a
    breached SLO, and the reason; nothing for a deployment without a decision (a standby)."""
    from meridian.cli import get as get_cmd

    assert get_cmd.autoscaling_lines(None) == []
    lines = get_cmd.autoscaling_lines({"replicas": 3, "by_region": {"eu-west": 1, "na-east": 2, "ap-south": 0},
                                       "slo_breach": True, "reason": "SLO: TTFT p99 901 ms > SLA 800 ms"})
    assert lines == ["autoscaler: 3 replicas wanted (eu-west 1, na-east 2), SLO breached",
                     "  why: SLO: TTFT p99 901 ms > SLA 800 ms"]
    assert get_cmd.autoscaling_lines({"replicas": 0, "by_region": {}, "slo_breach": False, "reason": ""}) == [
        "autoscaler: 0 replicas wanted"]


SPOT_POLICY = """
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: default}
spec:
  clouds: [{name: aws}]
  spot: {max_share: 1.0}
"""
# EMBED, na-east only, at most 2 replicas, wholly on spot and hedged.
HEDGED_EMBED = EMBED.replace("client_regions: [na-east, eu-west, ap-south], always_served_regions: [eu-west]",
                             "client_regions: [na-east]").replace("max_replicas: 4", "max_replicas: 2") + (
    "  placement: {spot: {allowed: true, max_share: 1.0, max_share_per_region: 1.0, hedge: true}}\n")


async def test_a_region_the_plan_cannot_hedge_is_at_risk_and_says_why(make_service, capsys, monkeypatch):
    """spot.hedge where the only pool is spot nodes of 8 L4s: its two replicas share a node (one
    preemption takes both), so na-east is covered but not hedged; meridian get deployment shows the
    region at risk (hedge), naming the pool, and the plan's risks say so too."""
    svc = await leading(await make_service())
    c = client(svc)
    await call(c.apply, [{"name": "p.yaml", "text": SPOT_POLICY}, {"name": "e.yaml", "text": HEDGED_EMBED}])
    agent = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", TOKENS["c1"], cloud=fm.Cloud.AWS,
                              region="us-east-1")
    cluster = testing.FakeCluster(agent, [testing.gpu_pool("l4-spot", nodes=1, nodes_max=2, gpus_per_node=8,
                                                           tier=fm.Tier.SPOT, price_per_node_hour_usd=2.8)])
    await cluster.connect()
    try:
        regions = await sla_regions_once_covered(c, cluster, "embed", "na-east")
        na = regions["na-east"]
        assert na["covered"] and (na["status"], na["cause"]) == ("at_risk", "hedge"), na
        assert "one preemption can take at once (2 on c1/l4-spot)" in na["reason"], na["reason"]
        monkeypatch.setenv("MERIDIAN_SCHEDULER_URL", f"http://127.0.0.1:{svc.admin_port}")
        monkeypatch.setenv("MERIDIAN_ADMIN_TOKEN", ADMIN_TOKEN)
        assert await call(cli.main, ["get", "deployment", "embed"]) == 0
        assert "#   na-east: at_risk (hedge): covered by " in capsys.readouterr().out
        plan = await call(c.plan, [{"name": "e.yaml", "text": HEDGED_EMBED}])
        assert [u["client_region"] for u in plan["unhedged"]] == ["na-east"]
        assert any(r.startswith("embed: na-east not hedged (spot.hedge): ") for r in plan["risks"]), plan["risks"]
    finally:
        await agent.close()
