"""Backup, restore and loss of the scheduler's state, with real scheduler nodes on loopback (SQLite
and a real redis-server) and an agent that refuses stale fencing tokens as the real one does:

- ``meridian state export`` of a SQLite store and ``meridian state import`` into an empty Redis:
  the scheduler started on Redis has the same specs, adopts the running replicas (no restart), and
  never sends a directive id the first one sent; its directives are not refused as stale;
- import refuses a store that is not empty, and replaces it with ``--force``;
- Redis lost (FLUSHALL) under a running scheduler: the fleet is re-learned from the agent, nothing
  is drained while the store holds no spec, and once the specs are applied again the replicas are
  adopted and new directives are accepted by the agent (tokens stay above the ones it saw)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json

import grpc
import pytest
import redis as redis_sync

from meridian.cli import main as cli
from meridian.fleet import models as fm
from scheduler import service, testing
from scheduler.admin import client as admin_client
from scheduler.server import auth

ADMIN, CLUSTER = "admin-token", "c1-token"
SPECS = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 2, max_replicas: 2, scale_up_delay_s: 0}
---
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c1}
spec:
  cloud: aws
  region: us-east-1
  auth: {token_env: MERIDIAN_TOKEN_C1}
  pools: [{name: l4, instance_type: g6.xlarge, max_nodes: 4}]
"""


def make_node(state_url: str, name: str) -> service.SchedulerService:
    cfg = testing.local_config(state_url, scheduler_id=name)
    tokens = auth.TokenBook(auth.TokensFile({"c1": auth.digest(CLUSTER)}, ()), env={})
    return service.SchedulerService(cfg, env={}, tokens=tokens, admin_auth=auth.AdminAuth(auth.digest(ADMIN)))


def admin(node: service.SchedulerService) -> admin_client.AdminClient:
    return admin_client.AdminClient(f"http://127.0.0.1:{node.admin_port}", ADMIN, env={})


def ready(cluster: testing.FakeCluster) -> set[str]:
    return {rid for rid, r in cluster.replicas.items() if r.state is fm.ReplicaState.READY}


async def drive(cluster: testing.FakeCluster, stop: asyncio.Event) -> None:
    """The agent's life: carry out directives and report; reconnect when the stream ends (a new term)."""
    while not stop.is_set():
        try:
            if cluster.agent.connected:
                await cluster.step()
            elif cluster.agent.address:
                await cluster.connect(timeout_s=2.0)
        except (testing.Refused, grpc.RpcError, grpc.aio.UsageError, RuntimeError):
            pass  # the scheduler is between terms: try again on the next round
        await asyncio.sleep(0.1)


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


async def _specs(node) -> list[tuple[str, str, str]]:
    items = (await asyncio.to_thread(admin(node).list, None))["items"]
    return sorted((i["kind"], i["name"], json.dumps(i["document"], sort_keys=True)) for i in items)


async def test_export_from_sqlite_import_into_redis_and_carry_on(tmp_path, redis_url):
    """A scheduler restored from a backup onto another store keeps the specs, adopts every running
    replica and sends only new directive ids, which the agent accepts (a higher fencing token)."""
    first = make_node(f"sqlite://{tmp_path}/a.db", "node-a")
    await first.start()
    cluster = testing.FakeCluster(testing.FakeAgent([f"127.0.0.1:{first.grpc_port}"], "c1", CLUSTER, cloud=fm.Cloud.AWS),
                                  [testing.gpu_pool("l4", nodes=4, nodes_max=4)])
    stop = asyncio.Event()
    driver = asyncio.create_task(drive(cluster, stop))
    try:
        await asyncio.to_thread(admin(first).apply, [{"name": "specs.yaml", "text": SPECS}])
        await testing.wait_for(lambda: first.token > 0, what="node-a leading")
        await cluster.connect()
        await testing.wait_for(lambda: len(ready(cluster)) == 2, timeout_s=30, what="two replicas ready")
        specs_before = await _specs(first)
        sent_before = {d.directive_id for d in cluster.agent.received}
        replicas_before = ready(cluster)
        token_before = first.token
    finally:
        await first.stop(grace_s=0.5)
        await cluster.agent.close()

    backup_file = tmp_path / "backup.json"
    code, out, err = await asyncio.to_thread(run_cli, "state", "export", str(backup_file), "--state",
                                             f"sqlite://{tmp_path}/a.db")
    assert code == 0, err
    assert out.startswith("exported ") and "specs=2" in out and f"to {backup_file}" in out
    assert "exported collection" in err  # progress lines
    doc = json.loads(backup_file.read_text())
    assert doc["format"] == "meridian-state" and doc["format_version"] == 1
    assert set(doc["collections"]["directives"]) == sent_before

    code, out, err = await asyncio.to_thread(run_cli, "state", "import", str(backup_file), "--state", redis_url)
    assert code == 0, err
    assert out.startswith("imported ") and "into redis://127.0.0.1" in out

    second = make_node(redis_url, "node-b")
    await second.start()
    try:
        cluster.agent = testing.FakeAgent([f"127.0.0.1:{second.grpc_port}"], "c1", CLUSTER, cloud=fm.Cloud.AWS)
        await testing.wait_for(lambda: second.token > 0, what="node-b leading")
        assert second.token > token_before
        await cluster.connect()
        assert await _specs(second) == specs_before
        await asyncio.to_thread(admin(second).apply, [{"name": "more.yaml", "text": SPECS.replace(
            "min_replicas: 2, max_replicas: 2", "min_replicas: 3, max_replicas: 3")}])
        await testing.wait_for(lambda: len(ready(cluster)) == 3, timeout_s=30, what="a third replica from node-b")
        new_ids = {d.directive_id for d in cluster.agent.received}
        assert new_ids and not new_ids & sent_before
        assert replicas_before <= ready(cluster)  # adopted, not restarted
        starts = [d for d in cluster.agent.received if isinstance(d.action, fm.StartReplica)]
        assert len(starts) == 1
    finally:
        stop.set()
        await driver
        await cluster.agent.close()
        await second.stop(grace_s=0.5)

    code, _, err = await asyncio.to_thread(run_cli, "state", "import", str(backup_file), "--state", redis_url)
    assert code == 1 and "not empty" in err and "--force" in err
    code, out, err = await asyncio.to_thread(run_cli, "state", "import", str(backup_file), "--state", redis_url,
                                             "--force", "-q")
    assert code == 0 and err == "" and out.startswith("imported ")


