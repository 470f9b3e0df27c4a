"""The whole system with one cluster on Kubernetes: a scheduler, two agents (sim provider), a router,
the official ``openai`` SDK as the client; aws-use1 runs its replicas through the kubernetes backend,
as pods of a fake Kubernetes (``python -m meridian.demo.kubecluster``: API server, scheduler,
kubelets, kube-proxy on loopback, its nodes mirrored from the sim cloud), gcp-usc1 as local
processes. Traffic goes through the router to both; a pod deleted at once (grace 0, as
``kubectl delete pod --grace-period=0 --force``) under load fails no non-streaming request and is
replaced."""

from __future__ import annotations

import asyncio
import pathlib
import time

import aiohttp
import openai
import pytest
import pytest_asyncio
from kubernetes_asyncio import client, config

from meridian.demo import fleet as fleet_mod
from meridian.demo import processes

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]
SPECS = pathlib.Path(__file__).parent / "specs"
MODEL = "chat"
KUBE = "aws-use1"


def ready_chat(status: dict, cluster: str | None = None) -> list[dict]:
    return [r for c in status.get("clusters", []) if not c.get("lost") and (cluster is None or c["cluster_id"] == cluster)
            for r in c.get("replica_details", []) if r["deployment"] == MODEL and r["state"] == "ready"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fleet(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kfleet")
    f = fleet_mod.LocalFleet(fleet_mod.FleetConfig(
        workdir=workdir, spec_files=(SPECS / "fleet.yaml",), cluster_file=SPECS / "kube-clusters.yaml",
        provisioning_delay_s=2.0, router_region="na-east", k8s_clusters=(KUBE,),
        # Both agents report before the first plan (the kubernetes one starts its cluster first), so
        # the first plan already places across both.
        scheduler_settings=("heartbeat_interval_s=1", "adopt_grace_s=30")))
    f.prepare()
    try:
        await f.start_scheduler()
        async with aiohttp.ClientSession() as session:
            applied = await f.apply(session, [SPECS / "fleet.yaml", workdir / "clusters.yaml"])
            assert applied["status"] == 200, applied
        await f.start_agents()
        await f.start_router()
        yield f
    finally:
        await asyncio.to_thread(f.stop)
        left = await asyncio.to_thread(f.procs.stragglers)
        assert left == [], f"processes of the run (pods included) outlived it: {processes.describe(left)}"


@pytest_asyncio.fixture(loop_scope="module")
async def core(fleet):
    """The real client on the kubernetes cluster's kubeconfig (as an operator's kubectl)."""
    api_client = await config.new_client_from_config(config_file=str(fleet.kubeconfig(KUBE)))
    try:
        yield client.CoreV1Api(api_client)
    finally:
        await api_client.close()


def sdk(fleet) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{fleet.router_url}/v1", api_key="e2e", max_retries=0, timeout=60,
                              default_headers={fleet_mod.REGION_HEADER: "na-east"})


def router_trouble(fleet, limit: int = 60) -> str:
    """The router log's warnings, errors and tracebacks (a failed request's cause, for the message)."""
    path = fleet.workdir / "logs" / "router.log"
    if not path.exists():
        return "(no router log)"
    lines = [line for line in path.read_text(errors="replace").splitlines()
             if "level=INFO" not in line and "level=DEBUG" not in line]
    return "\n".join(lines[-limit:])


async def routed(fleet, session, endpoints: set[str], timeout_s: float = 60.0) -> None:
    """Until the router lists every endpoint as a ready replica of the model."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rs = await fleet.router_status(session)
        entry = next((m for m in rs.get("models", []) if m["model"] == MODEL), {})
        if endpoints <= {r.get("endpoint") for r in entry.get("replicas", []) if r["state"] == "ready"}:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the router does not route to {endpoints}")


async def test_pods_serve_through_the_router(fleet, core):
    """The kubernetes cluster's replicas are pods (one per replica, at their pod IPs, pinned to sim
    nodes registered as Nodes) and serve the openai SDK through the router beside local replicas."""
    async with aiohttp.ClientSession() as session:
        status = await fleet.wait_for(session, lambda s: len(ready_chat(s)) >= 3 and ready_chat(s, KUBE), 150,
                                      "3 ready chat replicas, one on Kubernetes")
        kube_replicas = ready_chat(status, KUBE)
        pods = (await core.list_namespaced_pod("meridian", label_selector="meridian.dev/cluster=aws-use1")).items
        by_id = {p.metadata.labels["meridian.dev/replica-id"]: p for p in pods}
        for r in kube_replicas:
            pod = by_id[r["replica_id"]]
            assert r["endpoint"] == f"http://{pod.status.pod_ip}:30000" and pod.status.pod_ip.startswith("127.77.")
            assert pod.spec.node_name.startswith("aws-use1-l4-")
        nodes = {n.metadata.name for n in (await core.list_node()).items}
        assert {p.spec.node_name for p in pods} <= nodes
        await routed(fleet, session, {r["endpoint"] for r in kube_replicas})
    c = sdk(fleet)
    try:
        replies = await asyncio.gather(*(c.chat.completions.create(model=MODEL, max_tokens=8,
                                                                   messages=[{"role": "user", "content": f"hi {i}"}])
                                         for i in range(12)))
        assert all(r.choices[0].message.content for r in replies)
        stream = await c.chat.completions.create(model=MODEL, max_tokens=6, stream=True,
                                                 messages=[{"role": "user", "content": "stream"}])
        chunks = [ch async for ch in stream]
        assert sum(1 for ch in chunks if ch.choices and ch.choices[0].delta.content) >= 2
    finally:
        await c.close()


async def test_a_pod_killed_under_load_fails_no_request_and_is_replaced(fleet, core):
    """A replica pod deleted with grace 0 mid-load: every non-streaming request still succeeds (the
    router retries elsewhere), the agent reports the replica gone and the scheduler replaces it."""
    async with aiohttp.ClientSession() as session:
        status = await fleet.wait_for(session, lambda s: len(ready_chat(s)) >= 3 and ready_chat(s, KUBE), 120,
                                      "a settled fleet")
        victim = ready_chat(status, KUBE)[0]
        await routed(fleet, session, {r["endpoint"] for r in ready_chat(status)})
        stop, results = asyncio.Event(), []
        c = sdk(fleet)

        async def worker(i: int) -> None:
            while not stop.is_set():
                try:
                    r = await c.chat.completions.create(model=MODEL, max_tokens=32,
                                                        messages=[{"role": "user", "content": f"load {i}"}])
                    results.append((True, r.choices[0].message.content))
                except openai.OpenAIError as exc:
                    results.append((False, repr(exc)))

        workers = [asyncio.create_task(worker(i)) for i in range(6)]
        try:
            await asyncio.sleep(2.0)
            pod_name = next(p.metadata.name for p in (await core.list_namespaced_pod(
                "meridian", label_selector=f"meridian.dev/replica-id={victim['replica_id']}")).items)
            await core.delete_namespaced_pod(pod_name, "meridian", grace_period_seconds=0)
            await asyncio.sleep(6.0)
        finally:
            stop.set()
            await asyncio.gather(*workers)
            await c.close()
        failed = [r for r in results if not r[0]]
        assert len(results) > 20 and not failed, (len(results), failed[:3], router_trouble(fleet))
        status = await fleet.wait_for(
            session, lambda s: len(ready_chat(s)) >= 3 and victim["replica_id"] not in {r["replica_id"] for r in ready_chat(s)},
            120, "the killed replica replaced")
        assert all(r["replica_id"] != victim["replica_id"] for r in ready_chat(status))
