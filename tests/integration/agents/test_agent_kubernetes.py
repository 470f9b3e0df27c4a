"""The agent with the kubernetes replica backend against a fake Kubernetes (``FakeCluster``: an API
server, scheduler, kubelets and kube-proxy on loopback) driven by the real kubernetes_asyncio
client, with SGLang emulator replicas running as pods, and the test scheduler on gRPC loopback:
start to ready, crash and restart, crash loop, eviction, a spot taint turned into a notice and a
drain, re-adoption after an agent restart (orphans removed, no directive twice), a drain on
scale-down with every request in flight completed, an API server briefly unreachable, and a
per-replica Service endpoint."""

from __future__ import annotations

import asyncio
import shutil
import signal

import aiohttp
import pytest

from meridian.fleet import models

import agent_it_helpers as h
import kube_it as k

R = models.ReplicaState
OK = models.DirectiveOutcome


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("MERIDIAN_TEST_TOKEN", h.TOKEN)


class Setup:
    """A fake cluster mirroring the sim nodes, a Cluster spec with the kubernetes backend, an agent."""

    def __init__(self, fake, scheduler, tmp_path, name: str, **kube):
        self.fake, self.scheduler, self.tmp_path, self.name = fake, scheduler, tmp_path, name
        self.kubeconfig = fake.kubeconfig(tmp_path / "kubeconfig", namespace=k.NAMESPACE)
        self.nodes = k.add_sim_nodes(fake, name)
        self.cluster = k.cluster_doc(name, address=scheduler.address, state_dir=tmp_path, kubeconfig=self.kubeconfig,
                                     **kube)
        scheduler.tokens[name] = h.TOKEN
        self.rec = scheduler.record(name)
        self.agent = None

    async def start_agent(self, **kwargs):
        self.agent = k.build_agent(self.cluster, self.tmp_path / "state", **kwargs)
        await self.agent.start()
        await h.wait_for(lambda: self.rec.inventory, what="inventory")
        return self.agent

    async def ready(self, replica_id: str, timeout_s: float = 60.0) -> models.ReplicaReport:
        return await h.wait_for(lambda: (r := self.rec.replica(replica_id)) and r.state == R.READY and r.endpoint and r,
                                timeout_s=timeout_s, what=f"{replica_id} ready")

    async def state(self, replica_id: str, state: models.ReplicaState, timeout_s: float = 60.0):
        return await h.wait_for(lambda: (r := self.rec.replica(replica_id)) and r.state == state and r,
                                timeout_s=timeout_s, what=f"{replica_id} {state.value}")

    async def close(self):
        if self.agent is not None:
            await self.agent.shutdown(stop_replicas=True)


