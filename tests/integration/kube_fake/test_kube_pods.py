"""The fake scheduler and kubelets, observed through the real kubernetes_asyncio client: pods bound
and run as real processes on their own loopback IPs, readiness probes, crash restarts with
CrashLoopBackOff, image pull errors, restart policies, logs and the downward API."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import aiohttp
import kube_helpers as h
import pytest
from kubernetes_asyncio import watch


def status_of(pod):
    return pod.status.container_statuses[0] if pod.status.container_statuses else None


async def read(core, name):
    return await core.read_namespaced_pod(name, "default")


async def test_pod_is_scheduled_runs_on_its_ip_and_becomes_ready(cluster, core, tmp_path):
    """A pod is bound (PodScheduled), runs as a process bound to its own pod IP, and turns Ready when its probe passes."""
    cluster.add_node("n1")
    ready_file = tmp_path / "ready-a"
    await core.create_namespaced_pod("default", h.pod_manifest("a", env=[{"name": "READY_FILE",
                                                                          "value": str(ready_file)}]))
    await core.create_namespaced_pod("default", h.pod_manifest("b"))
    pod = await h.wait_until(lambda: _running(core, "a"), what="pod a running")
    assert pod.spec.node_name == "n1"
    assert {c.type: c.status for c in pod.status.conditions}["PodScheduled"] == "True"
    assert pod.status.pod_ip.startswith("127.77.") and pod.status.host_ip.startswith("127.76.")
    assert status_of(pod).state.running.started_at is not None and status_of(pod).restart_count == 0
    await asyncio.sleep(1.5)
    pod = await read(core, "a")
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"  # the probe answers 503
    ready_file.write_text("ok")
    pod = await h.wait_until(lambda: _ready(core, "a"), what="pod a ready")
    assert status_of(pod).ready is True and pod.status.phase == "Running"
    other = await h.wait_until(lambda: _ready(core, "b"), what="pod b ready")
    assert other.status.pod_ip != pod.status.pod_ip
    async with aiohttp.ClientSession() as session:  # both bind port 8080, each on its own IP
        for p in (pod, other):
            async with session.get(f"http://{p.status.pod_ip}:8080/") as resp:
                assert (await resp.text()).strip() == p.metadata.name
    events = await core.list_namespaced_event("default", field_selector="involvedObject.name=a")
    assert {"Scheduled", "Pulled", "Created", "Started", "Unhealthy"} <= {e.reason for e in events.items}


async def _running(core, name):
    pod = await read(core, name)
    cs = status_of(pod)
    return pod if pod.status.phase == "Running" and cs and cs.state.running else None


async def _ready(core, name):
    pod = await read(core, name)
    conditions = {c.type: c.status for c in pod.status.conditions or []}
    return pod if conditions.get("Ready") == "True" else None


async def test_unschedulable_message_then_scheduled_when_a_node_fits(cluster, core):
    """A pod nothing fits is Unschedulable with the real scheduler's message; adding a fitting node binds it."""
    cluster.add_node("small", labels={"pool": "gpu"}, gpus=1)
    cluster.add_node("cpu-1", labels={"pool": "cpu"})
    cluster.add_node("cpu-2", labels={"pool": "cpu"})
    manifest = h.pod_manifest("big", nodeSelector={"pool": "gpu"})
    manifest["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 2}}
    await core.create_namespaced_pod("default", manifest)

    async def unschedulable():
        pod = await read(core, "big")
        cond = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        return cond if cond and cond.status == "False" else None

    cond = await h.wait_until(unschedulable, what="PodScheduled=False")
    assert cond.reason == "Unschedulable"
    assert cond.message == ("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's "
                            "node affinity/selector. preemption: 0/3 nodes are available: 1 No preemption victims "
                            "found for incoming pod, 2 Preemption is not helpful for scheduling.")
    events = await core.list_namespaced_event("default", field_selector="involvedObject.name=big,reason=FailedScheduling")
    assert events.items and events.items[0].type == "Warning"
    cluster.add_node("big-gpu", labels={"pool": "gpu"}, gpus=2)
    pod = await h.wait_until(lambda: _running(core, "big"), what="big running")
    assert pod.spec.node_name == "big-gpu"
    # The GPUs are taken now: a second identical pod waits.
    await core.create_namespaced_pod("default", {**manifest, "metadata": {"name": "big2"}})
    await h.wait_until(lambda: _unscheduled(core, "big2", "Insufficient nvidia.com/gpu"), what="big2 waits")


async def _unscheduled(core, name, fragment):
    pod = await read(core, name)
    cond = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
    return cond is not None and cond.status == "False" and fragment in (cond.message or "")


async def test_no_schedule_taint_keeps_new_pods_off_unless_tolerated(cluster, core):
    """A NoSchedule taint (the spot-termination handler's) keeps new pods off the node; a tolerating pod may land there."""
    cluster.add_node("spot")
    cluster.taint_node("spot", "aws-node-termination-handler/spot-itn", "notice-1", "NoSchedule")
    await core.create_namespaced_pod("default", h.pod_manifest("p"))
    await h.wait_until(lambda: _unscheduled(
        core, "p", "1 node(s) had untolerated taint {aws-node-termination-handler/spot-itn: notice-1}"),
        what="tainted node refused")
    tolerant = h.pod_manifest("t", tolerations=[{"key": "aws-node-termination-handler/spot-itn",
                                                 "operator": "Exists", "effect": "NoSchedule"}])
    await core.create_namespaced_pod("default", tolerant)
    assert (await h.wait_until(lambda: _running(core, "t"), what="tolerating pod runs")).spec.node_name == "spot"
    cluster.add_node("on-demand")
    assert (await h.wait_until(lambda: _running(core, "p"), what="p runs")).spec.node_name == "on-demand"
    cluster.cordon("on-demand")
    await core.create_namespaced_pod("default", h.pod_manifest("q"))
    await h.wait_until(lambda: _unscheduled(core, "q", "1 node(s) were unschedulable"), what="cordoned node refused")
    cluster.untaint_node("spot", "aws-node-termination-handler/spot-itn")
    assert (await h.wait_until(lambda: _running(core, "q"), what="q runs")).spec.node_name == "spot"


async def test_crash_restarts_with_restart_count_and_crash_loop_backoff(cluster, core):
    """A killed container restarts in place: restartCount +1, lastState terminated (137), then CrashLoopBackOff between restarts."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", h.pod_manifest("c", readiness=False))
    first = await h.wait_until(lambda: _running(core, "c"), what="running")
    seen = []

    async def watch_pod():
        w = watch.Watch()
        async with w:
            async for event in w.stream(core.list_namespaced_pod, "default", field_selector="metadata.name=c",
                                        resource_version=first.metadata.resource_version, timeout_seconds=20):
                cs = status_of(event["object"])
                if cs is not None:
                    seen.append(cs)
                    if cs.restart_count == 2 and cs.state.running:
                        w.stop()

    watcher = asyncio.create_task(watch_pod())
    pid1 = cluster.container_pid("default", "c")
    cluster.kill_container("default", "c")
    await h.wait_until(lambda: cluster.container_pid("default", "c") not in (None, pid1), what="restart 1")
    pid2 = cluster.container_pid("default", "c")
    cluster.kill_container("default", "c", signal.SIGKILL)
    await asyncio.wait_for(watcher, 20)
    assert cluster.container_pid("default", "c") not in (None, pid1, pid2)
    waiting = [cs for cs in seen if cs.state.waiting is not None]
    assert waiting and waiting[0].state.waiting.reason == "CrashLoopBackOff"
    assert "back-off" in waiting[0].state.waiting.message and waiting[0].restart_count == 1
    final = seen[-1]
    assert final.restart_count == 2 and final.last_state.terminated.exit_code == 137
    assert final.last_state.terminated.reason == "Error"
    pod = await read(core, "c")
    assert pod.status.phase == "Running" and pod.spec.node_name == "n1"


@pytest.mark.parametrize(("policy", "code", "phase", "restarts"), [
    ("Never", 3, "Failed", 0), ("Never", 0, "Succeeded", 0), ("OnFailure", 0, "Succeeded", 0)])
async def test_restart_policy_decides_the_final_phase(cluster, core, policy, code, phase, restarts):
    """A container that exits ends the pod Succeeded/Failed by restartPolicy and exit code, with the exit code kept."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", {
        "metadata": {"name": "job"},
        "spec": {"restartPolicy": policy, "containers": [
            {"name": "main", "image": "python:3", "command": ["python", "-c", f"import sys; sys.exit({code})"]}]}})

    async def done():
        pod = await read(core, "job")
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = await h.wait_until(done, what=f"{policy} pod done")
    assert pod.status.phase == phase
    cs = status_of(pod)
    assert cs.state.terminated.exit_code == code and cs.restart_count == restarts
    assert cs.state.terminated.reason == ("Completed" if code == 0 else "Error")


