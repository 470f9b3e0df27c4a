"""Admin API and CLI: authenticated apply (all-or-nothing, errors with file/line/field), get, delete,
dry-run plan with diff, cost and SLA risks."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest
from tests.unit.scheduler.service_harness import ADMIN_TOKEN, TOKENS, leading

from meridian.cli import main as cli
from meridian.fleet import models as fm
from scheduler import testing
from scheduler.admin import client as admin_client

ROOT = pathlib.Path(__file__).resolve().parents[4]
EXAMPLES = sorted(str(p) for p in (ROOT / "examples").glob("*.yaml"))

DEPLOYMENT = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
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
        assert report["changes"][0]["action"] == "configured"
        assert any("every replica is in us-east-1" in r for r in report["risks"]), report["risks"]
        assert (await svc.spec_store.get("ModelDeployment", "chat")).body.count('"min_replicas":1')
        far = (DEPLOYMENT % 1).replace("client_regions: [na-east]", "client_regions: [ap-south], max_rtt_ms: 50")
        risky = await call(c.plan, [{"name": "d.yaml", "text": far}])
        # Nothing within 50 ms of Mumbai: served from Virginia (within the TTFT SLA), named as a risk.
        assert not risky["unplaced"] and any("exceeds max_rtt_ms 50" in r for r in risky["risks"]), risky["risks"]
        slow = far.replace("ttft_p99_ms: 2000", "ttft_p99_ms: 150")
        unserved = await call(c.plan, [{"name": "d.yaml", "text": slow}])
        assert unserved["unplaced"] and any("unplaced" in r for r in unserved["risks"])
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
    assert "Cost floor" not in out  # no Cluster specs stored: nothing to build a fleet from
    assert await call(cli.main, ["delete", "deployment", "chat"]) == 0
    assert "ModelDeployment/chat deleted" in capsys.readouterr().out
    assert await call(cli.main, ["apply", "-f", str(ROOT / "examples")]) == 0  # a directory: its YAML files
    assert capsys.readouterr().out.count(" created") == 14
    # With the Cluster specs stored, plan also shows what the specs' rules alone cost (the cost floor).
    assert await call(cli.main, ["plan", "-f", str(ROOT / "examples" / "deployments.yaml")]) == 0
    assert "Cost floor of these specs: $92.36/h (proven)" in capsys.readouterr().out
