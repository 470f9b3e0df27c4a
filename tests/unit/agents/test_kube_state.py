"""Pure readings of Kubernetes objects: a replica pod's status -> the replica state reported, and
a Node -> pool, usable or not, GPUs, reclaim signs -> interruption notices. The objects are shaped
as the API server reports them."""

from __future__ import annotations

import pytest

from meridian.fleet import models

from agents.backends.kubernetes import nodes, podstate

R = models.ReplicaState
NOW = 1_800_000_000.0


def _pod(phase="Running", *, ready=False, waiting=None, restarts=0, last_exit=None, scheduled=True, reason="",
         message="", deleting=False, unschedulable_msg=""):
    cs = {"name": "engine", "ready": ready, "restartCount": restarts, "state": {}}
    if waiting:
        cs["state"] = {"waiting": {"reason": waiting, "message": f"{waiting} message"}}
    elif phase == "Running":
        cs["state"] = {"running": {"startedAt": "2026-12-01T10:00:00Z"}}
    if last_exit is not None:
        cs["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error"}}
    conditions = [{"type": "PodScheduled", "status": "True" if scheduled else "False",
                   **({} if scheduled else {"reason": "Unschedulable", "message": unschedulable_msg})}]
    if phase == "Running":
        conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    status = {"phase": phase, "conditions": conditions, "podIP": "10.1.2.3", "hostIP": "10.0.0.5",
              "containerStatuses": [cs] if scheduled else []}
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    meta = {"name": "mr-r1", "creationTimestamp": "2026-12-01T10:00:00Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:05:00Z"
    return {"metadata": meta, "status": status}


def _read(pod, *, age_s=10.0, was_ready=False, **kw):
    return podstate.interpret(pod, now=NOW, created_at=NOW - age_s, was_ready=was_ready, start_timeout_s=600,
                              max_restarts=5, **kw)


def test_pending_states_are_starting_with_the_reason():
    """Unschedulable, ContainerCreating and ImagePullBackOff are STARTING, each with its reason."""
    v = _read(_pod("Pending", scheduled=False,
                   unschedulable_msg="0/3 nodes are available: 1 Insufficient nvidia.com/gpu."))
    assert v.state == R.STARTING and "Insufficient nvidia.com/gpu" in v.message and v.reason == "Unschedulable"
    assert _read(_pod("Pending", waiting="ContainerCreating")).message.startswith("ContainerCreating")
    v = _read(_pod("Pending", waiting="ImagePullBackOff"))
    assert v.state == R.STARTING and v.reason == "ImagePullBackOff" and not v.delete


def test_a_pod_never_ready_within_the_start_timeout_fails_and_is_deleted():
    """Past pod_start_timeout_s without ever being ready: FAILED with the last reason, to be deleted."""
    v = _read(_pod("Pending", waiting="ImagePullBackOff"), age_s=601)
    assert v.state == R.FAILED and v.delete and "600s" in v.message and "ImagePullBackOff" in v.message
    # Once it has been ready, a later restart is not a start timeout.
    assert _read(_pod(waiting="CrashLoopBackOff", restarts=1), age_s=9999, was_ready=True).state == R.STARTING


def test_running_and_ready_is_ready_with_its_restarts_and_ip():
    """Running with the Ready condition and a ready container is READY; restarts and pod IP come along."""
    v = _read(_pod(ready=True, restarts=2))
    assert (v.state, v.restarts, v.pod_ip, v.host_ip) == (R.READY, 2, "10.1.2.3", "10.0.0.5")
    assert _read(_pod(ready=False)).state == R.STARTING


def test_crash_loop_past_the_limit_fails_and_is_deleted():
    """CrashLoopBackOff is STARTING (with the last exit) until max_restarts, then FAILED and deleted."""
    v = _read(_pod(waiting="CrashLoopBackOff", restarts=2, last_exit=137), was_ready=True)
    assert v.state == R.STARTING and "exit code 137" in v.message
    v = _read(_pod(waiting="CrashLoopBackOff", restarts=5, last_exit=1), was_ready=True)
    assert v.state == R.FAILED and v.delete and "restarted 5 times" in v.message and v.reason == "CrashLoop"


def test_a_failing_init_step_is_reported_and_its_crash_loop_fails_the_replica():
    """The model-cache-owner step runs before the engine: while it fails, the replica is STARTING
    with that step's reason and exit, and its crash loop past max_restarts fails the replica (the
    engine's status alone said PodInitializing for the whole start timeout)."""
    def initialising(restarts: int) -> dict:
        pod = _pod("Pending", waiting="PodInitializing")
        pod["status"]["initContainerStatuses"] = [{
            "name": "model-cache-owner", "ready": False, "restartCount": restarts,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]
        return pod

    v = _read(initialising(2))
    assert v.state == R.STARTING and v.restarts == 2
    assert v.message.startswith("init step model-cache-owner: CrashLoopBackOff") and "exit code 1" in v.message
    v = _read(initialising(5))
    assert v.state == R.FAILED and v.delete and v.reason == "CrashLoop"
    assert "the init step model-cache-owner restarted 5 times; last exit code 1" in v.message
    done = _pod(ready=True)
    done["status"]["initContainerStatuses"] = [{"name": "model-cache-owner", "restartCount": 0,
                                                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]
    assert _read(done).state == R.READY


@pytest.mark.parametrize("reason,message,words", [
    ("Evicted", "The node was low on resource: memory.", "evicted: The node was low on resource: memory."),
    ("Terminated", "Pod was terminated in response to imminent node shutdown.", "terminated: Pod was terminated"),
])
def test_evicted_and_node_shutdown_pods_fail_with_the_reason(reason, message, words):
    """A Failed pod (eviction, graceful node shutdown) is FAILED with the kubelet's reason and deleted."""
    v = _read(_pod("Failed", reason=reason, message=message))
    assert v.state == R.FAILED and v.reason == reason and words in v.message and v.delete


def test_deletion_is_draining_then_stopped_or_failed_by_whom():
    """Being deleted is DRAINING; gone is STOPPED when this agent deleted it, FAILED otherwise (node
    lost, or someone else deleted it)."""
    assert _read(_pod(ready=True, deleting=True), deleted_by_us=True).state == R.DRAINING
    v = _read(_pod(ready=True, deleting=True))
    assert v.state == R.DRAINING and "someone else" in v.message
    assert _read(_pod(ready=True), deleted=True, deleted_by_us=True).state == R.STOPPED
    lost = _read(_pod("Failed", reason="NodeLost", message="node n1 removed"), deleted=True)
    assert lost.state == R.FAILED and lost.reason == "NodeLost" and "node lost" in lost.message
    other = _read(_pod(ready=True), deleted=True)
    assert other.state == R.FAILED and "deleted by someone else" in other.message


def _node(name="n1", *, pool="l4", gpus="4", ready="True", message="", unschedulable=False, taints=(),
          provider_id="", conditions=()):
    return {"metadata": {"name": name, "labels": {"meridian.dev/pool": pool,
                                                  "node.kubernetes.io/instance-type": "g6.12xlarge"}},
            "spec": {"unschedulable": unschedulable, "taints": list(taints), "providerID": provider_id},
            "status": {"allocatable": {"nvidia.com/gpu": gpus},
                       "conditions": [{"type": "Ready", "status": ready, "message": message}, *conditions]}}


RULES = nodes.ReclaimRules(taints=("aws-node-termination-handler/*", "cloud.google.com/impending-node-termination"),
                           conditions=({"type": "Ready", "status": "False",
                                        "message_contains": "node is shutting down"},), cordon=False)
GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def _info(node, rules=RULES):
    return nodes.read(node, pool_label="meridian.dev/pool", rules=rules)


def test_usable_nodes_are_ready_schedulable_tolerated_and_not_reclaimed():
    """Only a Ready, uncordoned node whose taints the pool tolerates, with GPUs, takes a replica;
    each other node says why not."""
    infos = [_info(_node("ok", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])),
             _info(_node("notready", ready="False")), _info(_node("cordoned", unschedulable=True)),
             _info(_node("tainted", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])),
             _info(_node("nogpu", gpus="0")), _info(_node("other-pool", pool="h100"))]
    view = nodes.views(infos, {"l4": "l4"}, {"l4": GPU_TOLERATION})["l4"]
    assert view.usable == ("ok",)
    assert view.present == frozenset({"ok", "notready", "cordoned", "tainted", "nogpu"})
    assert view.unusable == {"notready": "not Ready", "cordoned": "cordoned",
                             "tainted": "taint dedicated:NoSchedule not tolerated", "nogpu": "no allocatable nvidia.com/gpu"}
    assert view.gpus_by_node["ok"] == 4 and view.instance_types["ok"] == "g6.12xlarge"


@pytest.mark.parametrize("node,sign", [
    (_node(unschedulable=True, taints=[{"key": "aws-node-termination-handler/spot-itn", "value": "evt-1",
                                        "effect": "NoSchedule"}]), "taint aws-node-termination-handler/spot-itn=evt-1"),
    (_node(taints=[{"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}]),
     "taint cloud.google.com/impending-node-termination"),
    (_node(ready="False", message="node is shutting down"), "condition Ready=False (node is shutting down)"),
])
def test_each_clouds_reclaim_sign_becomes_a_notice(node, sign):
    """The NTH spot taint, GKE's impending-termination taint and graceful shutdown's NotReady are
    reclaim signs: the node is unusable and a notice names it, with the deadline first seen + notice."""
    info = _info(node)
    assert info.reclaim.startswith(sign)
    assert nodes.why_unusable(info, GPU_TOLERATION).startswith("being reclaimed")
    (notice,) = nodes.notices([info], {"l4": "l4"}, {"n1": NOW}, 120.0)
    assert (notice.pool_id, notice.node_id, notice.deadline) == ("l4", "n1", NOW + 120.0)
    assert sign in notice.message


def test_a_plain_not_ready_or_cordon_is_no_reclaim_unless_configured():
    """NotReady for another reason, or a cordon, is no notice; a cordon is one where the rules say so (AWS)."""
    assert _info(_node(ready="False", message="kubelet stopped posting")).reclaim == ""
    assert _info(_node(unschedulable=True)).reclaim == ""
    assert _info(_node(unschedulable=True), nodes.ReclaimRules(cordon=True)).reclaim == "cordoned"


def test_cloud_ids_come_from_the_provider_id():
    """EC2 instance id, GCE instance name, scale set VM name, else the node name."""
    assert nodes.cloud_id(_node(provider_id="aws:///us-east-1a/i-0abc123")) == "i-0abc123"
    assert nodes.cloud_id(_node(provider_id="gce://proj/us-central1-a/gke-pool-1-abcd")) == "gke-pool-1-abcd"
    azure = ("azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/"
             "aks-gpu-123-vmss/virtualMachines/4")
    assert nodes.cloud_id(_node(provider_id=azure)) == "aks-gpu-123-vmss_4"
    assert nodes.cloud_id(_node("plain")) == "plain"
