"""``-o json|yaml`` on every command that prints data prints what the admin API answered (the data,
not the rendered text), parsed back equal; ``apply --wait`` waits for replicas with a progress
summary, and says which are missing when it times out."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest
import yaml
from tests.unit.scheduler.admin.test_admin_api import DEPLOYMENT, call, client
from tests.unit.scheduler.service_harness import ADMIN_TOKEN, TOKENS, leading

from meridian.cli import main as cli
from meridian.fleet import models as fm
from scheduler import testing

VOLATILE = {"silent_s", "age_s", "at", "updated_at", "solve_time_s", "since", "now_s", "computed_at"}


def _stable(data):
    """``data`` without the fields that change between two calls (ages, timestamps)."""
    if isinstance(data, dict):
        return {k: _stable(v) for k, v in data.items() if k not in VOLATILE}
    if isinstance(data, list):
        return [_stable(v) for v in data]
    return data


@pytest.fixture
async def served(make_service, monkeypatch, tmp_path):
    svc = await leading(await make_service())
    monkeypatch.setenv("MERIDIAN_SCHEDULER_URL", f"http://127.0.0.1:{svc.admin_port}")
    monkeypatch.setenv("MERIDIAN_ADMIN_TOKEN", ADMIN_TOKEN)
    path = tmp_path / "chat.yaml"
    path.write_text(DEPLOYMENT % 1)
    return svc, path


@pytest.mark.parametrize("fmt", ["json", "yaml"])
async def test_each_command_prints_the_api_answer(served, capsys, fmt):
    """apply, get, plan, status, whoami, cost and delete with -o json|yaml print the API's data."""
    svc, path = served
    c = client(svc)
    load = json.loads if fmt == "json" else yaml.safe_load
    assert await call(cli.main, ["apply", "-f", str(path), "-o", fmt]) == 0
    applied = load(capsys.readouterr().out)
    assert [(a["kind"], a["name"], a["action"]) for a in applied["applied"]] == [("ModelDeployment", "chat", "created")]
    cases = [(["get", "-o", fmt], lambda: c.list(None)), (["status", "-o", fmt], c.status),
             (["whoami", "-o", fmt], c.whoami), (["cost", "--no-floor-wait", "-o", fmt], lambda: c.cost(False)),
             (["plan", "-f", str(path), "-o", fmt], lambda: c.plan(c.read_files([str(path)])))]
    for argv, api in cases:
        assert await call(cli.main, argv) == 0, argv
        printed = capsys.readouterr().out
        expected = await call(api)
        if argv[0] == "get" and fmt == "yaml":  # get's YAML is the documents themselves, re-appliable
            assert list(yaml.safe_load_all(printed)) == [i["document"] for i in expected["items"]]
            continue
        assert _stable(load(printed)) == _stable(expected), argv
    assert await call(cli.main, ["delete", "deployment", "chat", "-o", fmt]) == 0
    assert load(capsys.readouterr().out)["deleted"] == {"kind": "ModelDeployment", "name": "chat"}


async def test_errors_are_data_too(served, capsys):
    """A refused call with -o yaml prints the API's error as YAML on stdout and exits 1."""
    assert await call(cli.main, ["delete", "deployment", "nope", "-o", "yaml"]) == 1
    err = yaml.safe_load(capsys.readouterr().out)
    assert err["status"] == 404 and "nope" in err["error"]


async def test_status_text_is_a_table_of_clusters(served, capsys):
    """meridian status prints the leadership line, a cluster table (plain text off a terminal)."""
    svc, _ = served
    agent = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", TOKENS["c1"], cloud=fm.Cloud.AWS,
                              region="us-east-1")
    cluster = testing.FakeCluster(agent, [testing.gpu_pool("l4", nodes=1, nodes_max=2)])
    await cluster.connect()
    try:
        await testing.wait_for(lambda: svc.fleet.snapshot(svc.clock.now()).clusters, what="c1 known")
        assert await call(cli.main, ["status"]) == 0
        out = capsys.readouterr().out
        assert "leader" in out and "cluster  cloud  region" in out
        assert any(line.startswith("c1 ") and "us-east-1" in line and "connected" in line for line in out.splitlines())
    finally:
        await agent.close()


async def test_apply_wait_waits_for_ready_replicas(served, capsys):
    """apply --wait returns 0 once the deployment's replica is READY, with one summary line on
    stderr and the readiness in its JSON answer."""
    svc, path = served
    agent = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", TOKENS["c1"], cloud=fm.Cloud.AWS,
                              region="us-east-1")
    cluster = testing.FakeCluster(agent, [testing.gpu_pool("l4", nodes=2, nodes_max=4)])
    await cluster.connect()
    stop = asyncio.Event()

    async def agent_steps() -> None:
        while not stop.is_set():
            await cluster.step()
            await asyncio.sleep(0.2)

    stepping = asyncio.create_task(agent_steps())
    try:
        assert await call(cli.main, ["apply", "-f", str(path), "--wait", "--wait-timeout-s", "60", "-o", "json"]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["ready"] == {"chat": {"wanted": 1, "ready": 1}}
        assert "waiting for replicas: done, 1/1 replicas ready in " in captured.err
    finally:
        stop.set()
        await stepping
        await agent.close()


async def test_apply_wait_times_out_naming_what_is_missing(served, capsys):
    """With no cluster to run it, apply --wait exits 1 after the timeout, naming the deployment and
    how many of its replicas are ready."""
    _, path = served
    assert await call(cli.main, ["apply", "-f", str(path), "--wait", "--wait-timeout-s", "1"]) == 1
    err = capsys.readouterr().err
    assert "waiting for replicas: timed out after 1 s, 0/1 replicas ready" in err
    assert "not ready after 1 s: chat: 0 of 1 replicas ready" in err


def test_validate_and_schema_print_yaml(repo_root, capsys):
    """validate -o yaml prints the validation result as YAML; schema --format yaml the JSON Schema."""
    examples = sorted(str(p) for p in pathlib.Path(repo_root, "examples").glob("*.yaml"))
    assert cli.main(["validate", *examples, "-o", "yaml"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert out["valid"] is True and {d["kind"] for d in out["documents"]} >= {"ModelDeployment", "Cluster"}
    assert cli.main(["schema", "--format", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["title"].startswith("Meridian spec")


def test_schema_o_with_a_format_name_is_refused(tmp_path, monkeypatch, capsys):
    """`-o` is the output format in every other command; `schema -o yaml` wrote a file named yaml.
    It now says to use --format, and writes nothing."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["schema", "-o", "yaml"]) == 2
    assert "-o/--out is the file to write; for the format use --format yaml" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert cli.main(["schema", "--format", "yaml", "-o", "schema.yaml"]) == 0
    assert yaml.safe_load((tmp_path / "schema.yaml").read_text())["title"].startswith("Meridian spec")