async def _chat(session: aiohttp.ClientSession, endpoint: str, max_tokens: int = 16) -> int:
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "max_tokens": max_tokens}
    async with session.post(endpoint + "/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=60)) as r:
        await r.read()
        return r.status


async def test_start_to_ready_serves_and_is_reported(env, scheduler, tmp_path):
    """A start becomes a pod pinned to the chosen node with the contract's labels and annotations; it
    is reported STARTING then READY at the pod IP, serves, and its load is scraped; a replica bigger
    than any node is refused naming the node size; the pool's free GPUs follow."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-a")
        try:
            await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "r1", "l4", gpus=2))
            ready = await s.ready("r1")
            assert [a.outcome for a in s.rec.acks_for("d1")] == [OK.ACCEPTED, OK.SUCCEEDED]
            assert "pod meridian/mr-r1 on node kb-a-l4-000" in s.rec.acks_for("d1")[0].reason
            pod = k.pod_of(fake, "r1")
            assert ready.endpoint == f"http://{pod['status']['podIP']}:30000" and ready.endpoint.startswith("http://127.77.")
            assert pod["spec"]["nodeName"] in s.nodes["l4"] and pod["metadata"]["annotations"]["meridian.dev/directive-id"] == "d1"
            assert pod["metadata"]["labels"]["meridian.dev/cluster"] == "kb-a"
            assert ready.served_model_name == "qwen" and ready.gpu_count == 2
            async with aiohttp.ClientSession() as session:
                assert all(s_ == 200 for s_ in await asyncio.gather(*(_chat(session, ready.endpoint) for _ in range(4))))
            await h.wait_for(lambda: s.rec.replica("r1").load.observed_at > 0, timeout_s=30, what="load scraped")
            await h.wait_for(lambda: {p.pool_id: p for p in s.rec.inventory}["l4"].gpus_free == 6, what="GPUs held")
            await scheduler.send(s.name, h.start("big", "r9", "l4", gpus=8))
            await h.wait_for(lambda: s.rec.acks_for("big"), what="refusal")
            (ack,) = s.rec.acks_for("big")
            assert ack.outcome == OK.REFUSED and "g6.12xlarge" in ack.reason and "4 per node" in ack.reason
            assert k.pod_of(fake, "r9") is None
            reasons = {e["reason"] for e in fake.events(k.NAMESPACE)}
            assert "Created" in reasons
        finally:
            await s.close()
        assert k.our_pods(fake) == []


async def test_a_crash_restarts_in_place_and_a_crash_loop_fails(env, scheduler, tmp_path):
    """A killed engine container is restarted by the kubelet on the same node and pod IP: reported
    as a restart and a REPLICA_CRASH, then READY again; crashing max_restarts times is FAILED and the
    pod is deleted."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-b", max_restarts=2)
        try:
            await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "r1", "l4"))
            first = await s.ready("r1")
            node = k.pod_of(fake, "r1")["spec"]["nodeName"]
            fake.kill_container(k.NAMESPACE, "mr-r1", signal.SIGKILL)
            again = await h.wait_for(lambda: (r := s.rec.replica("r1")) and r.restarts == 1 and r.state == R.READY and r,
                                     timeout_s=60, what="restarted and ready")
            assert again.endpoint == first.endpoint and k.pod_of(fake, "r1")["spec"]["nodeName"] == node
            assert any(e.kind == models.EventKind.REPLICA_CRASH and e.replica_id == "r1" for e in s.rec.events)
            fake.kill_container(k.NAMESPACE, "mr-r1", signal.SIGKILL)
            await h.wait_for(lambda: (r := s.rec.replica("r1")) and r.restarts == 2, timeout_s=60, what="second restart")
            await h.wait_for(lambda: k.pod_of(fake, "r1") and fake.container_pid(k.NAMESPACE, "mr-r1"), timeout_s=60,
                             what="running again")
            fake.kill_container(k.NAMESPACE, "mr-r1", signal.SIGKILL)
            failed = await s.state("r1", R.FAILED)
            assert "crash loop" in failed.message
            await h.wait_for(lambda: k.pod_of(fake, "r1") is None, timeout_s=30, what="failed pod deleted")
        finally:
            await s.close()


