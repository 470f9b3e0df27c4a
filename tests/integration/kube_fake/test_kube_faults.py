"""Pod termination and node faults in the fake cluster, observed through the real client and the real
processes: graceful delete (preStop, SIGTERM, SIGKILL after the grace period), force delete, kubelet
and API eviction, node removal, graceful node shutdown, and stop() leaving no process behind."""

from __future__ import annotations

import asyncio
import os
import time

import kube_helpers as h
import pytest
from kubernetes_asyncio import watch

from agents.testing import kube


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose (its parent may not have reaped it yet).
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def prestop_pod(name: str, tmp_path, *, grace: int, env=(), prestop_sleep_s: float = 0.0) -> dict:
    manifest = h.pod_manifest(name, env=[
        {"name": "PRESTOP_LOG", "value": str(tmp_path / f"{name}.prestop")},
        {"name": "TERM_LOG", "value": str(tmp_path / f"{name}.term")},
        {"name": "PRESTOP_SLEEP_S", "value": str(prestop_sleep_s)}, *env])
    manifest["spec"]["terminationGracePeriodSeconds"] = grace
    manifest["spec"]["containers"][0]["lifecycle"] = {"preStop": {"httpGet": {"path": "/prestop", "port": "http"}}}
    return manifest


async def ready(core, name):
    pod = await core.read_namespaced_pod(name, "default")
    conditions = {c.type: c.status for c in pod.status.conditions or []}
    return pod if conditions.get("Ready") == "True" else None


async def deleted_event(core, name, since_rv, timeout_s=15.0):
    """The DELETED event's object for pod ``name`` (watched from ``since_rv``)."""
    w = watch.Watch()
    async with w:
        async for event in w.stream(core.list_namespaced_pod, "default", field_selector=f"metadata.name={name}",
                                    resource_version=since_rv, timeout_seconds=int(timeout_s)):
            if event["type"] == "DELETED":
                return event["object"]
    raise AssertionError(f"no DELETED event for {name}")


async def test_graceful_delete_runs_prestop_then_sigterm_then_removes_the_pod(cluster, core, tmp_path):
    """Delete with a grace period: deletionTimestamp set, preStop called, SIGTERM sent, the process exits, DELETED follows."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", prestop_pod("g", tmp_path, grace=10))
    pod = await h.wait_until(lambda: ready(core, "g"), what="ready")
    pid = cluster.container_pid("default", "g")
    returned = await core.delete_namespaced_pod("g", "default")
    assert returned.metadata.deletion_timestamp is not None and returned.metadata.deletion_grace_period_seconds == 10
    final = await deleted_event(core, "g", returned.metadata.resource_version)
    assert (tmp_path / "g.prestop").read_text().startswith("prestop")
    prestop_at = float((tmp_path / "g.prestop").read_text().split()[1])
    term_at = float((tmp_path / "g.term").read_text().split()[1])
    assert prestop_at <= term_at  # preStop first, then SIGTERM
    assert final.status.phase == "Succeeded"  # the server exited 0 on SIGTERM
    assert final.status.container_statuses[0].state.terminated.exit_code == 0
    assert not alive(pid)
    assert pod.status.pod_ip


async def test_sigkill_when_the_grace_period_ends(cluster, core, tmp_path):
    """A container that ignores SIGTERM is SIGKILLed when the grace period ends, not before."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", prestop_pod("stubborn", tmp_path, grace=2,
                                                            env=[{"name": "IGNORE_TERM", "value": "1"}]))
    await h.wait_until(lambda: ready(core, "stubborn"), what="ready")
    pid = cluster.container_pid("default", "stubborn")
    started = time.monotonic()
    returned = await core.delete_namespaced_pod("stubborn", "default")
    final = await deleted_event(core, "stubborn", returned.metadata.resource_version)
    took = time.monotonic() - started
    assert 1.8 <= took < 6.0, took
    assert (tmp_path / "stubborn.term").exists()
    terminated = final.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 137 and final.status.phase == "Failed"
    assert not alive(pid)


