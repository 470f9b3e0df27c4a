"""``KubernetesBackend``: the agent's replicas as bare pods, through kubernetes_asyncio.

What it keeps in step by watches (``watch.Informer``; no polling): this cluster's pods (label
selector), the nodes of its pools, and in Service mode the per-replica Services. Pod changes become
replica states (``tracked.PodTracker``, ``podstate``); node changes become the node views the agent
places by and the reclaim notices it drains on (``nodes.NodeTracker``). Load comes from scraping
each ready pod's ``/metrics`` with the runtime adapter's scraper, as for local replicas
(``ops.PodOps``). Adoption after an agent restart reads the pods themselves (``adoption``), so it
holds even when the agent's state directory is lost; a start is idempotent through the
deterministic pod name (409 = already there). While the API server is unreachable the watches
retry with backoff and everything keeps serving; reports carry the last known states."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import pathlib
import time
from collections.abc import Callable, Mapping

import aiohttp
import prometheus_client as prom
import runtime_adapter

from meridian import backoff as backoff_mod
from meridian import spec
from meridian.fleet import models
from meridian.spec import replicas as replicas_spec
from meridian import waits

from agents import allocation, backends
from agents.backends import base, engine
from agents.backends.kubernetes import adoption, manifest, nodes, ops, podstate, tracked, watch
from agents.backends.kubernetes import client as client_mod
from agents.providers import base as provider_base

log = logging.getLogger(__name__)
R = models.ReplicaState
TERMINAL = tracked.TERMINAL


class KubernetesBackend(base.ReplicaBackend):
    name = "kubernetes"

    def __init__(self, cluster: spec.Cluster, settings: base.ReplicaSettings, *, api: client_mod.Api | None = None,
                 clock: Callable[[], float] = time.time, registry: prom.CollectorRegistry | None = None,
                 adopt_timeout_s: float = 30.0, backoff_initial_s: float = 0.5, backoff_max_s: float = 30.0):
        s = cluster.spec
        k = s.replicas.kubernetes
        if k is None:
            raise ValueError("the kubernetes backend needs spec.replicas.kubernetes")
        self._k, self._cloud, self._settings, self._clock = k, s.cloud, settings, clock
        self._cluster_id = cluster.metadata.name
        self._adopt_timeout_s = adopt_timeout_s
        self._backoff = functools.partial(backoff_mod.Backoff, backoff_initial_s, backoff_max_s)
        self._decls = {p.name: p for p in s.pools}
        self._pool_label = replicas_spec.node_pool_label(s.cloud, k)
        # The spec's engine command as written: a bare python is the image's interpreter.
        self._engine_command = tuple(s.agent.engine_command)
        registry = registry or prom.CollectorRegistry()
        self._ops = ops.PodOps(k, self._cluster_id, clock=clock, backoff=self._backoff, registry=registry)
        self._ops.api = api
        self._watch_metrics = watch.WatchMetrics(self._cluster_id, registry)
        self._node_tracker = nodes.NodeTracker(
            pool_label=self._pool_label, pools={p.name: p.node_pool_value for p in s.pools},
            tolerations={p.name: replicas_spec.tolerations(s.cloud, p.tier, k) for p in s.pools},
            rules=nodes.ReclaimRules(tuple(replicas_spec.reclaim_taints(k)), tuple(replicas_spec.reclaim_conditions(k)),
                                     replicas_spec.reclaim_cordon(s.cloud, k)),
            notice_s=replicas_spec.reclaim_notice_s(s.cloud, k), clock=clock, cluster_id=self._cluster_id)
        self._pods_tracked = tracked.PodTracker(
            k, clock=clock, endpoint=self._endpoint, event=self._ops.event, linger_s=settings.ended_linger_s,
            delete_failed=self._delete_failed)
        self._replicas = self._pods_tracked.replicas
        self._adopted = False
        self._session: aiohttp.ClientSession | None = None
        self._loops: list[asyncio.Task] = []
        self._pods: watch.Informer | None = None
        self._nodes: watch.Informer | None = None
        self._services: watch.Informer | None = None

    def _delete_failed(self, r: tracked.PodReplica) -> None:
        self._ops.spawn(self._ops.delete(r, grace_s=0), f"delete-failed-{r.name}")

    # ------------------------------------------------------------------ views

    def get(self, replica_id: str) -> tracked.PodReplica | None:
        return self._replicas.get(replica_id)

    def all(self) -> list[tracked.PodReplica]:
        return list(self._replicas.values())

    def holdings(self) -> list[allocation.Holding]:
        return [r.holding for r in self._replicas.values() if r.state in base.LIVE_STATES]

    def reports(self) -> list[models.ReplicaReport]:
        return [r.report(self._endpoint(r)) for r in self._replicas.values()]

    def poll(self) -> list[base.Change]:
        return self._pods_tracked.poll()

    def node_views(self) -> Mapping[str, base.NodeView]:
        """Before the first node list: no node of any pool can take a replica (none is known)."""
        if not self.nodes_listed():
            return {}
        return self._node_tracker.views()

    def nodes_listed(self) -> bool:
        return self._nodes is not None and self._nodes.synced.is_set()

    def interruptions(self) -> list[provider_base.Interruption]:
        return self._node_tracker.notices()

    @property
    def api_connected(self) -> bool:
        """Whether every watch is currently in step with the API server."""
        informers = self._informers()
        return bool(informers) and all(i.connected for i in informers)

    def status(self) -> dict:
        return {"name": self.name, "namespace": self._k.namespace, "api_connected": self.api_connected,
                "watches": {i.resource: {"connected": i.connected, "synced": i.synced.is_set(), "relists": i.relists,
                                         "last_error": i.last_error} for i in self._informers()},
                "reclaimed_nodes": sorted(self._node_tracker.reclaim_seen)}

    def _informers(self) -> list[watch.Informer]:
        return [i for i in (self._pods, self._nodes, self._services) if i is not None]

    def _endpoint(self, r: tracked.PodReplica, view: podstate.PodView | None = None) -> str:
        k = self._k
        node_address = ""
        if k.endpoint.mode == "service" and self._nodes is not None:
            node_address = nodes.address(self._nodes.objects.get(r.placement.node_id) or {}, k.endpoint.node_address)
        tls = bool(k.tls_secret)
        return tracked.endpoint((view or r.view).pod_ip, r.service, mode=k.endpoint.mode,
                                port=k.tls_port if tls else k.engine_port, node_address=node_address,
                                scheme="https" if tls else "http")

    # ------------------------------------------------------------------ watches and adoption

    def _start_watches(self, api: client_mod.Api) -> None:
        ns, selector = self._k.namespace, manifest.cluster_selector(self._cluster_id)
        informer = functools.partial(watch.Informer, metrics=self._watch_metrics)
        self._pods = informer("pods", functools.partial(api.core.list_namespaced_pod, ns, label_selector=selector),
                              self._on_pod, backoff=self._backoff())
        self._nodes = informer("nodes", functools.partial(api.core.list_node, label_selector=self._pool_label),
                               self._node_tracker.on_event, backoff=self._backoff())
        if self._k.endpoint.mode == "service":
            self._services = informer(
                "services", functools.partial(api.core.list_namespaced_service, ns, label_selector=selector),
                lambda type_, obj, prev: self._pods_tracked.on_service(type_, obj), backoff=self._backoff())
        self._loops = [asyncio.create_task(i.run(), name=f"kube-watch-{i.resource}") for i in self._informers()]
        assert self._session is not None
        self._loops.append(asyncio.create_task(
            self._ops.scrape_loop(self._replicas.values, self._session, self._settings.supervisor), name="kube-scrape"))

    def _on_pod(self, type_: str, obj: dict, previous: dict | None) -> None:
        if not self._adopted:
            return  # adoption reads the first list as a whole
        if not self._pods_tracked.on_pod(type_, obj) and type_ != "DELETED":
            self._adopt_pod(obj, late=True)  # a pod of this cluster that appeared by itself

    async def adopt(self) -> tuple[list[str], list[str]]:
        """Connect, start the watches, and once the first pod list is in: re-adopt every pod of this
        cluster with a valid placement record, delete those without one, finish the drains the pods
        record as begun. When the API server does not answer within ``adopt_timeout_s``, adoption
        happens on the first list (the agent starts meanwhile)."""
        if self._ops.api is None:
            self._ops.api = client_mod.Api(await client_mod.connect(self._k), self._k.namespace)
        self._session = aiohttp.ClientSession()
        self._start_watches(self._ops.api)
        assert self._pods is not None
        if not await waits.event_set(self._pods.synced, self._adopt_timeout_s):
            log.warning("event=kube_adopt_deferred cluster=%s timeout_s=%g last_error=%r", self._cluster_id,
                        self._adopt_timeout_s, self._pods.last_error)
            self._ops.spawn(self._adopt_when_listed(), "kube-adopt-later")
            return [], []
        return self._adopt_listed()

    async def _adopt_when_listed(self) -> None:
        assert self._pods is not None
        await self._pods.synced.wait()
        adopted, cleaned = self._adopt_listed()
        log.info("event=kube_adopted_late cluster=%s adopted=%s cleaned=%s", self._cluster_id, adopted, cleaned)

    def _adopt_listed(self) -> tuple[list[str], list[str]]:
        assert self._pods is not None
        adopted: list[str] = []
        cleaned: list[str] = []
        for obj in sorted(self._pods.objects.values(), key=lambda o: o["metadata"]["name"]):
            kept = self._adopt_pod(obj, late=False)
            (adopted if kept else cleaned).append(kept or obj["metadata"]["name"])
        self._pods_tracked.assign_slots()
        self._adopted = True
        if self._services is not None:
            for name in sorted(set(self._services.objects) - set(self._pods_tracked.by_pod)):
                log.warning("event=kube_orphan_service cluster=%s service=%s: deleting it", self._cluster_id, name)
                self._ops.delete_service(name)
        return adopted, cleaned

    def _adopt_pod(self, obj: dict, *, late: bool) -> str | None:
        """Act on ``adoption.decide``; returns the replica id when the pod keeps serving."""
        name = obj["metadata"]["name"]
        d = adoption.decide(obj, now=self._clock(), stop_grace_s=self._k.stop_grace_s,
                            default_grace_s=self._k.drain_deadline_s + self._k.stop_grace_s)
        if d.kind == "orphan":
            log.warning("event=kube_orphan_pod cluster=%s pod=%s: %s, deleting it", self._cluster_id, name, d.why)
            self._ops.delete_orphan(name, d.grace_s)
            return None
        assert d.placement is not None
        if d.placement.replica_id in self._replicas:
            return None
        r = tracked.PodReplica(d.placement, name, d.directive_id, tracked.created_at(obj, self._clock()), slots=(),
                               pod=obj, served_model_name=tracked.served_model_name(obj))
        r.draining = r.deleting = d.draining
        self._pods_tracked.register(r)
        self._pods_tracked.refresh(r)
        r.last_state, r.last_restarts = r.state, r.view.restarts
        if late:
            self._pods_tracked.assign_slots()
        log.info("event=kube_adopt cluster=%s replica=%s pod=%s decision=%s state=%s %s", self._cluster_id,
                 d.placement.replica_id, name, d.kind, r.state.value, d.why)
        if d.kind == "finish_drain":
            self._ops.spawn(self._ops.delete(r, grace_s=d.grace_s), f"finish-drain-{name}")
        if d.kind != "adopt" or r.state in TERMINAL:
            return None
        self._ops.event(r, "Adopted", f"re-adopted by the agent of cluster {self._cluster_id} ({r.state.value})")
        if self._k.endpoint.mode == "service":
            # A pod started in pod_ip mode (before the Cluster spec chose a Service) has none: without
            # it the replica would wait for a Service address for ever. One that exists is kept (409).
            self._ops.spawn(self._ops.ensure_service(r), f"service-{r.name}")
        return d.placement.replica_id

    # ------------------------------------------------------------------ start

    def prepare(self, action: models.StartReplica, *, directive_id: str, node_id: str, gpu_ids: tuple[int, ...],
                gpu_type: str) -> tuple[tracked.PodReplica, dict]:
        if self._pods is None or not self._pods.synced.is_set():
            raise base.Refused("the Kubernetes pod list has not been read yet (API server unreachable?); retry later")
        runtime_adapter.build_command(action.runtime, host="0.0.0.0", port=self._k.engine_port)  # LaunchError
        decl = self._decls[action.pool_id]
        placement = base.Placement(action.replica_id, action.deployment, action.revision, action.pool_id, node_id,
                                   action.gpu_count, gpu_type)
        env = engine.engine_env(self._settings, gpu_type, self._engine_command)
        body = manifest.pod(manifest.PodRequest(
            self._cluster_id, self._cloud, decl.tier, decl.node_pool_value, placement, directive_id, action.runtime,
            self._engine_command, env, self._k))
        r = tracked.PodReplica(placement, body["metadata"]["name"], directive_id, self._clock(), slots=gpu_ids,
                               served_model_name=action.runtime.served_model_name)
        return r, body

    async def launch(self, prepared: tuple[tracked.PodReplica, dict]) -> str:  # type: ignore[override]
        """Create the pod (registered first, so its watch events find it). 409 with a pod carrying
        the same directive id (or placement) is a start already done, never a second pod."""
        r, body = prepared
        api = self._ops.api
        assert api is not None
        where = f"pod {self._k.namespace}/{r.name} on node {r.placement.node_id} ({r.placement.gpu_count} GPU(s))"
        self._pods_tracked.register(r)
        try:
            created = await api.create_pod(body)
        except client_mod.KubeError as exc:
            self._ops.api_error(exc)
            existing = await self._ops.best_effort(api.get_pod(r.name)) if exc.status == 409 else None
            if isinstance(existing, dict) and (
                    (existing["metadata"].get("annotations") or {}).get(manifest.A_DIRECTIVE) == r.directive_id
                    or manifest.read_placement(existing) == r.placement):
                r.pod, r.created_at = existing, tracked.created_at(existing, r.created_at)
                log.info("event=kube_pod_exists cluster=%s pod=%s directive=%s: not started twice", self._cluster_id,
                         r.name, r.directive_id)
                return where + ", already created for this directive"
            self._pods_tracked.unregister(r)
            if exc.status == 409:
                raise RuntimeError(f"pod {r.name} already exists for another directive or replica") from None
            raise RuntimeError(str(exc)) from None
        if r.pod is None:
            r.pod = created
        log.info("event=kube_pod_created cluster=%s replica=%s pod=%s node=%s gpus=%d", self._cluster_id,
                 r.placement.replica_id, r.name, r.placement.node_id, r.placement.gpu_count)
        self._ops.event(r, "Created", f"replica {r.placement.replica_id} ({r.placement.deployment}@"
                                      f"{r.placement.revision}) for directive {r.directive_id}")
        if self._k.endpoint.mode == "service":
            self._ops.spawn(self._ops.ensure_service(r), f"service-{r.name}")
        return where

    async def wait_ready(self, replica_id: str, timeout_s: float) -> None:
        r = self._replicas[replica_id]
        deadline = time.monotonic() + timeout_s
        while True:
            self._pods_tracked.refresh(r)
            st = r.state
            if st == R.READY:
                return
            if st in (R.FAILED, R.STOPPED, R.DRAINING):
                raise runtime_adapter.ReplicaFailed(f"replica {replica_id} is {st.value}: {r.view.message}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"replica {replica_id} not ready after {timeout_s}s (state {st.value}): "
                                   f"{r.view.message}")
            # Woken or not, re-read: time alone can end a start (pod_start_timeout_s).
            await waits.event_set(r.changed, min(remaining, 1.0))

    # ------------------------------------------------------------------ drain, stop

    async def drain(self, replica_id: str, deadline_s: float) -> runtime_adapter.DrainResult:
        """DRAINING at once (the agent's next report; routers stop sending), the drain recorded on the
        pod and its deadline given to the pod's adapter, then the pod deleted with a grace period of
        the deadline plus ``stop_grace_s``: its preStop has the adapter wait for in-flight requests,
        then stop the engine."""
        r = self._replicas[replica_id]
        if r.state in TERMINAL:
            return runtime_adapter.DrainResult(0, False, False, 0.0)
        t0 = time.monotonic()
        r.draining = True
        r.notify()
        self._ops.event(r, "Draining", f"draining within {deadline_s:g}s")
        outstanding = r.load.outstanding
        if not r.deleting and self._ops.api is not None:
            now = self._clock()
            # Best effort: the drain goes on without it; only an agent restart mid-drain would miss it.
            await self._ops.best_effort(self._ops.api.annotate_pod(
                r.name, {manifest.A_DRAIN: manifest.drain_annotation(now, now + deadline_s)}))
        r.deleting = True
        grace = math.ceil(deadline_s) + self._k.stop_grace_s
        requester = None
        if self._session is not None:
            requester = self._ops.spawn(self._ops.request_drain(r, self._session, deadline_s), f"request-drain-{r.name}")
        deleter = self._ops.spawn(self._ops.delete(r, grace_s=grace), f"drain-{r.name}")
        if not await waits.event_set(r.gone, grace + 30.0):
            if not deleter.done():
                raise RuntimeError(f"pod {r.name} not deleted after {grace + 30}s: the API server is unreachable "
                                   "(the deletion is retried)")
            log.warning("event=kube_drain_slow cluster=%s pod=%s: still there %ss after deletion", self._cluster_id,
                        r.name, grace + 30)
        duration = time.monotonic() - t0
        if requester is not None:  # its answer comes with the engine's stop, just before the pod goes
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(requester), 2.0)
        self._pods_tracked.refresh(r)
        done = r.drain_result
        if done is not None:  # the adapter's own account: what was outstanding when it stopped the engine
            return runtime_adapter.DrainResult(int(done.get("outstanding_at_term", -1)), bool(done.get("deadline_hit")),
                                               bool(done.get("killed")), duration)
        # Without it (the adapter unreachable from the agent): the pod outlived its grace period only
        # when the kubelet had to cut the drain short.
        deadline_hit = duration > grace
        return runtime_adapter.DrainResult(max(outstanding, 0) if deadline_hit else 0, deadline_hit, False, duration)

    async def stop(self, replica_id: str, note: str = "") -> None:
        r = self._replicas[replica_id]
        r.note = note or r.note
        if r.state in TERMINAL:
            return
        r.deleting = True
        self._ops.spawn(self._ops.delete(r, grace_s=self._k.stop_grace_s), f"stop-{r.name}")
        if not await waits.event_set(r.gone, self._k.stop_grace_s + 10.0):
            log.warning("event=kube_stop_slow cluster=%s pod=%s", self._cluster_id, r.name)
        self._pods_tracked.refresh(r)

    def forget(self, replica_id: str) -> None:
        r = self._replicas.get(replica_id)
        if r is None:
            return
        if not r.deleted:
            self._pods_tracked.forgotten.add(r.name)
            if not r.deleting:
                r.deleting = True
                self._ops.spawn(self._ops.delete(r, grace_s=0), f"forget-{r.name}")
        self._pods_tracked.unregister(r)

    async def close(self, *, stop_replicas: bool) -> None:
        """Stop the watches; the pods keep serving (the next agent re-adopts them) or, with
        ``stop_replicas``, are deleted first."""
        if stop_replicas and self._ops.api is not None:
            live = [r for r in self._replicas.values() if r.state in base.LIVE_STATES]
            await asyncio.gather(*(self.stop(r.placement.replica_id) for r in live), return_exceptions=True)
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        await self._ops.close()
        if self._session is not None:
            await self._session.close()
        if self._ops.api is not None:
            await self._ops.api.close()


@backends.register("kubernetes")
def create(cluster: spec.Cluster, *, settings: base.ReplicaSettings, state_dir: pathlib.Path,
           clock: Callable[[], float] = time.time, registry: prom.CollectorRegistry | None = None,
           api: client_mod.Api | None = None, adopt_timeout_s: float = 30.0, backoff_initial_s: float = 0.5,
           backoff_max_s: float = 30.0) -> KubernetesBackend:
    """Options: ``registry`` (the agent's metrics registry), ``api`` (an injected ``client.Api``;
    default: from the spec's kubeconfig, the in-cluster account or ~/.kube/config),
    ``adopt_timeout_s`` (how long start-up waits for the first pod list), ``backoff_*`` (watch and
    API retries). The state directory is not used: the pods are the records."""
    return KubernetesBackend(cluster, settings, api=api, clock=clock, registry=registry, adopt_timeout_s=adopt_timeout_s,
                             backoff_initial_s=backoff_initial_s, backoff_max_s=backoff_max_s)


__all__ = ["KubernetesBackend", "create"]
