"""The fake API server's HTTP surface (aiohttp): discovery, core/v1 CRUD, list with selectors and
pagination, watch streams, pod logs, eviction and binding, bearer-token authentication. Errors are
``Status`` objects with the real ``reason`` and ``code``.

Watch streams are newline-delimited JSON events over a chunked response. A watch from a compacted
resourceVersion answers HTTP 200 with one ERROR event carrying a 410 Expired Status, as the real
server's watch cache does; kubernetes_asyncio's ``Watch`` turns it into ``ApiException(410)``."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import pathlib
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from meridian import waits

from agents.testing.kube import objects, registry, selectors, store

log = logging.getLogger("agents.testing.kube.api")

API_VERSION_INFO = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-meridian-fake", "gitCommit": "fake",
                    "gitTreeState": "clean", "buildDate": "2024-08-13T00:00:00Z", "goVersion": "go1.22.5",
                    "compiler": "gc", "platform": "linux/amd64"}
_TRUE = ("true", "1", "t", "yes")


class LogSource(Protocol):
    def log_path(self, namespace: str, pod: str, container: str | None, previous: bool) -> pathlib.Path:
        """The container's log file; raises ApiError (400/404) with the real server's message."""

    def is_running(self, namespace: str, pod: str, container: str | None) -> bool:
        """Whether the container still runs (a followed log ends when it stops)."""


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in _TRUE


def _int_param(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise objects.bad_request(f"{name}: Invalid value: \"{raw}\": must be an integer") from None


def _rv_param(raw: str | None) -> int | None:
    """A resourceVersion query parameter: None for unset, "" or "0" (any/most recent), else the number."""
    if raw in (None, "", "0"):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise objects.bad_request(f'resourceVersion: Invalid value: "{raw}": strconv.ParseUint: parsing "{raw}": '
                                  f'invalid syntax') from None
    if value < 0:
        raise objects.bad_request(f'resourceVersion: Invalid value: "{raw}": must be a non-negative number')
    return value


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(obj).encode(), content_type="application/json")


def _error(exc: objects.ApiError) -> web.Response:
    return _json(exc.status(), exc.code)


class ApiServer:
    """Serves one cluster's store. ``listen(port)`` / ``close()`` can be repeated (pause and resume)."""

    def __init__(self, reg: registry.Registry, *, token: str | None, log_source: LogSource,
                 bookmark_interval_s: float = 60.0, max_watch_s: float = 1800.0,
                 on_request: Callable[[str, str], None] | None = None):
        self.registry = reg
        self.store = reg.store
        self.token = token
        self.log_source = log_source
        self.bookmark_interval_s = bookmark_interval_s
        self.max_watch_s = max_watch_s
        self._on_request = on_request
        self.delays: dict[str, float] = {}  # request path -> seconds every request to it waits (a slow list)
        self._runner: web.AppRunner | None = None
        self._streams: set[asyncio.Event] = set()
        self.port = 0
        self.requests = 0

    # ------------------------------------------------------------------ lifecycle

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=8 * 1024 * 1024)
        r = app.router
        for path in ("/healthz", "/livez", "/readyz"):
            r.add_get(path, self._health)
        r.add_get("/version", self._version)
        r.add_get("/version/", self._version)
        r.add_get("/api", self._api_versions)
        r.add_get("/api/", self._api_versions)
        r.add_get("/apis", self._api_groups)
        r.add_route("*", "/api/v1", self._resource_list)
        r.add_route("*", "/api/v1/{tail:.*}", self._dispatch)
        return app

    async def listen(self, port: int = 0, host: str = "127.0.0.1") -> int:
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        self._runner = runner
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        log.info("event=api_listening url=http://%s:%d", host, self.port)
        return self.port

    async def close(self) -> None:
        """Stop listening and drop every connection, open watches and followed logs included."""
        ended = self.store.close_watches()
        for stream in list(self._streams):
            stream.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        log.info("event=api_closed port=%d watches_ended=%d", self.port, ended)

    # ------------------------------------------------------------------ plumbing

    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        self.requests += 1
        if self._on_request is not None:
            self._on_request(request.method, request.path)
        if (delay_s := self.delays.get(request.path)) is not None:
            await asyncio.sleep(delay_s)
        if (self.token is not None and request.path not in ("/healthz", "/livez", "/readyz")
                and request.headers.get("Authorization", "") != f"Bearer {self.token}"):
            log.info("event=unauthorized method=%s path=%s", request.method, request.path)
            return _error(objects.unauthorized())
        try:
            return await handler(request)
        except objects.ApiError as exc:
            if exc.code >= 500:
                log.warning("event=api_error code=%d path=%s message=%s", exc.code, request.path, exc.message)
            return _error(exc)
        except web.HTTPException:
            raise
        except Exception as exc:  # an unexpected bug answers 500 InternalError, as the real server would
            log.exception("event=api_internal_error method=%s path=%s", request.method, request.path)
            return _error(objects.ApiError(500, "InternalError", f"Internal error occurred: {exc}"))

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _version(self, request: web.Request) -> web.Response:
        return _json(API_VERSION_INFO)

    async def _api_groups(self, request: web.Request) -> web.Response:
        return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})

    async def _api_versions(self, request: web.Request) -> web.Response:
        return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}]})

    async def _resource_list(self, request: web.Request) -> web.Response:
        resources = []
        for kind in registry.KINDS.values():
            resources.append({"name": kind.resource, "singularName": kind.singular, "namespaced": kind.namespaced,
                              "kind": kind.kind, "verbs": list(kind.verbs), "shortNames": list(kind.short_names)})
            for sub in registry.SUBRESOURCES.get(kind.resource, ()):
                sub_kind = {"eviction": "Eviction", "binding": "Binding", "log": "Pod"}.get(sub, kind.kind)
                verbs = {"log": ["get"], "eviction": ["create"], "binding": ["create"]}.get(sub, ["get", "patch",
                                                                                                  "update"])
                resources.append({"name": f"{kind.resource}/{sub}", "singularName": "", "namespaced": kind.namespaced,
                                  "kind": sub_kind, "verbs": verbs})
        return _json({"kind": "APIResourceList", "groupVersion": "v1", "resources": resources})

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise objects.bad_request(f"the request body is not valid JSON: {exc}") from None

    # ------------------------------------------------------------------ routing

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.match_info["tail"].split("/") if p]
        watch = False
        if parts and parts[0] == "watch":
            watch, parts = True, parts[1:]
        namespace = None
        if parts[:1] == ["namespaces"] and len(parts) >= 3 and parts[2] not in ("status", "finalize"):
            namespace, parts = parts[1], parts[2:]
        if not parts or len(parts) > 3:
            raise registry.no_such_path()
        resource, name = parts[0], (parts[1] if len(parts) > 1 else None)
        sub = parts[2] if len(parts) > 2 else None
        kind = registry.kind_of(resource)
        if kind.namespaced and namespace is None and name is not None:
            raise registry.no_such_path()  # /api/v1/pods/<name>: no such path
        if not kind.namespaced and namespace is not None:
            raise registry.no_such_path()
        if sub is not None and sub not in registry.SUBRESOURCES.get(resource, ()):
            raise registry.no_such_path()
        ns = namespace or ""
        method = request.method
        if watch or (name is None and method == "GET" and _flag(request, "watch")):
            if method != "GET":
                raise objects.ApiError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                       "requested resource")
            if name is not None:  # /watch/namespaces/ns/pods/name: a watch on one object
                return await self._watch(request, resource, namespace, f"metadata.name={name}")
            return await self._watch(request, resource, namespace, None)
        if name is None:
            if method == "GET":
                return self._list(request, resource, namespace)
            if method == "POST":
                if kind.namespaced and namespace is None:
                    raise objects.ApiError(405, "MethodNotAllowed", "the server does not allow this method on "
                                           "the requested resource")
                created = self.registry.create(resource, ns, await self._body(request),
                                               dry_run=request.query.get("dryRun") == "All")
                return _json(created, 201)
            if method == "DELETE":
                return await self._delete_collection(request, resource, namespace)
            raise objects.ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                   "resource")
        if sub == "log":
            return await self._log(request, ns, name)
        if sub == "eviction" and method == "POST":
            return _json(self.registry.evict(ns, name, await self._body(request)), 201)
        if sub == "binding" and method == "POST":
            body = await self._body(request) or {}
            target = (body.get("target") or {}).get("name")
            if not target:
                raise objects.ApiError(422, "Invalid", f'Binding "{name}" is invalid: target.name: Required value')
            self.registry.bind(ns, name, target)
            return _json(registry.success("pods", name, code=201), 201)
        if method == "GET":
            return _json(self.store.get(resource, ns, name))
        if method == "PUT":
            return _json(self.registry.replace(resource, ns, name, await self._body(request), subresource=sub))
        if method == "PATCH":
            return _json(self.registry.patch(resource, ns, name, request.headers.get("Content-Type", ""),
                                             await self._body(request), subresource=sub))
        if method == "DELETE" and sub is None:
            options = await self._body(request) or {}
            grace = options.get("gracePeriodSeconds")
            if grace is None:
                grace = _int_param(request, "gracePeriodSeconds")
            return _json(self.registry.delete(resource, ns, name, grace_s=grace,
                                              preconditions=options.get("preconditions")))
        raise objects.ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                               "resource")

    # ------------------------------------------------------------------ list

    def _matcher(self, request: web.Request, resource: str, extra_field: str | None = None) -> store.Match:
        labels = selectors.parse_label_selector(request.query.get("labelSelector"))
        field_text = ",".join(s for s in (request.query.get("fieldSelector"), extra_field) if s)
        fields = selectors.parse_field_selector(resource, field_text)
        return lambda obj: labels(obj) and fields(obj)

    def _list(self, request: web.Request, resource: str, namespace: str | None) -> web.Response:
        kind = registry.kind_of(resource)
        match = self._matcher(request, resource)
        limit = _int_param(request, "limit") or 0
        token = request.query.get("continue")
        rv = _rv_param(request.query.get("resourceVersion"))
        exact = request.query.get("resourceVersionMatch") == "Exact"
        start_after: list[str] | None = None
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                at_rv, start_after = int(decoded["rv"]), list(decoded["start"])
            except (ValueError, KeyError, TypeError, binascii.Error):
                raise objects.bad_request(f"continue key is not valid: {token!r}") from None
            if at_rv < self.store.oldest_rv(resource):
                raise objects.gone("The provided continue parameter is too old to display a consistent list result. "
                                   "You can start a new list without the continue parameter.")
        elif rv is not None and rv > self.store.resource_version:
            raise objects.ApiError(504, "Timeout", f"Timeout: Too large resource version: {rv}, current: "
                                   f"{self.store.resource_version}", {"retryAfterSeconds": 1})
        elif exact and rv is not None:
            at_rv = rv
        else:
            at_rv = self.store.resource_version
        items = self.store.snapshot(resource, namespace, at_rv)
        if start_after is not None:
            items = [o for o in items if [o["metadata"].get("namespace", ""), o["metadata"]["name"]] > start_after]
        items = [o for o in items if match(o)]
        md: dict[str, Any] = {"resourceVersion": str(at_rv)}
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]
            md["continue"] = base64.urlsafe_b64encode(json.dumps(
                {"rv": at_rv, "start": [last.get("namespace", ""), last["name"]]}).encode()).decode()
            md["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        out = []
        for obj in items:
            item = objects.deep(obj)
            item.pop("kind", None)
            item.pop("apiVersion", None)
            out.append(item)
        return _json({"kind": f"{kind.kind}List", "apiVersion": "v1", "metadata": md, "items": out})

    async def _delete_collection(self, request: web.Request, resource: str, namespace: str | None) -> web.Response:
        options = await self._body(request) or {}
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = _int_param(request, "gracePeriodSeconds")
        match = self._matcher(request, resource)
        for obj in list(self.store.items(resource, namespace)):
            if match(obj) and self.store.peek(resource, obj["metadata"].get("namespace", ""),
                                              obj["metadata"]["name"]) is not None:
                self.registry.delete(resource, obj["metadata"].get("namespace", ""), obj["metadata"]["name"],
                                     grace_s=grace)
        return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})

    # ------------------------------------------------------------------ watch

    async def _watch(self, request: web.Request, resource: str, namespace: str | None,
                     extra_field: str | None) -> web.StreamResponse:
        kind = registry.kind_of(resource)
        match = self._matcher(request, resource, extra_field)
        rv = _rv_param(request.query.get("resourceVersion"))
        timeout_s = _int_param(request, "timeoutSeconds")
        bookmarks = _flag(request, "allowWatchBookmarks")
        initial_end = _flag(request, "sendInitialEvents")
        if initial_end and not bookmarks:
            raise objects.ApiError(422, "Invalid", "ListOptions.meta.k8s.io \"\" is invalid: allowWatchBookmarks: "
                                   "Required value: allowWatchBookmarks must be set to true when sendInitialEvents is "
                                   "set to true")
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            watcher = self.store.watch(resource, namespace, match, None if initial_end else rv)
        except objects.ApiError as exc:
            await response.write(json.dumps({"type": "ERROR", "object": exc.status()}).encode() + b"\n")
            await response.write_eof()
            return response
        initial = watcher.queued() if (initial_end or rv is None) else 0
        deadline = asyncio.get_running_loop().time() + (timeout_s if timeout_s else self.max_watch_s)
        log.debug("event=watch_open resource=%s namespace=%s rv=%s", resource, namespace or "*", rv)
        try:
            sent = 0
            if initial_end and initial == 0:
                await self._bookmark(response, kind.kind, initial_end=True)
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                item = await watcher.next(min(remaining, self.bookmark_interval_s) if bookmarks else remaining)
                if item is None:
                    break
                if item == "timeout":
                    if bookmarks and deadline - asyncio.get_running_loop().time() > 0:
                        await self._bookmark(response, kind.kind)
                    continue
                event_type, obj = item  # type: ignore[misc]
                await response.write(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")
                sent += 1
                if initial_end and sent == initial:
                    await self._bookmark(response, kind.kind, initial_end=True)
        except (ConnectionResetError, asyncio.CancelledError):
            watcher.close()
            raise
        finally:
            watcher.close()
        try:
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response

    async def _bookmark(self, response: web.StreamResponse, kind: str, *, initial_end: bool = False) -> None:
        md: dict[str, Any] = {"resourceVersion": str(self.store.resource_version)}
        if initial_end:
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        await response.write(json.dumps({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1",
                                                                        "metadata": md}}).encode() + b"\n")

    # ------------------------------------------------------------------ logs

    async def _log(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        if request.method != "GET":
            raise objects.ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                   "resource")
        self.store.get("pods", namespace, name)  # 404 first
        container = request.query.get("container") or None
        path = self.log_source.log_path(namespace, name, container, _flag(request, "previous"))
        tail = _int_param(request, "tailLines")
        limit_bytes = _int_param(request, "limitBytes")
        data = path.read_bytes() if path.exists() else b""
        if tail is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail > 0 else b""
        if limit_bytes is not None:
            data = data[:limit_bytes]
        if not _flag(request, "follow"):
            return web.Response(body=data, content_type="text/plain")
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(data)
        offset = path.stat().st_size if path.exists() else 0
        stop = asyncio.Event()
        self._streams.add(stop)
        try:
            while not stop.is_set():
                size = path.stat().st_size if path.exists() else 0
                if size > offset:
                    with path.open("rb") as fh:
                        fh.seek(offset)
                        chunk = fh.read(size - offset)
                    offset = size
                    await response.write(chunk)
                elif not self.log_source.is_running(namespace, name, container):
                    break
                await waits.event_set(stop, 0.2)
        finally:
            self._streams.discard(stop)
        await response.write_eof()
        return response
