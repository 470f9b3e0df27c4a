"""Less common parts of the fake cluster, each pinned through the real client: init containers,
startup/exec/tcpSocket probes, postStart, finalizers, binding, namespace deletion, the taint
manager's NoExecute eviction, and list/watch resourceVersion corners (Exact, sendInitialEvents,
a version from the future)."""

from __future__ import annotations

import asyncio

import kube_helpers as h
import pytest
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException


async def phase_in(core, name, phases, namespace="default"):
    pod = await core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase in phases else None


def script_pod(name: str, script: str, **spec) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [
        {"name": "main", "image": "python:3", "command": ["python", "-c", script]}], **spec}}


async def test_init_containers_run_first_and_a_failing_one_fails_the_pod(cluster, core, tmp_path):
    """Init containers run to completion before the main container; one exiting non-zero under Never fails the pod."""
    cluster.add_node("n1")
    marker = tmp_path / "init-done"
    pod = script_pod("ordered", f"import os; print(os.path.exists({str(marker)!r}))", restartPolicy="Never")
    pod["spec"]["initContainers"] = [{"name": "prep", "image": "python:3",
                                      "command": ["python", "-c", f"open({str(marker)!r}, 'w').write('x')"]}]
    await core.create_namespaced_pod("default", pod)
    done = await h.wait_until(lambda: phase_in(core, "ordered", ("Succeeded", "Failed")), what="ordered done")
    assert done.status.phase == "Succeeded"
    assert done.status.init_container_statuses[0].state.terminated.exit_code == 0
    assert (await core.read_namespaced_pod_log("ordered", "default", container="main")).strip() == "True"
    bad = script_pod("bad-init", "print('never')", restartPolicy="Never")
    bad["spec"]["initContainers"] = [{"name": "prep", "image": "python:3", "command": ["python", "-c", "raise SystemExit(2)"]}]
    await core.create_namespaced_pod("default", bad)
    failed = await h.wait_until(lambda: phase_in(core, "bad-init", ("Failed",)), what="bad-init failed")
    assert failed.status.init_container_statuses[0].state.terminated.exit_code == 2
    assert failed.status.container_statuses[0].state.waiting is not None  # main never started


async def test_startup_exec_probe_gates_tcp_readiness_and_post_start_runs(cluster, core, tmp_path):
    """A startupProbe (exec) holds started=false and readiness until it passes; postStart ran; tcpSocket readiness then passes."""
    cluster.add_node("n1")
    gate = tmp_path / "started"
    hook = tmp_path / "post-start"
    manifest = h.pod_manifest("gated", readiness=False)
    container = manifest["spec"]["containers"][0]
    check = f"import os, sys; sys.exit(0 if os.path.exists({str(gate)!r}) else 1)"
    container["startupProbe"] = {"exec": {"command": ["python", "-c", check]},
                                 "periodSeconds": 1, "failureThreshold": 30}
    container["readinessProbe"] = {"tcpSocket": {"port": "http"}, "periodSeconds": 1}
    container["lifecycle"] = {"postStart": {"exec": {"command": ["python", "-c", f"open({str(hook)!r}, 'w')"]}}}
    await core.create_namespaced_pod("default", manifest)
    await h.wait_until(lambda: phase_in(core, "gated", ("Running",)), what="running")
    await asyncio.sleep(1.5)
    cs = (await core.read_namespaced_pod("gated", "default")).status.container_statuses[0]
    assert cs.started is False and cs.ready is False
    assert hook.exists()
    gate.write_text("ok")

    async def ready():
        cs = (await core.read_namespaced_pod("gated", "default")).status.container_statuses[0]
        return cs if cs.started and cs.ready else None

    await h.wait_until(ready, what="started and ready")


