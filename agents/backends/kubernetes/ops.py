"""The kubernetes backend's side effects beside its watches, each as retried or as best-effort as it
needs to be: deleting a pod (and its Service) until the API server confirms, creating a replica's
Service, posting Events, scraping ready pods' ``/metrics``. Background work runs as tasks the
backend owns (cancelled at close); failures are logged and counted
(``meridian_agent_kube_api_errors_total``), never lost silently."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import aiohttp
import prometheus_client as prom
from runtime_adapter import config as adapter_config
from runtime_adapter import scraper as scraper_mod

from meridian import backoff as backoff_mod
from meridian.fleet import models
from meridian.spec import replicas as replicas_spec

from agents.backends.kubernetes import client as client_mod
from agents.backends.kubernetes import manifest, tracked

log = logging.getLogger(__name__)


class PodOps:
    def __init__(self, settings: replicas_spec.KubernetesReplicas, cluster_id: str, *, clock: Callable[[], float],
                 backoff: Callable[[], backoff_mod.Backoff], registry: prom.CollectorRegistry):
        self._k = settings
        self._cluster_id = cluster_id
        self._clock = clock
        self._backoff = backoff
        self.api: client_mod.Api | None = None
        self._tasks: set[asyncio.Task] = set()
        self._errors = prom.Counter("meridian_agent_kube_api_errors_total", "Failed Kubernetes API calls",
                                    ["cluster", "operation", "status"], registry=registry)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def api_error(self, exc: client_mod.KubeError) -> None:
        self._errors.labels(self._cluster_id, exc.operation, str(exc.status)).inc()
        log.warning("event=kube_api_error cluster=%s %s", self._cluster_id, exc)

    async def best_effort(self, coro: Coroutine[Any, Any, Any]) -> object:
        """One call whose failure is logged and counted, not raised."""
        try:
            return await coro
        except client_mod.KubeError as exc:
            self.api_error(exc)
            return None

    def _api(self) -> client_mod.Api:
        assert self.api is not None, "the backend connects before anything else runs"
        return self.api

    async def delete(self, r: tracked.PodReplica, *, grace_s: int) -> None:
        """Delete the pod with ``grace_s``, retrying with backoff while the API server is away; then
        (Service mode) its Service, once the pod is gone."""
        retry = self._backoff()
        while True:
            try:
                if not await self._api().delete_pod(r.name, grace_s):
                    r.deleted = True  # already gone
                    r.gone.set()
                break
            except client_mod.KubeError as exc:
                self.api_error(exc)
                await asyncio.sleep(retry.next_delay_s())
        if self._k.endpoint.mode == "service":
            await r.gone.wait()
            await self.best_effort(self._api().delete_service(r.name))

    def delete_orphan(self, name: str, grace_s: int) -> None:
        self.spawn(self.best_effort(self._api().delete_pod(name, grace_s)), f"orphan-{name}")

    def delete_service(self, name: str) -> None:
        self.spawn(self.best_effort(self._api().delete_service(name)), f"delete-svc-{name}")

    async def ensure_service(self, r: tracked.PodReplica) -> None:
        """Create the replica's Service once its pod has a uid (the owner reference), retrying."""
        retry = self._backoff()
        while r.state not in tracked.TERMINAL and not r.deleting:
            uid = ((r.pod or {}).get("metadata") or {}).get("uid")
            if uid and r.pod is not None:
                try:
                    await self._api().create_service(manifest.service(r.pod, self._k))
                    return
                except client_mod.KubeError as exc:
                    self.api_error(exc)
                    if exc.status == 409:
                        return
            await asyncio.sleep(retry.next_delay_s())

    def event(self, r: tracked.PodReplica, reason: str, message: str, warning: bool = False) -> None:
        """Post a Kubernetes Event on the replica's pod (``post_events``), in the background."""
        if not self._k.post_events or self.api is None or r.pod is None:
            return
        now = datetime.datetime.fromtimestamp(self._clock(), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = manifest.event(r.pod, reason, message, type_="Warning" if warning else "Normal", now_iso=now)
        self.spawn(self.best_effort(self.api.create_event(body)), f"event-{r.name}-{reason}")

    async def scrape_loop(self, replicas: Callable[[], Iterable[tracked.PodReplica]], session: aiohttp.ClientSession,
                          config: adapter_config.SupervisorConfig) -> None:
        """Every ``scrape_interval_s``: each ready pod's ``/metrics`` (pod IP, engine port) into its load."""
        while True:
            await asyncio.sleep(config.scrape_interval_s)
            ready = [r for r in replicas() if r.state == models.ReplicaState.READY and r.view.pod_ip]
            await asyncio.gather(*(self._scrape(r, session, config) for r in ready))

    async def _scrape(self, r: tracked.PodReplica, session: aiohttp.ClientSession,
                      config: adapter_config.SupervisorConfig) -> None:
        # With TLS the engine listens on the pod's loopback: its /metrics come through the adapter port.
        url = (f"http://{r.view.pod_ip}:{self._k.adapter_port}/engine" if self._k.tls_secret
               else f"http://{r.view.pod_ip}:{self._k.engine_port}")
        if r.scraper is None or r.scraper_url != url:
            r.scraper = scraper_mod.Scraper(session, url, window_s=config.load_window_s, timeout_s=config.scrape_timeout_s)
            r.scraper_url = url
        try:
            r.load = await r.scraper.scrape()
        except scraper_mod.ScrapeError as exc:
            log.debug("event=kube_scrape_failed replica=%s error=%r", r.placement.replica_id, str(exc))

    async def request_drain(self, r: tracked.PodReplica, session: aiohttp.ClientSession, deadline_s: float) -> None:
        """Give the pod's adapter the drain directive's deadline (``GET /drain?deadline_s=N`` on the
        pod IP and adapter port: it joins the preStop's drain, whichever comes first) and keep its
        answer, what the drain did. Unreachable (a network policy): the preStop drains with the
        pod's own default, and the backend times the drain instead."""
        if not r.view.pod_ip:
            return
        url = f"http://{r.view.pod_ip}:{self._k.adapter_port}/drain?deadline_s={deadline_s:g}"
        try:
            timeout = aiohttp.ClientTimeout(total=deadline_s + self._k.stop_grace_s + 10, sock_connect=5)
            async with session.get(url, timeout=timeout) as resp:
                body = await resp.json(content_type=None)
            if resp.status == 200 and isinstance(body, dict):
                r.drain_result = body
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            log.info("event=kube_drain_unreachable replica=%s error=%r: the preStop drains alone",
                     r.placement.replica_id, str(exc))

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["PodOps"]
