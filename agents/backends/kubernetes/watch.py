"""Keeping a local copy of one kind of object in step with the API server, as client-go's informers
do: list, then watch from the list's resourceVersion; a watch that ends is resumed from the last
resourceVersion seen; a 410 Gone (the version was compacted away) means list again; an API server
that cannot be reached is retried with the project's backoff (``meridian.backoff``) while the copy
keeps serving what it last knew. Every change (including those a relist reveals) is handed to
``on_event(type, object, previous)`` as ADDED, MODIFIED or DELETED, objects as plain dicts."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import prometheus_client as prom
from kubernetes_asyncio import watch as kube_watch
from kubernetes_asyncio.client import exceptions as kube_exceptions

from meridian import backoff as backoff_mod

log = logging.getLogger(__name__)

OnEvent = Callable[[str, dict, "dict | None"], None]
# What an unreachable or failing API server raises through the client.
TRANSIENT = (aiohttp.ClientError, OSError, asyncio.TimeoutError, kube_exceptions.ApiException, ValueError)


class WatchMetrics:
    def __init__(self, cluster_id: str, registry: prom.CollectorRegistry | None):
        r = registry or prom.CollectorRegistry()
        self._cluster = cluster_id
        self.restarts = prom.Counter("meridian_agent_kube_watch_restarts_total",
                                     "Watches resumed (closed), relisted (gone: 410) or retried after an error",
                                     ["cluster", "resource", "reason"], registry=r)
        self.synced = prom.Gauge("meridian_agent_kube_watch_synced",
                                 "1 while the resource's watch is up to date with the API server",
                                 ["cluster", "resource"], registry=r)
        self.events = prom.Counter("meridian_agent_kube_watch_events_total", "Watch events by resource and type",
                                   ["cluster", "resource", "type"], registry=r)

    def restart(self, resource: str, reason: str) -> None:
        self.restarts.labels(self._cluster, resource, reason).inc()

    def set_synced(self, resource: str, up: bool) -> None:
        self.synced.labels(self._cluster, resource).set(1 if up else 0)

    def event(self, resource: str, type_: str) -> None:
        self.events.labels(self._cluster, resource, type_).inc()


class ListError(Exception):
    """A list answered with an error status; ``status`` is the HTTP code."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


async def read_list(resp: Any) -> dict:
    """The JSON of a list made with ``_preload_content=False`` (raises ListError on a bad status)."""
    try:
        body = await resp.read()
    finally:
        resp.release()
    if not 200 <= resp.status <= 299:
        try:
            message = json.loads(body).get("message", "")
        except ValueError:
            message = body[:200].decode(errors="replace")
        raise ListError(resp.status, f"list answered {resp.status}: {message}")
    return json.loads(body)


class Informer:
    """One resource's copy. ``list_fn(**kwargs)`` is a CoreV1Api list method with its fixed
    arguments bound (namespace, label selector); ``objects`` maps name -> object."""

    def __init__(self, resource: str, list_fn: Callable[..., Awaitable[Any]], on_event: OnEvent, *,
                 backoff: backoff_mod.Backoff, metrics: WatchMetrics, watch_timeout_s: int = 300,
                 request_timeout_s: float = 30.0):
        self.resource = resource
        self._list = list_fn
        self._on_event = on_event
        self._backoff = backoff
        self._metrics = metrics
        self._watch_timeout_s = watch_timeout_s
        self._request_timeout_s = request_timeout_s
        self.objects: dict[str, dict] = {}
        self.resource_version = ""
        self.synced = asyncio.Event()  # set after the first complete list
        self.connected = False
        self.last_error = ""
        self.relists = 0

    def _emit(self, type_: str, obj: dict, previous: dict | None) -> None:
        self._metrics.event(self.resource, type_)
        try:
            self._on_event(type_, obj, previous)
        except Exception:  # a handler bug must not stop the watch; logged with the object's name
            log.exception("event=kube_handler_failed resource=%s type=%s name=%s", self.resource, type_,
                          obj.get("metadata", {}).get("name"))

    async def relist(self) -> None:
        """List everything, replace the copy, hand the differences to ``on_event``."""
        data = await read_list(await self._list(_preload_content=False, _request_timeout=self._request_timeout_s))
        items = {item["metadata"]["name"]: item for item in data.get("items") or []}
        self.resource_version = (data.get("metadata") or {}).get("resourceVersion", "")
        old = self.objects
        self.objects = items
        for name, obj in items.items():
            prev = old.get(name)
            if prev is None:
                self._emit("ADDED", obj, None)
            elif prev.get("metadata", {}).get("resourceVersion") != obj.get("metadata", {}).get("resourceVersion"):
                self._emit("MODIFIED", obj, prev)
        for name in set(old) - set(items):
            self._emit("DELETED", old[name], old[name])
        self.relists += 1
        self.synced.set()

    def _apply(self, type_: str, obj: dict) -> None:
        name = obj.get("metadata", {}).get("name", "")
        rv = obj.get("metadata", {}).get("resourceVersion")
        if rv:
            self.resource_version = rv
        if type_ == "BOOKMARK":
            return
        prev = self.objects.get(name)
        if type_ == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = obj
            type_ = "MODIFIED" if prev is not None else "ADDED"
        self._emit(type_, obj, prev)

    async def _watch_once(self) -> None:
        """One watch request from ``resource_version`` until the server ends it."""
        w = kube_watch.Watch(return_type="object")
        try:
            stream = w.stream(self._list, resource_version=self.resource_version, timeout_seconds=self._watch_timeout_s,
                              allow_watch_bookmarks=True, _request_timeout=self._watch_timeout_s + 30)
            async for event in stream:
                self._up()
                self._apply(event["type"], event["raw_object"])
        finally:
            await w.close()

    async def run(self) -> None:
        """List, then watch, forever (until cancelled)."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self.relist()
                    need_list = False
                    self._up()
                await self._watch_once()
                self._metrics.restart(self.resource, "closed")
            except asyncio.CancelledError:
                raise
            except (ListError, kube_exceptions.ApiException) as exc:
                status = getattr(exc, "status", 0)
                if status == 410:
                    log.info("event=kube_watch_gone resource=%s rv=%s: listing again", self.resource,
                             self.resource_version)
                    self._metrics.restart(self.resource, "gone")
                    need_list = True
                    continue
                await self._failed(exc, need_list)
                need_list = need_list or status in (401, 403, 404)
            except TRANSIENT as exc:
                await self._failed(exc, need_list)

    def _up(self) -> None:
        """The API server answered: the copy is current again, the next failure starts the backoff anew."""
        if not self.connected:
            self.connected = True
            self._metrics.set_synced(self.resource, True)
        self._backoff.reset()

    async def _failed(self, exc: BaseException, listing: bool) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"
        self.connected = False
        self._metrics.set_synced(self.resource, False)
        self._metrics.restart(self.resource, "error")
        delay = self._backoff.next_delay_s()
        log.warning("event=kube_watch_error resource=%s during=%s error=%r retry_in_s=%.2f", self.resource,
                    "list" if listing else "watch", self.last_error[:300], delay)
        await asyncio.sleep(delay)


__all__ = ["Informer", "ListError", "TRANSIENT", "WatchMetrics", "read_list"]