async def test_import_is_refused_while_a_scheduler_leads(tmp_path, redis_url):
    """An import into a store a running scheduler leads on is refused and changes nothing."""
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"format": "meridian-state", "format_version": 1, "collections": {}, "counters": {}}))
    node = make_node(redis_url, "node-a")
    await node.start()
    try:
        await testing.wait_for(lambda: node.token > 0, what="leading")
        code, _, err = await asyncio.to_thread(run_cli, "state", "import", str(empty), "--state", redis_url, "--force")
        assert code == 1 and "a scheduler holds the lease (node-a)" in err
        assert node.token > 0
    finally:
        await node.stop(grace_s=0.5)


async def test_redis_lost_under_a_running_scheduler(redis_url):
    """Redis flushed under a leader: the agent's replicas are neither drained nor restarted while no
    spec is stored (status says why), routes keep them, and after a new apply they are adopted and
    the agent accepts the new term's directives."""
    node = make_node(redis_url, "node-a")
    await node.start()
    cluster = testing.FakeCluster(testing.FakeAgent([f"127.0.0.1:{node.grpc_port}"], "c1", CLUSTER, cloud=fm.Cloud.AWS),
                                  [testing.gpu_pool("l4", nodes=4, nodes_max=4)])
    stop = asyncio.Event()
    driver = asyncio.create_task(drive(cluster, stop))
    try:
        await asyncio.to_thread(admin(node).apply, [{"name": "specs.yaml", "text": SPECS}])
        await testing.wait_for(lambda: node.token > 0, what="leading")
        await cluster.connect()
        await testing.wait_for(lambda: len(ready(cluster)) == 2, timeout_s=30, what="two replicas ready")
        before = ready(cluster)
        old_token = node.token

        client = redis_sync.Redis.from_url(redis_url)
        client.flushall()  # the store is lost: specs, directive log, lease, counters
        client.close()

        async def held_for_empty_store() -> bool:
            status = await asyncio.to_thread(admin(node).status)
            return any("holds no specs" in h["reason"] for h in status["held"])

        await testing.wait_for(held_for_empty_store, timeout_s=30, what="the empty-store hold in the status")
        drains = [d for d in cluster.agent.received if isinstance(d.action, fm.DrainReplica)]
        await asyncio.sleep(2.0)
        assert ready(cluster) == before
        assert [d for d in cluster.agent.received if isinstance(d.action, fm.DrainReplica)] == drains
        assert node.token > old_token  # re-elected on the empty store, with a higher token

        await asyncio.to_thread(admin(node).apply, [{"name": "specs.yaml", "text": SPECS.replace(
            "min_replicas: 2, max_replicas: 2", "min_replicas: 3, max_replicas: 3")}])
        await testing.wait_for(lambda: len(ready(cluster)) == 3, timeout_s=30, what="a third replica after re-apply")
        assert before <= ready(cluster)
        assert cluster.max_fence == node.token
    finally:
        stop.set()
        await driver
        await cluster.agent.close()
        await node.stop(grace_s=0.5)


@pytest.mark.parametrize("argv, words", [
    (["state", "import", "/nonexistent/backup.json", "--state", "sqlite://:memory:"], "cannot read"),
    (["state", "export", "x.json", "--state", "mysql://db"], "unknown scheme 'mysql'"),
])
def test_state_command_errors_are_clear(argv, words):
    """A missing file or an unknown store URL is an error naming it (exit 1)."""
    code, _, err = run_cli(*argv)
    assert code == 1 and words in err
