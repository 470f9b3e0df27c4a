"""Scheduler state and lease on replicated Redis (a primary, a replica, three sentinels): the primary
is SIGKILLed and the lease semantics hold. Fencing tokens strictly increase from term to term, a
directive claimed before the failover is never claimed (sent) again, a deposed leader's writes are
refused, accepted specs survive, and no write is acted on before a replica confirmed it."""

from __future__ import annotations

import asyncio
import collections
import time

import grpc
import pytest

from meridian.fleet import models as fm
from scheduler import service, state, testing
from scheduler.admin import client as admin_client
from scheduler.server import auth
from scheduler.state import base
from tests.integration.sentinel_cluster import SentinelCluster

ADMIN = "sentinel-admin-token"
SPECS = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 2, max_replicas: 4, scale_up_delay_s: 0}
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


@pytest.fixture
def sentinel():
    cluster = SentinelCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def until(fn, what: str, timeout_s: float = 30.0):
    """Retry ``fn`` (an async callable) through store errors until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = await fn()
            if got:
                return got
        except base.StateError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout_s:g}s")
        await asyncio.sleep(0.1)


async def test_lease_fencing_survives_killing_the_primary(sentinel):
    """Leader a claims a directive and stores a spec; the primary dies and a replica is promoted.
    Until a replica confirms writes again, nothing is led with; then b takes the lapsed lease with a
    higher token, a's fenced writes and claims are refused, and a's claim still blocks resending."""
    a = state.open_store(sentinel.url, namespace="ha")
    b = state.open_store(sentinel.url, namespace="ha")
    try:
        assert a.replica_acks == 1  # the default with Sentinel
        lease = await a.acquire_lease("a", 2.0, {"grpc": "a:1"})
        t1 = lease.token
        assert await a.insert("directives", "d1", "start r1", fence=t1)
        await a.write([state.Put("specs", "ModelDeployment/chat", "applied before the failover")])

        old = sentinel.kill_primary()
        sentinel.wait_failover(old)

        async def lapsed() -> bool:
            return await b.lease() is None

        # a stopped renewing (it crashed, say): its lease lapses on the new primary (replicated expiry).
        await until(lapsed, "a's lease to lapse")
        # One data node left: no replica can confirm a write, so b does not lead on the lease it took.
        with pytest.raises(state.StateError, match="replica"):
            await b.acquire_lease("b", 5.0, {})
        sentinel.restart_as_replica(old)
        # With a replica back, b's next try confirms the lease it holds (same term) and leads.
        got = await until(lambda: b.acquire_lease("b", 5.0, {}), "lease for b")
        assert got.holder == "b" and got.token > t1, (t1, got.token)
        with pytest.raises(state.FencedOut):
            await a.write([state.Put("routing", "table", "from the deposed leader")], fence=t1)
        with pytest.raises(state.FencedOut):
            await a.insert("directives", "d2", "start r2", fence=t1)
        assert not await b.insert("directives", "d1", "start r1 again", fence=got.token)
        assert await b.get("directives", "d2") is None
        assert await b.get("specs", "ModelDeployment/chat") == "applied before the failover"
        assert await b.renew_lease("b", got.token, 5.0)
    finally:
        await a.close()
        await b.close()


async def drive(cluster: testing.FakeCluster, welcomes: list, stop: asyncio.Event) -> None:
    """The agent's life: (re)connect, carry out directives, report."""
    while not stop.is_set():
        if cluster.agent.connected:
            try:
                await cluster.step()
            except (grpc.RpcError, grpc.aio.UsageError, RuntimeError):
                pass  # the stream broke; reconnect on the next round
        else:
            try:
                welcome = await cluster.connect(timeout_s=2.0)
                welcomes.append(welcome.fencing_token)
            except testing.Refused:
                pass
        await asyncio.sleep(0.2)


async def test_a_running_scheduler_keeps_its_promises_through_a_failover(sentinel, tmp_path):
    """Under a scheduler serving an agent, the primary is SIGKILLed and later replaced: the scheduler
    leads again, every fencing token it used is at least the last (strictly higher for a new term),
    no directive id and no replica start reaches the agent twice, and the deployment keeps 2 replicas."""
    cfg = testing.local_config(sentinel.url, scheduler_id="s1", namespace="ha")
    tokens = auth.TokenBook(auth.TokensFile({"c1": auth.digest("c1-token")}, ()), env={})
    svc = service.SchedulerService(cfg, env={"MERIDIAN_TOKEN_C1": "c1-token"}, tokens=tokens,
                                   admin_auth=auth.AdminAuth(auth.digest(ADMIN)))
    await svc.start()
    agent = testing.FakeAgent([f"127.0.0.1:{svc.grpc_port}"], "c1", "c1-token", cloud=fm.Cloud.AWS)
    cluster = testing.FakeCluster(agent, [testing.gpu_pool("l4", nodes=4, nodes_max=4)])
    welcomes: list[int] = []
    tokens_seen: list[int] = []
    stop = asyncio.Event()

    async def watch_tokens() -> None:
        while not stop.is_set():
            if svc.token > 0 and (not tokens_seen or tokens_seen[-1] != svc.token):
                tokens_seen.append(svc.token)
            await asyncio.sleep(0.02)

    tasks = [asyncio.create_task(drive(cluster, welcomes, stop)), asyncio.create_task(watch_tokens())]
    try:
        await testing.wait_for(lambda: svc.token > 0, timeout_s=30, what="leading")
        client = admin_client.AdminClient(f"http://127.0.0.1:{svc.admin_port}", ADMIN, env={}, timeout_s=15)
        await asyncio.to_thread(client.apply, [{"name": "specs.yaml", "text": SPECS}])
        ready = lambda: len([r for r in cluster.replicas.values() if r.state is fm.ReplicaState.READY])  # noqa: E731
        await testing.wait_for(lambda: ready() == 2, timeout_s=60, what="two replicas ready")
        before = set(cluster.replicas)

        old = sentinel.kill_primary()
        await asyncio.to_thread(sentinel.wait_failover, old)
        await asyncio.to_thread(sentinel.restart_as_replica, old)
        await testing.wait_for(lambda: svc.token > 0 and agent.connected, timeout_s=60, what="leading again")
        await asyncio.sleep(3.0)  # a few ticks on the new primary (adoption grace included)
        assert set(cluster.replicas) == before and ready() == 2
        specs = await asyncio.to_thread(client.list)
        assert ("ModelDeployment", "chat") in {(i["kind"], i["name"]) for i in specs["items"]}
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await agent.close()
        await svc.stop(grace_s=0.5)

    assert tokens_seen == sorted(set(tokens_seen)), f"fencing tokens went back: {tokens_seen}"
    assert welcomes == sorted(welcomes)
    ids = [d.directive_id for d in agent.received]
    assert [i for i, n in collections.Counter(ids).items() if n > 1] == []
    starts = [d.action.replica_id for d in agent.received if isinstance(d.action, fm.StartReplica)]
    assert sorted(starts) == sorted(before), "a replica was started twice"
