"""The fake kube-scheduler: binds each pending pod to a feasible node, or marks it Unschedulable with
the real scheduler's message, and tries again when nodes or pods change.

``filter_node`` and ``schedule`` are pure. Filters run in the default profile's order and a node's
first failure is its reason (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit for
cpu, memory, pods and extended resources such as ``nvidia.com/gpu``). Among feasible nodes the least
allocated wins (ties by name), as NodeResourcesFit's LeastAllocated score would pick."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import fractions
import logging
from collections.abc import Mapping, Sequence

from meridian import waits

from agents.testing.kube import nodes, objects, registry, selectors, store, validation

log = logging.getLogger("agents.testing.kube.scheduler")

SCHEDULER_NAME = "default-scheduler"
_RESOURCE_REASONS = ("Insufficient", "Too many pods")


@dataclasses.dataclass(frozen=True)
class Decision:
    node: str | None
    message: str = ""


def pod_requests(pod: Mapping) -> dict[str, fractions.Fraction]:
    """Effective requests: the sum over containers, or the largest init container's when bigger."""
    def of(containers: Sequence[Mapping]) -> list[dict[str, fractions.Fraction]]:
        out = []
        for c in containers:
            res = c.get("resources") or {}
            reqs = dict(res.get("limits") or {})
            reqs.update(res.get("requests") or {})
            out.append({k: objects.parse_quantity(v) for k, v in reqs.items()})
        return out
    spec = pod.get("spec") or {}
    total: dict[str, fractions.Fraction] = collections.defaultdict(fractions.Fraction)
    for reqs in of(spec.get("containers") or []):
        for k, v in reqs.items():
            total[k] += v
    for reqs in of(spec.get("initContainers") or []):
        for k, v in reqs.items():
            total[k] = max(total[k], v)
    return dict(total)