async def test_prestop_overrunning_the_grace_gets_two_more_seconds(cluster, core, tmp_path):
    """A preStop still running at the end of the grace period: SIGTERM then, SIGKILL 2 s later."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", prestop_pod("slow", tmp_path, grace=1, prestop_sleep_s=10,
                                                            env=[{"name": "IGNORE_TERM", "value": "1"}]))
    await h.wait_until(lambda: ready(core, "slow"), what="ready")
    started = time.monotonic()
    returned = await core.delete_namespaced_pod("slow", "default")
    await deleted_event(core, "slow", returned.metadata.resource_version)
    took = time.monotonic() - started
    assert 2.8 <= took < 7.0, took
    assert (tmp_path / "slow.term").exists()


async def test_delete_with_grace_zero_kills_at_once(cluster, core, tmp_path):
    """gracePeriodSeconds=0 removes the pod object at once and the container dies without preStop."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", prestop_pod("now", tmp_path, grace=30))
    await h.wait_until(lambda: ready(core, "now"), what="ready")
    pid = cluster.container_pid("default", "now")
    await core.delete_namespaced_pod("now", "default", grace_period_seconds=0)
    assert [p.metadata.name for p in (await core.list_namespaced_pod("default")).items] == []
    await h.wait_until(lambda: not alive(pid), timeout_s=3, what="process gone")
    assert not (tmp_path / "now.prestop").exists()


async def test_kubelet_eviction_fails_the_pod_and_keeps_the_object(cluster, core, tmp_path):
    """A kubelet eviction stops the container, leaves the pod Failed/Evicted with DisruptionTarget, and does not restart it."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", h.pod_manifest("ev"))
    await h.wait_until(lambda: ready(core, "ev"), what="ready")
    pid = cluster.container_pid("default", "ev")
    await cluster.evict_pod("default", "ev", "The node was low on resource: memory. ")
    pod = await core.read_namespaced_pod("ev", "default")
    assert pod.status.phase == "Failed" and pod.status.reason == "Evicted"
    assert pod.status.message == "The node was low on resource: memory. "
    target = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
    assert target.status == "True" and target.reason == "TerminationByKubelet"
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"
    assert not alive(pid)
    await asyncio.sleep(0.5)
    assert cluster.container_pid("default", "ev") is None
    assert (await core.read_namespaced_pod("ev", "default")).status.container_statuses[0].restart_count == 0


async def test_api_eviction_deletes_gracefully(cluster, core, tmp_path):
    """POST pods/<name>/eviction deletes the pod gracefully (preStop runs) with DisruptionTarget EvictionByEvictionAPI."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", prestop_pod("api-ev", tmp_path, grace=5))
    pod = await h.wait_until(lambda: ready(core, "api-ev"), what="ready")
    await core.create_namespaced_pod_eviction("api-ev", "default", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "api-ev", "namespace": "default"}})
    final = await deleted_event(core, "api-ev", pod.metadata.resource_version)
    assert (tmp_path / "api-ev.prestop").exists()
    target = next(c for c in final.status.conditions if c.type == "DisruptionTarget")
    assert target.reason == "EvictionByEvictionAPI"


async def test_node_removal_kills_its_pods_and_deletes_them_with_node_lost(cluster, core):
    """Removing a node kills its containers at once and deletes its pods; the DELETED object says NodeLost."""
    cluster.add_node("doomed")
    await core.create_namespaced_pod("default", h.pod_manifest("lost"))
    pod = await h.wait_until(lambda: ready(core, "lost"), what="ready")
    pid = cluster.container_pid("default", "lost")
    watcher = asyncio.create_task(deleted_event(core, "lost", pod.metadata.resource_version))
    await asyncio.sleep(0.2)
    cluster.remove_node("doomed")
    final = await asyncio.wait_for(watcher, 10)
    assert final.status.reason == "NodeLost" and final.status.phase == "Failed"
    assert next(c for c in final.status.conditions if c.type == "DisruptionTarget").reason == "DeletionByPodGC"
    assert (await core.list_node()).items == []
    await h.wait_until(lambda: not alive(pid), timeout_s=3, what="process gone")