async def test_eviction_and_node_shutdown_fail_the_replica_with_the_reason(env, scheduler, tmp_path):
    """An evicted pod is FAILED "evicted" (and removed); a graceful node shutdown (GKE) is both a
    reclaim notice for the node and a FAILED "terminated" replica."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-c")
        try:
            await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "r1", "l4"))
            await s.ready("r1")
            await fake.evict_pod(k.NAMESPACE, "mr-r1", "The node was low on resource: memory.")
            failed = await s.state("r1", R.FAILED)
            assert "evicted" in failed.message and "low on resource" in failed.message
            assert any(e.kind == models.EventKind.REPLICA_CRASH and e.replica_id == "r1" for e in s.rec.events)
            await h.wait_for(lambda: k.pod_of(fake, "r1") is None, timeout_s=30, what="evicted pod removed")

            await scheduler.send(s.name, h.start("d2", "r2", "l4-spot"))
            await s.ready("r2")
            node = k.pod_of(fake, "r2")["spec"]["nodeName"]
            await fake.shutdown_node(node, grace_s=2.0)
            ended = await h.wait_for(lambda: (r := s.rec.replica("r2")) and r.state in (R.FAILED, R.STOPPED) and r,
                                     timeout_s=60, what="r2 ended")
            assert ended.state == R.STOPPED or "terminated" in ended.message
            assert any(e.kind == models.EventKind.SPOT_INTERRUPTION and e.pool_id == "l4-spot" for e in s.rec.events)
        finally:
            await s.close()


async def test_spot_taint_becomes_a_notice_and_drains_the_node(env, scheduler, tmp_path):
    """The AWS Node Termination Handler's signs (cordon + spot-itn taint) on a node are an
    interruption notice: SPOT_INTERRUPTION for the pool and the replica, the replica drained (DRAINING
    then STOPPED, its pod deleted), the node takes no new replica."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-d")
        try:
            agent = await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "spot-r1", "l4-spot"))
            await s.ready("spot-r1")
            node = k.pod_of(fake, "spot-r1")["spec"]["nodeName"]
            fake.cordon(node)
            fake.taint_node(node, "aws-node-termination-handler/spot-itn", "evt-1", "NoSchedule")
            await h.wait_for(lambda: [e for e in s.rec.events if e.replica_id == "spot-r1"
                                      and e.kind == models.EventKind.SPOT_INTERRUPTION], what="replica notice")
            assert any(e.kind == models.EventKind.SPOT_INTERRUPTION and e.replica_id == "" and e.pool_id == "l4-spot"
                       for e in s.rec.events)
            await s.state("spot-r1", R.STOPPED, timeout_s=60)
            assert k.pod_of(fake, "spot-r1") is None
            assert [n["node_id"] for n in agent.status()["interruptions"]] == [node]
            await h.wait_for(lambda: {p.pool_id: p for p in s.rec.inventory}["l4-spot"].gpus_free == 0,
                             what="the doomed node's GPUs withdrawn")
            await scheduler.send(s.name, h.start("d2", "spot-r2", "l4-spot"))
            await h.wait_for(lambda: s.rec.acks_for("d2"), what="refusal")
            assert s.rec.acks_for("d2")[0].outcome == OK.REFUSED
        finally:
            await s.close()