def _occupies(pod: Mapping) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def filter_node(pod: Mapping, node: Mapping, pods_on_node: Sequence[Mapping]) -> list[str]:
    """Why ``pod`` cannot go to ``node`` (empty: it fits)."""
    spec = pod.get("spec") or {}
    node_spec = node.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    if node_spec.get("unschedulable") and not any(
            selectors.tolerates(t, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            for t in tolerations):
        return ["node(s) were unschedulable"]
    bad = selectors.untolerated(node_spec.get("taints") or [], tolerations, ("NoSchedule", "NoExecute"))
    if bad:
        return [f"node(s) had untolerated taint {{{bad[0].get('key')}: {bad[0].get('value', '')}}}"]
    if not selectors.pod_matches_node_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    wanted = pod_requests(pod)
    used: dict[str, fractions.Fraction] = collections.defaultdict(fractions.Fraction)
    count = 0
    for other in pods_on_node:
        if _occupies(other):
            count += 1
            for k, v in pod_requests(other).items():
                used[k] += v
    reasons = []
    if count + 1 > nodes.allocatable(node, "pods"):
        reasons.append("Too many pods")
    for name in sorted(wanted):
        counted = name in ("cpu", "memory", "ephemeral-storage") or validation.is_extended_resource(name)
        if counted and wanted[name] > 0 and used[name] + wanted[name] > nodes.allocatable(node, name):
            reasons.append(f"Insufficient {name}")
    return reasons


def _load(pod: Mapping, node: Mapping, pods_on_node: Sequence[Mapping]) -> float:
    """The node's mean requested share of cpu, memory and (where it has any) GPUs with ``pod`` on it."""
    shares = []
    for name in ("cpu", "memory", nodes.GPU):
        capacity = nodes.allocatable(node, name)
        if capacity <= 0:
            continue
        used = sum((pod_requests(p).get(name, 0) for p in pods_on_node if _occupies(p)), fractions.Fraction(0))
        shares.append(float((used + pod_requests(pod).get(name, 0)) / capacity))
    return sum(shares) / len(shares) if shares else 0.0


def schedule(pod: Mapping, all_nodes: Sequence[Mapping], pods_by_node: Mapping[str, Sequence[Mapping]]) -> Decision:
    feasible = []
    reasons: collections.Counter[str] = collections.Counter()
    resource_nodes = 0
    for node in all_nodes:
        name = node["metadata"]["name"]
        why = filter_node(pod, node, pods_by_node.get(name, ()))
        if not why:
            feasible.append(node)
            continue
        for reason in why:
            reasons[reason] += 1
        resource_nodes += any(r.startswith(_RESOURCE_REASONS) for r in why)
    if feasible:
        best = min(feasible, key=lambda n: (_load(pod, n, pods_by_node.get(n["metadata"]["name"], ())),
                                            n["metadata"]["name"]))
        return Decision(best["metadata"]["name"])
    total = len(all_nodes)
    if not total:
        return Decision(None, "no nodes available to schedule pods")
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    preemption = []
    if resource_nodes:
        preemption.append(f"{resource_nodes} No preemption victims found for incoming pod")
    if total - resource_nodes:
        preemption.append(f"{total - resource_nodes} Preemption is not helpful for scheduling")
    return Decision(None, f"0/{total} nodes are available: {', '.join(parts)}. preemption: 0/{total} nodes are "
                          f"available: {', '.join(sorted(preemption))}.")


class Scheduler:
    """Binds pending pods (``schedulerName`` default-scheduler, no ``nodeName``) through the registry.
    Event-driven: any pod or node change wakes it; unschedulable pods are retried on the next change
    and at least every ``retry_s``."""

    def __init__(self, reg: registry.Registry, *, retry_s: float = 5.0):
        self.registry = reg
        self.retry_s = retry_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.registry.store.listen(self._on_change)
        self._task = asyncio.create_task(self._loop(), name="kube-scheduler")
        self._wake.set()

    async def stop(self) -> None:
        self.registry.store.unlisten(self._on_change)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _on_change(self, change: store.Change) -> None:
        if change.resource in ("pods", "nodes"):
            self._wake.set()

    async def _loop(self) -> None:
        while True:
            await waits.event_set(self._wake, self.retry_s)
            self._wake.clear()
            try:
                self.schedule_pending()
            except Exception:
                log.exception("event=schedule_failed")
            await asyncio.sleep(0)

    def schedule_pending(self) -> int:
        """One pass over every pending pod; returns how many were bound."""
        st = self.registry.store
        pending = [p for p in st.items("pods") if not (p.get("spec") or {}).get("nodeName")
                   and not p["metadata"].get("deletionTimestamp")
                   and (p.get("spec") or {}).get("schedulerName", SCHEDULER_NAME) == SCHEDULER_NAME
                   and (p.get("status") or {}).get("phase", "Pending") == "Pending"
                   and not (p.get("spec") or {}).get("schedulingGates")]
        bound = 0
        for pod in sorted(pending, key=lambda p: (-(p["spec"].get("priority") or 0),
                                                  p["metadata"].get("creationTimestamp", ""))):
            all_nodes = st.items("nodes")
            by_node: dict[str, list[dict]] = collections.defaultdict(list)
            for other in st.items("pods"):
                if (other.get("spec") or {}).get("nodeName"):
                    by_node[other["spec"]["nodeName"]].append(other)
            decision = schedule(pod, all_nodes, by_node)
            md = pod["metadata"]
            if decision.node is not None:
                bound_pod = self.registry.bind(md["namespace"], md["name"], decision.node)
                self.registry.record_event(bound_pod, "Scheduled", f"Successfully assigned {md['namespace']}/"
                                           f"{md['name']} to {decision.node}", component=SCHEDULER_NAME)
                log.info("event=pod_scheduled pod=%s/%s node=%s", md["namespace"], md["name"], decision.node)
                bound += 1
            else:
                self._mark_unschedulable(pod, decision.message)
        return bound

    def _mark_unschedulable(self, pod: Mapping, message: str) -> None:
        md = pod["metadata"]
        current = objects.condition(pod, "PodScheduled")
        if current and current.get("status") == "False" and current.get("message") == message:
            return
        now = self.registry.now()

        def fn(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status["conditions"] = objects.set_condition(status.get("conditions") or [], "PodScheduled", "False",
                                                         now, "Unschedulable", message, probe_time=True)
        self.registry.mutate("pods", md["namespace"], md["name"], fn)
        self.registry.record_event(pod, "FailedScheduling", message, type_="Warning", component=SCHEDULER_NAME)
        log.info("event=pod_unschedulable pod=%s/%s message=%r", md["namespace"], md["name"], message)
