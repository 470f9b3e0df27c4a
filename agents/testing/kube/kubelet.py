"""The kubelet of one node: it watches the pods bound to its node (through the store, as the real one
watches the API), runs each in a ``PodWorker``, terminates pods that get a ``deletionTimestamp`` and
then removes them, kills at once the containers of pods force-deleted from the API, evicts
(node-pressure style) and performs graceful node shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib

from agents.testing.kube import objects, podworker, store

log = logging.getLogger("agents.testing.kube.kubelet")

SHUTDOWN_REASON = "Terminated"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
REJECT_REASON = "NodeShutdown"
REJECT_MESSAGE = "Pod was rejected as the node is shutting down."


class Kubelet:
    def __init__(self, rt: podworker.Runtime, node_name: str, host_ip: str):
        self.rt = rt
        self.node_name = node_name
        self.host_ip = host_ip
        self.workers: dict[str, podworker.PodWorker] = {}
        self.accepting = True
        self._deleting: set[str] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._side: set[asyncio.Task] = set()

    def start(self) -> None:
        self.rt.registry.store.listen(self._on_change)
        self._task = asyncio.create_task(self._loop(), name=f"kubelet {self.node_name}")
        self._wake.set()

    def _on_change(self, change: store.Change) -> None:
        if change.resource != "pods":
            return
        mine = (change.obj.get("spec") or {}).get("nodeName") == self.node_name or (
            change.old is not None and (change.old.get("spec") or {}).get("nodeName") == self.node_name)
        if mine:
            self._wake.set()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                self.sync()
            except Exception:
                log.exception("event=kubelet_sync_failed node=%s", self.node_name)

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    def sync(self) -> None:
        """Bring the workers in line with the pods bound here."""
        bound = {p["metadata"]["uid"]: p for p in self.rt.registry.store.items("pods")
                 if (p.get("spec") or {}).get("nodeName") == self.node_name}
        for uid, pod in bound.items():
            worker = self.workers.get(uid)
            md = pod["metadata"]
            if worker is None:
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                if md.get("deletionTimestamp"):
                    self.rt.registry.finish_pod(md["namespace"], md["name"])  # never started: nothing to stop
                    continue
                if not self.accepting:
                    self._reject(pod)
                    continue
                worker = podworker.PodWorker(self.rt, objects.deep(pod), node_name=self.node_name,
                                             host_ip=self.host_ip)
                self.workers[uid] = worker
                worker.start()
                log.info("event=pod_admitted node=%s pod=%s/%s", self.node_name, md["namespace"], md["name"])
            worker.pod = objects.deep(pod)
            if md.get("deletionTimestamp") and uid not in self._deleting:
                self._deleting.add(uid)
                self._spawn(self._delete(worker, float(md.get("deletionGracePeriodSeconds") or 0)))
        for uid in [u for u in self.workers if u not in bound]:
            worker = self.workers.pop(uid)
            graceful = uid in self._deleting and worker.done.is_set()
            self._deleting.discard(uid)
            worker.kill_now()  # force-deleted (or garbage-collected): the containers die at once
            log.info("event=%s node=%s pod=%s/%s", "pod_removed" if graceful else "pod_force_removed", self.node_name,
                     worker.namespace, worker.name)
            self._spawn(self._release(worker))

    async def _delete(self, worker: podworker.PodWorker, grace_s: float) -> None:
        await worker.terminate(grace_s)
        self.rt.registry.finish_pod(worker.namespace, worker.name)

    async def _release(self, worker: podworker.PodWorker) -> None:
        await worker.wait_stopped()
        if worker.pod_ip and worker.pod_ip != self.host_ip:
            self.rt.pod_ips.release(worker.pod_ip)

    def _reject(self, pod: dict) -> None:
        def fn(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status.update({"phase": "Failed", "reason": REJECT_REASON, "message": REJECT_MESSAGE})
        self.rt.registry.mutate("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], fn)

    def worker(self, namespace: str, name: str) -> podworker.PodWorker | None:
        for worker in self.workers.values():
            if worker.namespace == namespace and worker.name == name:
                return worker
        return None

    # ------------------------------------------------------------------ faults

    async def evict(self, namespace: str, name: str, message: str, grace_s: float) -> None:
        """Node-pressure eviction: DisruptionTarget (TerminationByKubelet), containers stopped within
        ``grace_s``, phase Failed with reason Evicted; the pod object stays (its controller deletes it)."""
        worker = self.worker(namespace, name)
        if worker is None:
            raise KeyError(f"pod {namespace}/{name} does not run on node {self.node_name}")
        self.rt.registry.add_disruption(namespace, name, "TerminationByKubelet", message)
        self.rt.registry.record_event(worker.pod, "Evicted", message, type_="Warning", host=self.node_name)
        await worker.terminate(grace_s, phase="Failed", reason="Evicted", message=message)

    async def shutdown(self, grace_s: float) -> None:
        """Graceful node shutdown: no new pods; every pod stopped within min(its grace, ``grace_s``), then
        Failed with reason Terminated."""
        self.accepting = False
        node = self.rt.registry.store.peek("nodes", "", self.node_name)
        if node is not None:
            self.rt.registry.record_event(node, "Shutdown", "Shutdown manager detected shutdown event",
                                          host=self.node_name, component="kubelet")
        jobs = []
        for worker in list(self.workers.values()):
            if worker.terminating:
                continue
            self.rt.registry.add_disruption(worker.namespace, worker.name, "TerminationByKubelet", SHUTDOWN_MESSAGE)
            pod_grace = float((worker.pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            jobs.append(worker.terminate(min(pod_grace, grace_s), phase="Failed", reason=SHUTDOWN_REASON,
                                         message=SHUTDOWN_MESSAGE))
        await asyncio.gather(*jobs)
        log.info("event=node_shutdown_done node=%s pods=%d", self.node_name, len(jobs))

    def kill_all_now(self) -> None:
        """The machine is gone: every container dies at once; nothing restarts."""
        self.accepting = False
        for worker in self.workers.values():
            worker.kill_now()

    async def stop(self) -> None:
        """Kill every container and wait until every process exited."""
        self.rt.registry.store.unlisten(self._on_change)
        self.kill_all_now()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for worker in list(self.workers.values()):
            await worker.wait_stopped()
            if worker.pod_ip and worker.pod_ip != self.host_ip:
                self.rt.pod_ips.release(worker.pod_ip)
        for task in list(self._side):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.workers.clear()


class PodLocator:
    """Finds the kubelet and worker of a pod, and serves ``api.LogSource`` from their log files."""

    def __init__(self, st: store.Store, kubelets: dict[str, Kubelet]):
        self.store = st
        self.kubelets = kubelets

    def find(self, namespace: str, name: str) -> tuple[Kubelet, podworker.PodWorker]:
        pod = self.store.peek("pods", namespace, name)
        if pod is None:
            raise KeyError(f"no pod {namespace}/{name}")
        node = (pod.get("spec") or {}).get("nodeName") or ""
        node_kubelet = self.kubelets.get(node)
        worker = node_kubelet.worker(namespace, name) if node_kubelet is not None else None
        if node_kubelet is None or worker is None:
            raise KeyError(f"pod {namespace}/{name} is not running on any node (node: {node or 'none'})")
        return node_kubelet, worker

    def log_path(self, namespace: str, pod: str, container: str | None, previous: bool) -> pathlib.Path:
        try:
            _, worker = self.find(namespace, pod)
        except KeyError:
            raise objects.bad_request(f'container "{container or ""}" in pod "{pod}" is waiting to start: '
                                      f'ContainerCreating') from None
        runner = worker.runner(container)
        if previous:
            if runner.record.restart_count == 0 and runner.record.state != "terminated":
                raise objects.bad_request(f'previous terminated container "{runner.name}" in pod "{pod}" not found')
            return runner.log_path(max(0, runner.record.restart_count - 1))
        if runner.record.container_id == "" and not runner.log_path().exists():
            raise objects.bad_request(f'container "{runner.name}" in pod "{pod}" is waiting to start: '
                                      f'{runner.record.reason or "ContainerCreating"}')
        return runner.log_path()

    def is_running(self, namespace: str, pod: str, container: str | None) -> bool:
        try:
            _, worker = self.find(namespace, pod)
            return worker.runner(container).is_running()
        except (KeyError, objects.ApiError):
            return False
