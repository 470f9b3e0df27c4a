"""``FakeCluster``: the facade tests and demos use. It wires the store, the API server, and the
node-side parts, and offers what the cloud, an operator or a fault would do to a cluster (add and
remove nodes, taint, cordon, conditions, pausing the API)."""

from __future__ import annotations

import logging
import os
import pathlib
import random
import shutil
import signal
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import yaml

from agents.testing.kube import (
    api,
    ipam,
    kubelet,
    nodelifecycle,
    nodes,
    objects,
    podworker,
    proxy,
    registry,
    scheduler,
    store,
)

log = logging.getLogger("agents.testing.kube.cluster")

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class FakeCluster:
    """An in-process fake Kubernetes control plane + node agents, on loopback, on the caller's loop.

    Knobs (defaults are the real cluster's figures where one exists):
    ``compaction_window`` changes kept for watches (older resourceVersions get 410);
    ``bookmark_interval_s`` between watch BOOKMARKs (the real server: about a minute);
    ``max_watch_s`` a watch without ``timeoutSeconds`` lasts (the real ``--min-request-timeout``: 1800);
    ``pod_cidr``/``node_cidr``/``service_cidr``/``lb_cidr`` loopback ranges for pod, node, ClusterIP and
    load-balancer addresses; ``token`` the bearer token every request must carry (None: no auth);
    ``clock`` wall-clock seconds for timestamps (a ``Clock`` or a callable);
    ``restart_backoff_scale`` multiplies the kubelet's crash and image-pull backoff (10 s doubling to
    300 s; 0.01 makes it 0.1 s doubling to 3 s); ``schedule_retry_s`` how often unschedulable pods are
    retried when nothing changed; ``command_map`` image -> entrypoint argv for containers without a
    ``command`` (an image it lacks fails to pull: ErrImagePull/ImagePullBackOff)."""

    def __init__(self, *, command_map: Mapping[str, Sequence[str]] | None = None,
                 pod_cidr: str = "127.77.0.0/16", lb_cidr: str = "127.78.0.0/16",
                 node_cidr: str = "127.76.0.0/16", service_cidr: str = "127.79.0.0/16",
                 token: str | None = None, compaction_window: int = 1000, clock: Any = None,
                 workdir: pathlib.Path | None = None, restart_backoff_scale: float = 1.0,
                 bookmark_interval_s: float = 60.0, max_watch_s: float = 1800.0, schedule_retry_s: float = 5.0,
                 seed: int | None = None):
        if restart_backoff_scale <= 0:
            raise ValueError(f"restart_backoff_scale must be > 0, got {restart_backoff_scale}")
        if bookmark_interval_s <= 0 or max_watch_s <= 0:
            raise ValueError("bookmark_interval_s and max_watch_s must be > 0")
        self.command_map = {k: list(v) for k, v in (command_map or {}).items()}
        self.token = token
        self.restart_backoff_scale = restart_backoff_scale
        self._clock = objects.clock_fn(clock)
        self._own_workdir = workdir is None
        self.workdir = pathlib.Path(workdir) if workdir is not None else pathlib.Path(
            tempfile.mkdtemp(prefix="meridian-kube-fake-"))
        rng = random.Random(seed)
        self.pod_ips = ipam.IpPool(pod_cidr, name="pod_cidr", rng=rng)
        self.node_ips = ipam.IpPool(node_cidr, name="node_cidr", rng=rng)
        self.lb_ips = ipam.IpPool(lb_cidr, name="lb_cidr", rng=rng)
        self.store = store.Store(compaction_window=compaction_window)
        self.registry = registry.Registry(self.store, clock=self._clock,
                                          service_ips=ipam.IpPool(service_cidr, skip=9, name="service_cidr", rng=rng),
                                          node_ports=ipam.PortPool(), rng=rng)
        self.kubelets: dict[str, kubelet.Kubelet] = {}
        self.locator = kubelet.PodLocator(self.store, self.kubelets)
        self.api = api.ApiServer(self.registry, token=token, log_source=self.locator,
                                 bookmark_interval_s=bookmark_interval_s, max_watch_s=max_watch_s)
        self.scheduler = scheduler.Scheduler(self.registry, retry_s=schedule_retry_s)
        self.lifecycle = nodelifecycle.NodeLifecycle(self.registry)
        self.proxy = proxy.ServiceProxy(self.registry, self.lb_ips)
        self._gone_kubelets: list[kubelet.Kubelet] = []
        self._runtime: podworker.Runtime | None = None
        self._session: aiohttp.ClientSession | None = None
        self._port = 0
        self._started = False
        self._stopped = False
        self._paused = False
        for ns in SYSTEM_NAMESPACES:
            self.registry.create("namespaces", "", {"metadata": {"name": ns}})

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    async def start(self, port: int = 0) -> None:
        """Serve the API on http://127.0.0.1:<port> (0: a free port) and start the node-side parts."""
        if self._started:
            raise RuntimeError("FakeCluster already started")
        if self._stopped:
            raise RuntimeError("a stopped FakeCluster cannot start again (its containers are gone); create a new one")
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Probes and hooks: one session, no keep-alive (as the kubelet's prober), never a proxy.
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True), trust_env=False)
        self._runtime = podworker.Runtime(
            registry=self.registry, pod_ips=self.pod_ips, workdir=self.workdir / "pods",
            command_map=self.command_map, session=self._session, restart_backoff_scale=self.restart_backoff_scale,
            clock=self._clock, base_env=dict(os.environ))
        self._port = await self.api.listen(port)
        self._started = True
        self.scheduler.start()
        self.lifecycle.start()
        self.proxy.start()
        for node in self.store.items("nodes"):
            if node["metadata"]["name"] in self.kubelets:
                continue
            self._start_kubelet(node)
        log.info("event=cluster_started url=%s workdir=%s", self.url, self.workdir)

    async def stop(self) -> None:
        """Stop the API server and every node-side part; kill every container's process group and wait
        until every process exited."""
        if not self._started:
            return
        if not self._paused:
            await self.api.close()
        await self.scheduler.stop()
        await self.lifecycle.stop()
        await self.proxy.stop()
        for node_kubelet in list(self.kubelets.values()) + self._gone_kubelets:
            await node_kubelet.stop()
        self.kubelets.clear()
        self._gone_kubelets.clear()
        if self._session is not None:
            await self._session.close()
        self._started = False
        self._stopped = True
        self._paused = False
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        log.info("event=cluster_stopped url=%s", self.url)

    def _start_kubelet(self, node: Mapping) -> None:
        assert self._runtime is not None
        name = node["metadata"]["name"]
        node_kubelet = kubelet.Kubelet(self._runtime, name, nodes.internal_ip(node) or "127.0.0.1")
        self.kubelets[name] = node_kubelet
        node_kubelet.start()

    async def pause_api(self) -> None:
        """The API server goes away: the listener closes and every open watch and connection drops.
        State is kept and containers keep running."""
        if not self._started or self._paused:
            raise RuntimeError("pause_api needs a started, unpaused cluster")
        self._paused = True
        await self.api.close()
        log.info("event=api_paused port=%d", self._port)

    async def resume_api(self) -> None:
        """Listen again on the same port."""
        if not self._paused:
            raise RuntimeError("resume_api needs a paused cluster")
        await self.api.listen(self._port)
        self._paused = False
        log.info("event=api_resumed port=%d", self._port)

    def kubeconfig(self, path: pathlib.Path, *, namespace: str = "default") -> pathlib.Path:
        """Write a kubeconfig for this cluster (server = url, the bearer token when one is set, the given
        namespace in the current context; mode 0600). The namespace is created when missing, as an
        operator would before handing out the file."""
        if self._port == 0:
            raise RuntimeError("start() the cluster before writing its kubeconfig (the URL names its port)")
        self.create_namespace(namespace)
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        config = {"apiVersion": "v1", "kind": "Config", "preferences": {},
                  "clusters": [{"name": "meridian-fake", "cluster": {"server": self.url}}],
                  "users": [{"name": "meridian-fake-user", "user": user}],
                  "contexts": [{"name": "meridian-fake", "context": {"cluster": "meridian-fake",
                                                                     "user": "meridian-fake-user",
                                                                     "namespace": namespace}}],
                  "current-context": "meridian-fake"}
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            yaml.safe_dump(config, fh, sort_keys=False)
        return path

    # ------------------------------------------------------------------ namespaces

    def create_namespace(self, name: str) -> dict:
        """The Namespace object (created when missing)."""
        existing = self.store.peek("namespaces", "", name)
        if existing is not None:
            return objects.deep(existing)
        return self.registry.create("namespaces", "", {"metadata": {"name": name}})

    # ------------------------------------------------------------------ nodes

    def add_node(self, name: str, *, labels: Mapping[str, str] | None = None, gpus: int = 0,
                 taints: Sequence[dict] = (), cpu: str = "8", memory: str = "64Gi", provider_id: str = "") -> dict:
        """Register a Ready node (what the cloud's VM + kubelet bootstrap do); returns the Node object."""
        if self.store.peek("nodes", "", name) is not None:
            raise ValueError(f"node {name!r} already exists")
        ip = self.node_ips.allocate()
        obj = nodes.node_object(name, ip=ip, now=self.registry.now(), labels=labels or {}, gpus=gpus, taints=taints,
                                cpu=cpu, memory=memory, provider_id=provider_id)
        try:
            created = self.registry.create("nodes", "", obj)
        except objects.ApiError:
            self.node_ips.release(ip)
            raise
        if self._started:
            self._start_kubelet(created)
        log.info("event=node_added node=%s ip=%s gpus=%d", name, ip, gpus)
        return created

    def _node(self, name: str) -> dict:
        node = self.store.peek("nodes", "", name)
        if node is None:
            raise KeyError(f"no node {name!r}; nodes: {[n['metadata']['name'] for n in self.store.items('nodes')]}")
        return node

    def remove_node(self, name: str) -> None:
        """The node is gone (the cloud deleted the VM): its containers die at once (SIGKILL), the Node
        object is deleted, and its pods end Failed with reason NodeLost and are deleted (pod GC), all
        before this returns."""
        node = self._node(name)
        node_kubelet = self.kubelets.pop(name, None)
        if node_kubelet is not None:
            node_kubelet.kill_all_now()
            self._gone_kubelets.append(node_kubelet)
        self.registry.delete("nodes", "", name)
        self.node_ips.release(nodes.internal_ip(node))
        pods = self.lifecycle.collect_orphans()
        log.info("event=node_removed node=%s pods_lost=%d", name, pods)

    async def shutdown_node(self, name: str, grace_s: float = 15.0) -> None:
        """Graceful node shutdown (GKE's, before a spot VM goes): Ready=False (KubeletNotReady, "node is
        shutting down"), then every pod gets min(its grace, ``grace_s``) (preStop, SIGTERM, SIGKILL) and
        ends Failed with reason Terminated. The Node object stays (NotReady) until ``remove_node``."""
        self._node(name)
        if grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s}")
        self.set_node_condition(name, "Ready", "False", "KubeletNotReady", "node is shutting down")
        node_kubelet = self.kubelets.get(name)
        if node_kubelet is not None:
            await node_kubelet.shutdown(grace_s)

    def taint_node(self, name: str, key: str, value: str | None, effect: str) -> None:
        """Add (or replace the value of) the taint ``key:effect``."""
        self._node(name)

        def fn(node: dict) -> None:
            taints = [t for t in node["spec"].get("taints") or [] if not (t.get("key") == key
                                                                          and t.get("effect") == effect)]
            taint: dict[str, Any] = {"key": key, "effect": effect}
            if value:
                taint["value"] = value
            if effect == "NoExecute":
                taint["timeAdded"] = self.registry.now()
            node["spec"]["taints"] = taints + [taint]
        self._patch_node(name, fn)

    def untaint_node(self, name: str, key: str) -> None:
        """Remove every taint with ``key``."""
        self._node(name)

        def fn(node: dict) -> None:
            taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != key]
            if taints:
                node["spec"]["taints"] = taints
            else:
                node["spec"].pop("taints", None)
        self._patch_node(name, fn)

    def cordon(self, name: str, unschedulable: bool = True) -> None:
        self._node(name)

        def fn(node: dict) -> None:
            if unschedulable:
                node["spec"]["unschedulable"] = True
            else:
                node["spec"].pop("unschedulable", None)
        self._patch_node(name, fn)

    def set_node_condition(self, name: str, type: str, status: str, reason: str = "", message: str = "") -> None:
        """Set one node condition (as the kubelet or a node problem detector reports it)."""
        if status not in ("True", "False", "Unknown"):
            raise ValueError(f"condition status must be True, False or Unknown, got {status!r}")
        self._node(name)
        now = self.registry.now()

        def fn(node: dict) -> None:
            conds = objects.set_condition(node["status"].get("conditions") or [], type, status, now, reason, message)
            for cond in conds:
                if cond["type"] == type:
                    cond["lastHeartbeatTime"] = now
            node["status"]["conditions"] = conds
        self.registry.mutate("nodes", "", name, fn)
        self._reconcile_node_taints(name)

    def _patch_node(self, name: str, fn) -> None:
        self.registry.mutate("nodes", "", name, fn)
        self._reconcile_node_taints(name)

    def _reconcile_node_taints(self, name: str) -> None:
        self.lifecycle.reconcile(name)

    # ------------------------------------------------------------------ pods (faults)

    def _worker(self, namespace: str, name: str) -> tuple[kubelet.Kubelet, podworker.PodWorker]:
        return self.locator.find(namespace, name)

    async def evict_pod(self, namespace: str, name: str,
                        message: str = "The node was low on resource: memory. Threshold quantity: 100Mi, "
                                       "available: 50Mi. ", grace_s: float = 1.0) -> None:
        """Kubelet (node-pressure) eviction: DisruptionTarget (TerminationByKubelet), the containers stopped
        within ``grace_s`` (the kubelet's hard-eviction grace is 1 s; 0 kills at once), phase Failed with
        reason Evicted. The pod object stays, as the real kubelet leaves it for its controller."""
        node_kubelet, _ = self._worker(namespace, name)
        await node_kubelet.evict(namespace, name, message, grace_s)

    def kill_container(self, namespace: str, name: str, sig: int = signal.SIGKILL, container: str | None = None) -> None:
        """The container's process group gets ``sig`` (a crash): restartPolicy applies."""
        _, worker = self._worker(namespace, name)
        runner = worker.runner(container)
        if runner.proc is None or runner.proc.returncode is not None:
            raise RuntimeError(f"container {runner.name} of pod {namespace}/{name} is not running")
        log.info("event=kill_container pod=%s/%s container=%s signal=%d", namespace, name, runner.name, sig)
        os.killpg(runner.proc.pid, sig)

    def log_path(self, namespace: str, pod: str, container: str | None = None, previous: bool = False) -> pathlib.Path:
        """The container's current (or previous) log file, as ``pods/{name}/log`` serves it."""
        return self.locator.log_path(namespace, pod, container, previous)

    def container_pid(self, namespace: str, name: str, container: str | None = None) -> int | None:
        """The pid (= process group id) of the container's running process, None when it is not running."""
        try:
            _, worker = self._worker(namespace, name)
        except KeyError:
            return None
        runner = worker.runner(container)
        return runner.proc.pid if runner.is_running() and runner.proc is not None else None

    # ------------------------------------------------------------------ snapshots for assertions

    def pods(self, namespace: str | None = None) -> list[dict]:
        return self.store.list("pods", namespace)

    def nodes(self) -> list[dict]:
        return self.store.list("nodes")

    def events(self, namespace: str | None = None) -> list[dict]:
        return self.store.list("events", namespace)

    def compact(self) -> int:
        """Compact the history now: every resourceVersion so far becomes too old to watch from."""
        return self.store.compact()