async def test_on_failure_restarts_an_exiting_container_with_backoff(cluster, core):
    """restartPolicy OnFailure restarts a container that exits non-zero, showing CrashLoopBackOff and its last exit code."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", {
        "metadata": {"name": "flaky"},
        "spec": {"restartPolicy": "OnFailure", "containers": [
            {"name": "main", "image": "python:3", "command": ["python", "-c", "import sys; sys.exit(3)"]}]}})

    async def looping():
        cs = status_of(await read(core, "flaky"))
        return cs if cs and cs.restart_count >= 2 and cs.last_state.terminated else None

    cs = await h.wait_until(looping, what="restarts")
    assert cs.last_state.terminated.exit_code == 3
    assert (await read(core, "flaky")).status.phase == "Running"


async def test_unknown_image_waits_in_image_pull_backoff(cluster, core):
    """An image the fake cannot run waits ErrImagePull / ImagePullBackOff and the pod stays Pending."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", {"metadata": {"name": "img"},
                                                 "spec": {"containers": [{"name": "c", "image": "ghcr.io/x/y:1"}]}})

    async def pulling():
        cs = status_of(await read(core, "img"))
        return cs if cs and cs.state.waiting and cs.state.waiting.reason in ("ErrImagePull", "ImagePullBackOff") \
            else None

    cs = await h.wait_until(pulling, what="image pull error")
    assert "ghcr.io/x/y:1" in cs.state.waiting.message
    assert (await read(core, "img")).status.phase == "Pending"