async def test_finalizer_holds_a_deleted_pod_until_removed(cluster, core):
    """A pod with a finalizer stays, terminating, after its containers stopped, until the finalizer is removed."""
    cluster.add_node("n1")
    manifest = h.pod_manifest("held", readiness=False)
    manifest["metadata"]["finalizers"] = ["meridian.dev/test"]
    manifest["spec"]["terminationGracePeriodSeconds"] = 1
    await core.create_namespaced_pod("default", manifest)
    await h.wait_until(lambda: phase_in(core, "held", ("Running",)), what="running")
    await core.delete_namespaced_pod("held", "default")
    held = await h.wait_until(lambda: phase_in(core, "held", ("Succeeded", "Failed")), what="containers stopped")
    assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == ["meridian.dev/test"]
    await core.patch_namespaced_pod("held", "default", [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(ApiException) as gone:
        await core.read_namespaced_pod("held", "default")
    assert gone.value.status == 404


async def test_binding_subresource_assigns_a_node(cluster, core):
    """POST pods/<name>/binding (an external scheduler) sets nodeName and the kubelet runs the pod; a second bind is 409."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", h.pod_manifest("manual", schedulerName="my-scheduler"))
    await asyncio.sleep(0.3)
    assert (await core.read_namespaced_pod("manual", "default")).spec.node_name is None
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "manual"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    # The server answers a Status, which the generated client cannot read as a V1Binding (a known
    # client quirk with the real server too), so the raw response is read.
    resp = await core.create_namespaced_pod_binding("manual", "default", body, _preload_content=False)
    assert resp.status == 201
    await h.wait_until(lambda: phase_in(core, "manual", ("Running",)), what="runs")
    twice = await core.create_namespaced_pod_binding("manual", "default", body, _preload_content=False)
    assert twice.status == 409 and "is already assigned to node" in (await twice.text())


async def test_namespace_deletion_removes_its_pods_then_itself(cluster, core):
    """Deleting a namespace terminates its pods, refuses new content with 403, and removes the namespace when empty."""
    cluster.add_node("n1")
    await core.create_namespace({"metadata": {"name": "team"}})
    manifest = h.pod_manifest("p")
    manifest["spec"]["terminationGracePeriodSeconds"] = 2
    manifest["spec"]["containers"][0]["env"].append({"name": "IGNORE_TERM", "value": "1"})
    await core.create_namespaced_pod("team", manifest)

    async def serving():  # Ready: the server runs and has installed its SIGTERM handler
        pod = await core.read_namespaced_pod("p", "team")
        return {c.type: c.status for c in pod.status.conditions or []}.get("Ready") == "True"

    await h.wait_until(serving, what="serving")
    await core.delete_namespace("team", _preload_content=False)
    assert (await core.read_namespace("team")).status.phase == "Terminating"
    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_pod("team", h.pod_manifest("q"))
    assert refused.value.status == 403 and "being terminated" in refused.value.body

    async def gone():
        return "team" not in {n.metadata.name for n in (await core.list_namespace()).items}

    await h.wait_until(gone, what="namespace gone")


async def test_no_execute_taint_evicts_untolerating_pods_and_tolerating_ones_after_their_seconds(cluster, core):
    """A NoExecute taint deletes pods that do not tolerate it at once, and those tolerating it for N s after N s."""
    cluster.add_node("n1")
    tolerate = {"key": "reclaim", "operator": "Exists", "effect": "NoExecute"}
    specs = {"plain": {}, "brief": {"tolerations": [{**tolerate, "tolerationSeconds": 1}]},
             "forever": {"tolerations": [tolerate]}}
    for name, extra in specs.items():
        manifest = h.pod_manifest(name, readiness=False, terminationGracePeriodSeconds=1, **extra)
        await core.create_namespaced_pod("default", manifest)
        await h.wait_until(lambda n=name: phase_in(core, n, ("Running",)), what=f"{name} running")
    cluster.taint_node("n1", "reclaim", "soon", "NoExecute")

    async def names():
        return {p.metadata.name for p in (await core.list_namespaced_pod("default")).items}

    await h.wait_until(lambda: _without(names, "plain"), timeout_s=5, what="plain evicted")
    assert "brief" in await names()
    await h.wait_until(lambda: _without(names, "brief"), timeout_s=6, what="brief evicted after 1 s")
    await asyncio.sleep(0.5)
    assert await names() == {"forever"}


async def _without(names, name):
    return name not in await names()


async def test_list_exact_snapshot_initial_events_and_future_versions(cluster, core):
    """resourceVersionMatch=Exact lists the past state; sendInitialEvents ends with the initial-events-end bookmark; a future version is 504."""
    created = await core.create_namespaced_pod("default", {**script_pod("x", "0"), "spec": {
        **script_pod("x", "0")["spec"], "schedulerName": "nobody"}})
    await core.patch_namespaced_pod("x", "default", {"metadata": {"labels": {"v": "2"}}})
    past = await core.list_namespaced_pod("default", resource_version=created.metadata.resource_version,
                                          resource_version_match="Exact")
    assert past.metadata.resource_version == created.metadata.resource_version
    assert past.items[0].metadata.labels is None
    now = await core.list_namespaced_pod("default", resource_version=created.metadata.resource_version,
                                         resource_version_match="NotOlderThan")
    assert now.items[0].metadata.labels == {"v": "2"}
    events = []
    w = watch.Watch()
    async with w:
        async for event in w.stream(core.list_namespaced_pod, "default", send_initial_events=True,
                                    allow_watch_bookmarks=True, resource_version_match="NotOlderThan",
                                    timeout_seconds=3):
            events.append(event)
            if event["type"] == "BOOKMARK":
                w.stop()
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[1]["raw_object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    with pytest.raises(ApiException) as future:
        await core.list_namespaced_pod("default", resource_version=str(cluster.store.resource_version + 100))
    assert future.value.status == 504 and "Too large resource version" in future.value.body
