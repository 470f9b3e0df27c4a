"""The node lifecycle controller's part the fake models: condition taints (``nodes.reconcile_taints``),
the taint manager (pods that do not tolerate a NoExecute taint are deleted, at once or after their
``tolerationSeconds``) and pod garbage collection of pods whose node is gone (status Failed, reason
NodeLost, then deleted)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from agents.testing.kube import nodes, registry, selectors, store

log = logging.getLogger("agents.testing.kube.nodelifecycle")


class NodeLifecycle:
    def __init__(self, reg: registry.Registry):
        self.registry = reg
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._timers: dict[str, asyncio.TimerHandle] = {}  # pod uid -> pending taint eviction

    def start(self) -> None:
        self.registry.store.listen(self._on_change)
        self._task = asyncio.create_task(self._loop(), name="node-lifecycle")

    async def stop(self) -> None:
        self.registry.store.unlisten(self._on_change)
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _on_change(self, change: store.Change) -> None:
        if change.resource == "nodes":
            self._dirty.add(change.obj["metadata"]["name"])
            self._wake.set()
        elif change.resource == "pods" and change.type != "DELETED":
            node = (change.obj.get("spec") or {}).get("nodeName")
            if node:
                self._dirty.add(node)
                self._wake.set()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            for name in sorted(dirty):
                try:
                    self.reconcile(name)
                except Exception:
                    log.exception("event=node_reconcile_failed node=%s", name)

    def reconcile(self, name: str) -> None:
        """Fix the node's condition taints, then apply its NoExecute taints to the pods bound there."""
        node = self.registry.store.peek("nodes", "", name)
        if node is None:
            return
        taints = nodes.reconcile_taints(node, self.registry.now())
        if taints is not None:
            def fn(obj: dict) -> None:
                if taints:
                    obj["spec"]["taints"] = taints
                else:
                    obj["spec"].pop("taints", None)
            node = self.registry.mutate("nodes", "", name, fn) or node
        no_execute = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"]
        for pod in list(self.registry.store.items("pods")):
            if (pod.get("spec") or {}).get("nodeName") != name:
                continue
            self._apply_no_execute(pod, no_execute)

    def _apply_no_execute(self, pod: dict, no_execute: list[dict]) -> None:
        md = pod["metadata"]
        uid = md["uid"]
        if md.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        if selectors.untolerated(no_execute, tolerations, ("NoExecute",)):
            self._evict(md["namespace"], md["name"], uid)
            return
        # Tolerated: the shortest tolerationSeconds among the tolerations that matched bounds the stay.
        limits = []
        for taint in no_execute:
            seconds = [t.get("tolerationSeconds") for t in tolerations if selectors.tolerates(t, taint)]
            if seconds and all(s is not None for s in seconds):
                limits.append(max(0, min(int(s) for s in seconds)))
        if not limits:
            handle = self._timers.pop(uid, None)
            if handle is not None:
                handle.cancel()
            return
        if uid not in self._timers:
            delay = min(limits)
            self._timers[uid] = asyncio.get_running_loop().call_later(
                delay, self._evict, md["namespace"], md["name"], uid)

    def _evict(self, namespace: str, name: str, uid: str) -> None:
        self._timers.pop(uid, None)
        pod = self.registry.store.peek("pods", namespace, name)
        if pod is None or pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp"):
            return
        self.registry.record_event(pod, "TaintManagerEviction", f"Marking for deletion Pod {namespace}/{name}",
                                   component="taint-eviction-controller")
        self.registry.add_disruption(namespace, name, "DeletionByTaintManager",
                                     "Taint manager: deleting due to NoExecute taint")
        self.registry.delete("pods", namespace, name)
        log.info("event=taint_eviction pod=%s/%s", namespace, name)

    def collect_orphans(self) -> int:
        """Pod GC: pods bound to a node that no longer exists end Failed/NodeLost and are deleted."""
        st = self.registry.store
        names = {n["metadata"]["name"] for n in st.items("nodes")}
        count = 0
        for pod in list(st.items("pods")):
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or node in names:
                continue
            md = pod["metadata"]
            message = f"Node {node} which was running pod {md['name']} is unresponsive"
            self.registry.add_disruption(md["namespace"], md["name"], "DeletionByPodGC", "PodGC: node no longer exists")

            def fn(obj: dict, message: str = message) -> None:
                status = obj.setdefault("status", {})
                status.update({"phase": "Failed", "reason": "NodeLost", "message": message})
                for cs in status.get("containerStatuses") or []:
                    cs["ready"] = False
            self.registry.mutate("pods", md["namespace"], md["name"], fn)
            self.registry.delete("pods", md["namespace"], md["name"], grace_s=0)
            count += 1
            log.info("event=pod_gc pod=%s/%s node=%s reason=NodeLost", md["namespace"], md["name"], node)
        return count