async def test_agent_restart_readopts_removes_orphans_and_never_starts_twice(env, scheduler, tmp_path):
    """Pods outlive the agent: a new agent (its state directory lost) re-adopts the running pod
    (still READY, same endpoint, it kept serving), deletes a pod of its cluster that has no record,
    and a resent start neither starts a second pod nor fails."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-e")
        try:
            await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "r1", "l4"))
            before = await s.ready("r1")
            orphan = {"metadata": {"name": "mr-stray", "labels": {"app.kubernetes.io/managed-by": "meridian-agent",
                                                                  "meridian.dev/cluster": "kb-e"}},
                      "spec": {"containers": [{"name": "engine", "image": k.IMAGE, "command": ["sleep", "300"]}]}}
            async with k.core_api(s.kubeconfig) as core:  # another writer than the agent
                await core.create_namespaced_pod(k.NAMESPACE, orphan)
            async with h.Poller(before.endpoint + "/v1/models") as poller:
                await s.agent.shutdown(stop_replicas=False)
                shutil.rmtree(tmp_path / "state")
                s.agent = None
                await asyncio.sleep(1.0)
                agent = await s.start_agent()
                assert agent.adopted == ["r1"]
                await h.wait_for(lambda: len(s.rec.hellos) == 2 and s.rec.replica("r1") is not None, what="re-reported")
                assert s.rec.replica("r1").state == R.READY and s.rec.replica("r1").endpoint == before.endpoint
                # Its node (the pod's) is reported before and after adoption: pools are sized by busy nodes.
                assert before.node_id and s.rec.replica("r1").node_id == before.node_id
                await h.wait_for(lambda: k.pod_of(fake, "r1") and not [p for p in fake.pods(k.NAMESPACE)
                                                                      if p["metadata"]["name"] == "mr-stray"],
                                 timeout_s=30, what="orphan removed")
                await scheduler.send(s.name, h.start("d1", "r1", "l4"))
                await h.wait_for(lambda: len(s.rec.acks_for("d1")) >= 3, what="resent start answered")
                assert s.rec.acks_for("d1")[-1].outcome == OK.SUCCEEDED
            assert poller.ok > 0 and poller.failures == []
            assert [p["metadata"]["name"] for p in k.our_pods(fake)] == ["mr-r1"]
            # Even a start that reaches the API server again (409) finds the pod it made, by its directive id.
            b = agent.replicas
            prepared = b.prepare(h.start("d1", "r1", "l4").action, directive_id="d1",
                                 node_id=b.get("r1").placement.node_id, gpu_ids=(0,), gpu_type="L4")
            assert "already created for this directive" in await b.launch(prepared)
            assert [p["metadata"]["name"] for p in k.our_pods(fake)] == ["mr-r1"]
        finally:
            await s.close()


async def test_a_restarted_agent_keeps_its_replicas_while_its_node_list_is_late(env, scheduler, tmp_path):
    """An agent restarts while the API server is slow to list nodes: its pod list is in (the replica
    is adopted), its node list is not yet. A node missing from a list not yet read is no lost node:
    the replica keeps serving, and is reported on its node once the list is in."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-n")
        try:
            await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "r1", "l4"))
            before = await s.ready("r1")
            await s.agent.shutdown(stop_replicas=False)
            s.agent = None
            fake.api.delays["/api/v1/nodes"] = 4.0
            async with h.Poller(before.endpoint + "/v1/models") as poller:
                agent = await s.start_agent()
                assert agent.adopted == ["r1"]
                assert not agent.replicas.nodes_listed()
                await h.wait_for(agent.replicas.nodes_listed, timeout_s=30, what="node list in")
                fake.api.delays.clear()
                await h.wait_for(lambda: len(s.rec.hellos) == 2 and s.rec.replica("r1") is not None
                                 and s.rec.replica("r1").node_id == before.node_id, what="re-reported on its node")
                await asyncio.sleep(1.0)  # a discovery pass with the node list in
            assert s.rec.replica("r1").state == R.READY
            assert poller.ok > 0 and poller.failures == []
            assert [p["metadata"]["name"] for p in k.our_pods(fake)] == ["mr-r1"]
        finally:
            await s.close()


async def test_drain_on_scale_down_loses_no_request_in_flight(env, scheduler, tmp_path):
    """A drain reports DRAINING first, then deletes the pod with its grace period; the preStop lets
    every request in flight finish (all 200) before the engine stops; the drain SUCCEEDS."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-f")
        try:
            await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "r1", "l4"))
            ready = await s.ready("r1")
            states: list[models.ReplicaState] = []

            async def watch_states():
                while True:
                    r = s.rec.replica("r1")
                    if r is not None and (not states or states[-1] != r.state):
                        states.append(r.state)
                    await asyncio.sleep(0.02)

            watcher = asyncio.create_task(watch_states())
            async with aiohttp.ClientSession() as session:
                calls = [asyncio.create_task(_chat(session, ready.endpoint, max_tokens=120)) for _ in range(6)]
                await asyncio.sleep(0.5)
                await scheduler.send(s.name, h.drain("d2", "r1", deadline_s=30))
                results = await asyncio.gather(*calls, return_exceptions=True)
            assert results == [200] * 6
            await s.state("r1", R.STOPPED)
            watcher.cancel()
            # Reported DRAINING while the requests finished, then STOPPED (just awaited; the sampler
            # may not have run again since).
            assert states[:2] == [R.READY, R.DRAINING] and R.STOPPED not in states[:2]
            await h.wait_for(lambda: [a.outcome for a in s.rec.acks_for("d2")] == [OK.ACCEPTED, OK.SUCCEEDED],
                             what="drain acked")
            assert "in-flight requests finished" in s.rec.acks_for("d2")[-1].reason
            assert k.pod_of(fake, "r1") is None
        finally:
            await s.close()


async def test_an_unreachable_api_server_is_ridden_out(env, scheduler, tmp_path):
    """With the API server away the replica keeps serving and being reported; a crash meanwhile is
    restarted by the kubelet; once the server is back the watches recover and reports show it."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-g")
        try:
            agent = await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "r1", "l4"))
            ready = await s.ready("r1")
            async with h.Poller(ready.endpoint + "/health") as poller:
                await fake.pause_api()
                await asyncio.sleep(2.0)
                reports_before = len(s.rec.reports)
                await asyncio.sleep(2.5)
                assert len(s.rec.reports) > reports_before  # the agent keeps reporting (last known states)
                assert s.rec.replica("r1").state == R.READY
                fake.kill_container(k.NAMESPACE, "mr-r1", signal.SIGKILL)
                await asyncio.sleep(1.0)
                await fake.resume_api()
                await h.wait_for(lambda: (r := s.rec.replica("r1")) and r.restarts == 1 and r.state == R.READY,
                                 timeout_s=60, what="the restart seen after the API came back")
            assert poller.ok > 0
            watch_restarts = agent.metrics.registry.get_sample_value(
                "meridian_agent_kube_watch_restarts_total", {"cluster": "kb-g", "resource": "pods", "reason": "error"})
            assert watch_restarts and watch_restarts >= 1
            assert agent.replicas.api_connected
            backend = agent.status()["backend"]
            assert backend["name"] == "kubernetes" and backend["watches"]["pods"]["connected"]
        finally:
            await s.close()


