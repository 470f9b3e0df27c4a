"""The API server briefly unreachable: pause_api() drops the listener, every open watch and every
kept-alive connection while the cluster keeps running; resume_api() listens on the same port and a
watch resumed from the last resourceVersion it saw gets what changed meanwhile."""

from __future__ import annotations

import asyncio

import aiohttp
import kube_helpers as h
import pytest
from kubernetes_asyncio import watch

from agents.testing.kube import objects


async def test_watch_ends_requests_fail_and_containers_keep_running_while_paused(cluster, core, tmp_path):
    """While paused, the open watch ends with a connection error, requests fail, and the pod still serves on its IP."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", h.pod_manifest("p"))
    pod = await h.wait_until(lambda: _ready(core, "p"), what="ready")
    await core.list_node()  # leaves a kept-alive connection in the client's pool
    errors: list[BaseException] = []
    last_rv: list[str] = [pod.metadata.resource_version]

    async def consume():
        w = watch.Watch()
        try:
            async for event in w.stream(core.list_namespaced_pod, "default", resource_version=last_rv[0]):
                last_rv[0] = event["object"].metadata.resource_version
        except (aiohttp.ClientError, OSError) as exc:
            errors.append(exc)
        finally:
            await w.close()

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.3)
    port = cluster.port
    await cluster.pause_api()
    await asyncio.wait_for(task, 10)
    assert errors, "the watch should end with a connection error while the API is down"
    with pytest.raises((aiohttp.ClientError, OSError)):
        await core.list_node()
    async with aiohttp.ClientSession() as session, session.get(f"http://{pod.status.pod_ip}:8080/") as resp:
        assert (await resp.text()).strip() == "p"  # the container never noticed
    await cluster.resume_api()
    assert cluster.port == port
    assert [n.metadata.name for n in (await core.list_node()).items] == ["n1"]


async def test_watch_resumes_after_resume_api_with_the_changes_made_meanwhile(cluster, core, tmp_path):
    """Changes made while the API was down (a pod turning Ready, a node cordoned) arrive on a watch resumed from the last seen version."""
    cluster.add_node("n1")
    ready_file = tmp_path / "ready"
    await core.create_namespaced_pod("default", h.pod_manifest("p", env=[{"name": "READY_FILE",
                                                                          "value": str(ready_file)}]))

    async def running():
        pod = await core.read_namespaced_pod("p", "default")
        return pod if pod.status.phase == "Running" else None

    seen = await h.wait_until(running, what="running")
    await cluster.pause_api()
    ready_file.write_text("ok")  # the kubelet notices while the API is down
    await h.wait_until(lambda: objects.is_pod_ready(cluster.store.get("pods", "default", "p")),
                       what="ready in the store")
    await cluster.resume_api()
    got_ready = []
    w = watch.Watch()
    async with w:
        async for event in w.stream(core.list_namespaced_pod, "default", resource_version=seen.metadata.resource_version,
                                    timeout_seconds=5):
            conditions = {c.type: c.status for c in event["object"].status.conditions or []}
            if conditions.get("Ready") == "True":
                got_ready.append(event["type"])
                w.stop()
    assert got_ready == ["MODIFIED"]


async def test_pause_and_resume_are_checked(cluster):
    """resume_api without a pause and a second pause are refused with a clear error."""
    with pytest.raises(RuntimeError, match="resume_api needs a paused cluster"):
        await cluster.resume_api()
    await cluster.pause_api()
    with pytest.raises(RuntimeError, match="pause_api needs a started, unpaused cluster"):
        await cluster.pause_api()
    await cluster.resume_api()


async def _ready(core, name):
    pod = await core.read_namespaced_pod(name, "default")
    return pod if {c.type: c.status for c in pod.status.conditions or []}.get("Ready") == "True" else None
