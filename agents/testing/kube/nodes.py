"""Node objects as a kubelet registers them, and the node lifecycle controller's taints.

``node_object`` is what a freshly registered, Ready kubelet reports (capacity = allocatable, the four
standard conditions, InternalIP + Hostname addresses, nodeInfo). ``condition_taints`` is the rule of
the controller's TaintNodesByCondition / taint-based eviction: a node whose Ready condition is False
gets ``node.kubernetes.io/not-ready`` (NoSchedule and NoExecute), Unknown gets ``unreachable``, a
cordoned node ``unschedulable:NoSchedule``, a pressure condition its ``*-pressure:NoSchedule``."""

from __future__ import annotations

import fractions
import uuid
from collections.abc import Mapping, Sequence

from agents.testing.kube import objects

KUBELET_VERSION = "v1.31.0"
GPU = "nvidia.com/gpu"
CONTROLLER_TAINT_PREFIX = "node.kubernetes.io/"

_CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)
_PRESSURE_TAINTS = {"MemoryPressure": "memory-pressure", "DiskPressure": "disk-pressure",
                    "PIDPressure": "pid-pressure", "NetworkUnavailable": "network-unavailable"}


def node_object(name: str, *, ip: str, now: str, labels: Mapping[str, str], gpus: int, taints: Sequence[Mapping],
                cpu: str, memory: str, provider_id: str) -> dict:
    capacity = {"cpu": str(cpu), "memory": str(memory), "pods": "110", "ephemeral-storage": "100Gi",
                "hugepages-2Mi": "0"}
    if gpus:
        capacity[GPU] = str(gpus)
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", **dict(labels)}
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "labels": all_labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"providerID": provider_id or f"fake://{name}",
                 **({"taints": [dict(t) for t in taints]} if taints else {})},
        "status": {
            "capacity": dict(capacity), "allocatable": dict(capacity),
            "conditions": [{"type": t, "status": s, "reason": r, "message": m, "lastHeartbeatTime": now,
                            "lastTransitionTime": now} for t, s, r, m in _CONDITIONS],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": uuid.uuid4().hex, "systemUUID": str(uuid.uuid4()), "bootID": str(uuid.uuid4()),
                         "kernelVersion": "6.1.0-fake", "osImage": "Meridian fake node", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "fake://1.0.0",
                         "kubeletVersion": KUBELET_VERSION, "kubeProxyVersion": KUBELET_VERSION},
        },
    }


def internal_ip(node: Mapping) -> str | None:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return address.get("address")
    return None


def allocatable(node: Mapping, resource: str) -> fractions.Fraction:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    return objects.parse_quantity(value) if value is not None else fractions.Fraction(0)


def condition_taints(node: Mapping) -> list[dict]:
    """The taints the node lifecycle controller keeps on ``node`` given its conditions and spec."""
    want: list[dict] = []
    ready = objects.condition(node, "Ready")
    status = ready.get("status") if ready else "Unknown"
    if status == "False":
        want += [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                 {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    elif status != "True":
        want += [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                 {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    if (node.get("spec") or {}).get("unschedulable"):
        want.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    for cond_type, suffix in _PRESSURE_TAINTS.items():
        cond = objects.condition(node, cond_type)
        if cond and cond.get("status") == "True":
            want.append({"key": CONTROLLER_TAINT_PREFIX + suffix, "effect": "NoSchedule"})
    return want


def reconcile_taints(node: Mapping, now: str) -> list[dict] | None:
    """The node's taints with the controller's set replaced by ``condition_taints`` (None: unchanged).
    Taints that others set (the cloud, the operator) are kept as they are."""
    current = list((node.get("spec") or {}).get("taints") or [])
    want = condition_taints(node)
    mine = [t for t in current if str(t.get("key", "")).startswith(CONTROLLER_TAINT_PREFIX)
            and any(t.get("key") == w["key"] and t.get("effect") == w["effect"] for w in want)]
    others = [t for t in current if not (str(t.get("key", "")).startswith(CONTROLLER_TAINT_PREFIX)
                                         and t.get("key", "").split("/", 1)[1] in
                                         ("not-ready", "unreachable", "unschedulable", *_PRESSURE_TAINTS.values()))]
    added = [{**w, "timeAdded": now} if w["effect"] == "NoExecute" else dict(w) for w in want
             if not any(t.get("key") == w["key"] and t.get("effect") == w["effect"] for t in mine)]
    result = others + mine + added
    return None if result == current else result