@pytest.mark.parametrize("service_type", ["LoadBalancer", "NodePort"])
async def test_service_endpoint_mode_is_reachable(env, scheduler, tmp_path, service_type):
    """In Service mode each replica gets a Service owned by its pod; the reported endpoint is the
    Service's address (the load balancer's, or a node's and the node port) and serves through
    kube-proxy; the drain removes the Service with the pod."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-h", endpoint={"mode": "service", "service_type": service_type,
                                                                "node_address": "InternalIP"})
        try:
            await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "r1", "l4"))
            ready = await s.ready("r1")
            pod_ip = k.pod_of(fake, "r1")["status"]["podIP"]
            assert pod_ip not in ready.endpoint
            expected = "127.78." if service_type == "LoadBalancer" else "127.76."
            assert ready.endpoint.startswith("http://" + expected)
            async with aiohttp.ClientSession() as session:
                assert await _chat(session, ready.endpoint) == 200
            await scheduler.send(s.name, h.drain("d2", "r1"))
            await s.state("r1", R.STOPPED)
            async with k.core_api(s.kubeconfig) as core:
                for _ in range(300):
                    if not (await core.list_namespaced_service(k.NAMESPACE)).items:
                        break
                    await asyncio.sleep(0.1)
                assert (await core.list_namespaced_service(k.NAMESPACE)).items == []
        finally:
            await s.close()


async def test_a_pod_started_before_service_mode_gets_its_service_on_adoption(env, scheduler, tmp_path):
    """A cluster moved from pod_ip to a NodePort (as the AKS module now sets): the agent restarted
    with the new spec re-adopts the running pod and creates its Service, so the replica is READY
    at the node port instead of waiting for a Service address for ever."""
    async with k.fake_cluster(tmp_path) as fake:
        s = Setup(fake, scheduler, tmp_path, "kb-s")
        try:
            await s.start_agent()
            await scheduler.send(s.name, h.start("d1", "r1", "l4"))
            before = await s.ready("r1")
            assert k.pod_of(fake, "r1")["status"]["podIP"] in before.endpoint
            await s.agent.shutdown(stop_replicas=False)
            s.agent = None
            s.cluster = k.cluster_doc(s.name, address=scheduler.address, state_dir=tmp_path, kubeconfig=s.kubeconfig,
                                      endpoint={"mode": "service", "service_type": "NodePort",
                                                "node_address": "InternalIP"})
            agent = await s.start_agent()
            assert agent.adopted == ["r1"]
            after = await h.wait_for(lambda: (r := s.rec.replica("r1")) and r.state == R.READY
                                     and r.endpoint.startswith("http://127.76.") and r, timeout_s=60,
                                     what="r1 ready at its node port")
            async with aiohttp.ClientSession() as session:
                assert await _chat(session, after.endpoint) == 200
        finally:
            await s.close()