async def test_graceful_node_shutdown_terminates_pods_and_marks_the_node(cluster, core, tmp_path):
    """Graceful shutdown: node Ready=False 'node is shutting down', preStop runs, pods end Failed/Terminated, no new pods land."""
    cluster.add_node("gke-spot")
    await core.create_namespaced_pod("default", prestop_pod("s1", tmp_path, grace=30))
    await h.wait_until(lambda: ready(core, "s1"), what="ready")
    pid = cluster.container_pid("default", "s1")
    started = time.monotonic()
    await cluster.shutdown_node("gke-spot", grace_s=3)
    assert time.monotonic() - started < 6
    pod = await core.read_namespaced_pod("s1", "default")
    assert pod.status.phase == "Failed" and pod.status.reason == "Terminated"
    assert pod.status.message == "Pod was terminated in response to imminent node shutdown."
    assert (tmp_path / "s1.prestop").exists() and not alive(pid)
    node = await core.read_node("gke-spot")
    ready_cond = next(c for c in node.status.conditions if c.type == "Ready")
    assert (ready_cond.status, ready_cond.reason, ready_cond.message) == ("False", "KubeletNotReady",
                                                                          "node is shutting down")
    assert {(t.key, t.effect) for t in node.spec.taints} >= {("node.kubernetes.io/not-ready", "NoSchedule")}
    await core.create_namespaced_pod("default", h.pod_manifest("late"))

    async def refused():
        late = await core.read_namespaced_pod("late", "default")
        cond = next((c for c in late.status.conditions or [] if c.type == "PodScheduled"), None)
        return cond is not None and "node.kubernetes.io/not-ready" in (cond.message or "")

    await h.wait_until(refused, what="late pod refused")


async def test_stop_leaves_no_process_behind(tmp_path):
    """stop() kills every container's process group, children included, and waits for them to exit."""
    fake = kube.FakeCluster(workdir=tmp_path / "kube", command_map={"srv:1": ["python", h.write_server(tmp_path)]})
    await fake.start()
    try:
        fake.add_node("n1")
        fake.add_node("n2")
        for n in range(3):
            fake.registry.create("pods", "default", h.pod_manifest(f"p{n}", image="srv:1"))
        fake.registry.create("pods", "default", {"metadata": {"name": "forker"}, "spec": {"containers": [{
            "name": "m", "image": "python:3",
            "command": ["python", "-c", ("import subprocess, time; subprocess.Popen(['sleep', '300']); "
                                         "print('spawned', flush=True); time.sleep(300)")]}]}})
        await h.wait_until(lambda: all(fake.container_pid("default", n) for n in ("p0", "p1", "p2", "forker")),
                           what="all running")
        await h.wait_until(lambda: "spawned" in (fake.log_path("default", "forker", None, False).read_text()),
                           what="child spawned")
        pids = [fake.container_pid("default", n) for n in ("p0", "p1", "p2", "forker")]
        groups = {pid: [int(p) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == pid] for pid in pids}
        assert len(groups[pids[3]]) >= 2  # the forker's child shares its process group
    finally:
        await fake.stop()
    leftovers = [p for members in groups.values() for p in members if alive(p)]
    assert leftovers == []


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.mark.parametrize("status", ["False", "Unknown"])
async def test_not_ready_node_gets_taints_and_keeps_new_pods_off(cluster, core, status):
    """A node whose Ready condition turns False/Unknown gets the controller's not-ready/unreachable taints."""
    cluster.add_node("n1")
    cluster.set_node_condition("n1", "Ready", status, "NodeStatusUnknown" if status == "Unknown" else "Down", "x")
    key = "node.kubernetes.io/not-ready" if status == "False" else "node.kubernetes.io/unreachable"
    node = await core.read_node("n1")
    assert {(t.key, t.effect) for t in node.spec.taints} == {(key, "NoSchedule"), (key, "NoExecute")}
    cluster.set_node_condition("n1", "Ready", "True", "KubeletReady", "kubelet is posting ready status")
    assert (await core.read_node("n1")).spec.taints is None


async def test_the_fake_scheduler_ends_when_cancelled_in_the_step_a_wake_up_comes(tmp_path):
    """stop() cancels the fake's scheduler loop; a pod or node change that wakes the loop in the same
    loop step must not swallow that cancellation (Python 3.11's wait_for did: the loop ran on and
    stop() waited for ever, with every container left running)."""
    fake = kube.FakeCluster(workdir=tmp_path / "kube", command_map={})
    await fake.start()
    try:
        await asyncio.sleep(0.1)  # the loop is waiting for a wake-up
        task = fake.scheduler._task
        fake.scheduler._wake.set()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5.0)
        assert task in done and task.cancelled()
    finally:
        await fake.stop()