async def test_liveness_failure_restarts_the_container(cluster, core):
    """A failing liveness probe kills and restarts the container (Unhealthy and Killing events, restartCount rises)."""
    cluster.add_node("n1")
    manifest = h.pod_manifest("live", readiness=False)
    manifest["spec"]["containers"][0]["livenessProbe"] = {"httpGet": {"path": "/", "port": 9},
                                                          "periodSeconds": 1, "failureThreshold": 1}
    manifest["spec"]["terminationGracePeriodSeconds"] = 2
    await core.create_namespaced_pod("default", manifest)

    async def restarted():
        cs = status_of(await read(core, "live"))
        return cs if cs and cs.restart_count >= 1 else None

    await h.wait_until(restarted, timeout_s=15, what="liveness restart")
    reasons = {(e.reason, e.message.split(":")[0]) for e in
               (await core.list_namespaced_event("default", field_selector="involvedObject.name=live")).items}
    assert ("Unhealthy", "Liveness probe failed") in reasons
    assert ("Killing", "Container app failed liveness probe, will be restarted") in reasons


async def test_logs_env_expansion_and_downward_api(cluster, core):
    """$(VAR) in args expands from the container env, fieldRefs give pod name/IP/node, and the log endpoint serves stdout."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", {
        "metadata": {"name": "envy", "labels": {"team": "infra"}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "python:3",
            "command": ["python", "-c", "import sys, os; print(*sys.argv[1:]); print(os.environ['TEAM'])"],
            "args": ["pod=$(POD)", "ip=$(IP)", "node=$(NODE)", "$$(POD)", "$(MISSING)"],
            "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['team']"}}}]}]}})

    async def done():
        pod = await read(core, "envy")
        return pod if pod.status.phase == "Succeeded" else None

    pod = await h.wait_until(done, what="envy done")
    text = await core.read_namespaced_pod_log("envy", "default")
    assert text.splitlines() == [f"pod=envy ip={pod.status.pod_ip} node=n1 $(POD) $(MISSING)", "infra"]
    assert await core.read_namespaced_pod_log("envy", "default", tail_lines=1) == "infra\n"


async def test_python_argv0_runs_as_the_fakes_interpreter(cluster, core):
    """A bare ``python`` command runs with the fake's own interpreter, so the project's venv is importable."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", {"metadata": {"name": "which"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "m", "image": "python:3", "command": [
            "python", "-c", "import sys, agents; print(sys.executable)"]}]}})

    async def done():
        return (await read(core, "which")).status.phase in ("Succeeded", "Failed")

    await h.wait_until(done, what="done")
    assert (await core.read_namespaced_pod_log("which", "default")).strip() == sys.executable
    assert os.path.exists(sys.executable)


async def test_followed_log_streams_until_the_container_exits(cluster, core):
    """A followed log delivers lines as the container writes them and ends when it exits."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", {"metadata": {"name": "talker"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "m", "image": "python:3", "command": [
            "python", "-c", "import time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.4)"]}]}})
    await h.wait_until(lambda: cluster.container_pid("default", "talker"), what="talker runs")
    resp = await core.read_namespaced_pod_log("talker", "default", follow=True, _preload_content=False)
    body = await asyncio.wait_for(resp.read(), 10)
    assert body.decode().splitlines() == ["line 0", "line 1", "line 2"]


async def test_delete_collection_by_label(cluster, core):
    """DELETE on the collection with a label selector deletes only the matching pods."""
    cluster.add_node("n1")
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        await core.create_namespaced_pod("default", {**h.pod_manifest(name, labels={"team": team}),
                                                     "spec": {**h.pod_manifest(name)["spec"],
                                                              "terminationGracePeriodSeconds": 1}})
    await core.delete_collection_namespaced_pod("default", label_selector="team=x")

    async def only_c():
        return [p.metadata.name for p in (await core.list_namespaced_pod("default")).items] == ["c"]

    await h.wait_until(only_c, what="a and b gone")
