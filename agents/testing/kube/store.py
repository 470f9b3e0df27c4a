"""The fake's etcd + watch cache: objects by resource, one global resource version counter, a
bounded history of changes (the compaction window) and watch fan-out.

Every write bumps the counter and stamps ``metadata.resourceVersion`` (a decimal string, as etcd's
revision is). The last ``compaction_window`` changes of each resource are kept (the real watch cache
is per resource type, so a burst of Events never pushes pod history out); a watch that starts from
a version older than the oldest kept change of its resource gets ``410 Gone`` ("too old resource
version"), as a real API server does once etcd compacted. A watch with a label/field filter sees an
object that stops matching as DELETED and one that starts matching as ADDED (the real watch cache's
rule).

In-process components (scheduler, kubelets, kube-proxy, node lifecycle) subscribe with
``listen(callback)``: callbacks run synchronously after each write and must only record what
changed and wake their own task (never write the store from inside a callback)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Callable

from meridian import waits

from agents.testing.kube import objects

log = logging.getLogger("agents.testing.kube.store")

Match = Callable[[dict], bool]


@dataclasses.dataclass(frozen=True)
class Change:
    """One write: ``obj`` is the new state (for DELETED the last state), ``old`` the state before."""
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: str
    obj: dict
    old: dict | None

    @property
    def namespace(self) -> str:
        return self.obj.get("metadata", {}).get("namespace", "")


def _view(change: Change, match: Match) -> tuple[str, dict] | None:
    """What a filtered watcher sees of ``change``: (type, object) or None."""
    new_ok = change.type != "DELETED" and match(change.obj)
    old_ok = change.old is not None and match(change.old)
    if change.type == "DELETED":
        return ("DELETED", change.obj) if match(change.obj) or old_ok else None
    if new_ok and old_ok:
        return "MODIFIED", change.obj
    if new_ok:
        return "ADDED", change.obj
    if old_ok:
        return "DELETED", change.obj
    return None


class Watcher:
    """One open watch: ``await next()`` returns (type, object) or None once closed."""

    def __init__(self, store: Store, resource: str, namespace: str | None, match: Match):
        self._store = store
        self.resource = resource
        self.namespace = namespace
        self.match = match
        self._queue: collections.deque[tuple[str, dict] | None] = collections.deque()
        self._wake = asyncio.Event()
        self.closed = False

    def _offer(self, change: Change) -> None:
        if self.closed or change.resource != self.resource:
            return
        if self.namespace and change.namespace != self.namespace:
            return
        seen = _view(change, self.match)
        if seen is not None:
            self._queue.append((seen[0], objects.deep(seen[1])))
            self._wake.set()

    def _push(self, item: tuple[str, dict] | None) -> None:
        self._queue.append(item)
        self._wake.set()

    def queued(self) -> int:
        """Events waiting to be read (right after ``Store.watch``: the synthetic initial ADDED events)."""
        return len(self._queue)

    async def next(self, timeout_s: float | None = None) -> tuple[str, dict] | None | str:
        """The next event, None when closed, or the string "timeout" when ``timeout_s`` passed first."""
        while not self._queue:
            if self.closed:
                return None
            self._wake.clear()
            if not await waits.event_set(self._wake, timeout_s):
                return "timeout"
        return self._queue.popleft()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._queue.append(None)
            self._wake.set()
            self._store._watchers.discard(self)


class Store:
    """Objects keyed by (resource, namespace, name); namespace "" for cluster-scoped resources."""

    def __init__(self, *, compaction_window: int = 1000):
        if compaction_window < 1:
            raise ValueError(f"compaction_window must be >= 1 change, got {compaction_window}")
        self.compaction_window = compaction_window
        self._objects: dict[str, dict[tuple[str, str], dict]] = collections.defaultdict(dict)
        self._rv = 0
        self._history: dict[str, collections.deque[Change]] = collections.defaultdict(collections.deque)
        self._compacted_rv: dict[str, int] = collections.defaultdict(int)  # per resource: rv <= this forgotten
        self._floor_rv = 0  # compact(): everything up to here is forgotten, for every resource
        self._watchers: set[Watcher] = set()
        self._listeners: list[Callable[[Change], None]] = []

    # ------------------------------------------------------------------ reads

    @property
    def resource_version(self) -> int:
        return self._rv

    def oldest_rv(self, resource: str) -> int:
        """The oldest resource version a watch of ``resource`` may start from."""
        return max(self._floor_rv, self._compacted_rv[resource])

    def peek(self, resource: str, namespace: str, name: str) -> dict | None:
        """The stored object itself (do not mutate; use ``update``)."""
        return self._objects[resource].get((namespace, name))

    def get(self, resource: str, namespace: str, name: str) -> dict:
        obj = self.peek(resource, namespace, name)
        if obj is None:
            raise objects.not_found(resource, name)
        return objects.deep(obj)

    def items(self, resource: str, namespace: str | None = None) -> list[dict]:
        """The stored objects (not copies), sorted by namespace then name, as etcd orders keys."""
        table = self._objects[resource]
        keys = sorted(k for k in table if namespace is None or k[0] == namespace)
        return [table[k] for k in keys]

    def list(self, resource: str, namespace: str | None = None, match: Match | None = None) -> list[dict]:
        return [objects.deep(o) for o in self.items(resource, namespace) if match is None or match(o)]

    def snapshot(self, resource: str, namespace: str | None, at_rv: int) -> list[dict]:
        """The stored objects of ``resource`` as they were at ``at_rv`` (undoing later changes from the
        history; 410 Gone when compacted past it). Not copies."""
        if at_rv >= self._rv:
            return self.items(resource, namespace)
        if at_rv < self.oldest_rv(resource):
            raise objects.gone("The resourceVersion for the provided list is too old.")
        current = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
                   for o in self.items(resource, namespace)}
        for change in reversed(self._history[resource]):
            if change.rv <= at_rv:
                break
            if namespace and change.namespace != namespace:
                continue
            key = (change.namespace, change.obj["metadata"]["name"])
            if change.old is None:
                current.pop(key, None)
            else:
                current[key] = change.old
        return [current[k] for k in sorted(current)]

    # ------------------------------------------------------------------ writes

    def _record(self, change_type: str, resource: str, obj: dict, old: dict | None) -> Change:
        change = Change(self._rv, change_type, resource, obj, old)
        history = self._history[resource]
        history.append(change)
        while len(history) > self.compaction_window:
            self._compacted_rv[resource] = history.popleft().rv
        for watcher in list(self._watchers):
            watcher._offer(change)
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:  # a component's bug must not break the API server's write path
                log.exception("event=listener_failed resource=%s", resource)
        return change

    def _key(self, obj: dict) -> tuple[str, str]:
        m = obj["metadata"]
        return m.get("namespace", ""), m["name"]

    def create(self, resource: str, obj: dict) -> dict:
        key = self._key(obj)
        if key in self._objects[resource]:
            raise objects.already_exists(resource, key[1])
        self._rv += 1
        stored = objects.deep(obj)
        stored["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[resource][key] = stored
        self._record("ADDED", resource, stored, None)
        return objects.deep(stored)

    def update(self, resource: str, obj: dict, *, expect_rv: str | None = None) -> dict:
        """Replace the stored object; ``expect_rv`` (when given) must be the stored version (409 otherwise).
        An update that changes nothing is not written (no new version, no event), as the real server does."""
        key = self._key(obj)
        old = self._objects[resource].get(key)
        if old is None:
            raise objects.not_found(resource, key[1])
        if expect_rv and expect_rv != old["metadata"]["resourceVersion"]:
            raise objects.conflict(resource, key[1])
        candidate = objects.deep(obj)
        candidate["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if candidate == old:
            return objects.deep(old)
        self._rv += 1
        candidate["metadata"]["resourceVersion"] = str(self._rv)
        self._objects[resource][key] = candidate
        self._record("MODIFIED", resource, candidate, old)
        return objects.deep(candidate)

    def delete(self, resource: str, namespace: str, name: str) -> dict:
        old = self._objects[resource].pop((namespace, name), None)
        if old is None:
            raise objects.not_found(resource, name)
        self._rv += 1
        last = objects.deep(old)
        last["metadata"]["resourceVersion"] = str(self._rv)
        self._record("DELETED", resource, last, old)
        return objects.deep(last)

    def compact(self) -> int:
        """Forget every change so far (as an etcd compaction at the current revision); returns it."""
        for history in self._history.values():
            history.clear()
        self._floor_rv = self._rv
        log.info("event=compacted resource_version=%d", self._rv)
        return self._rv

    # ------------------------------------------------------------------ watch

    def listen(self, callback: Callable[[Change], None]) -> None:
        self._listeners.append(callback)

    def unlisten(self, callback: Callable[[Change], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def watch(self, resource: str, namespace: str | None, match: Match, since_rv: int | None) -> Watcher:
        """Open a watch. ``since_rv`` None: synthetic ADDED events for the current state, then changes;
        an int: every change after it (410 Gone when compacted past it; 504 when in the future)."""
        watcher = Watcher(self, resource, namespace, match)
        if since_rv is None:
            for obj in self.items(resource, namespace):
                if match(obj):
                    watcher._push(("ADDED", objects.deep(obj)))
        else:
            oldest = self.oldest_rv(resource)
            if since_rv < oldest:
                raise objects.gone(f"too old resource version: {since_rv} ({oldest + 1})")
            if since_rv > self._rv:
                raise objects.ApiError(504, "Timeout", f"Timeout: Too large resource version: {since_rv}, "
                                       f"current: {self._rv}", {"causes": [{"reason": "ResourceVersionTooLarge",
                                                                             "message": "Too large resource version"}],
                                                                "retryAfterSeconds": 1})
            for change in self._history[resource]:
                if change.rv > since_rv:
                    watcher._offer(change)
        self._watchers.add(watcher)
        return watcher

    def close_watches(self) -> int:
        """End every open watch (the API server going away); returns how many were open."""
        open_watches = list(self._watchers)
        for watcher in open_watches:
            watcher.close()
        return len(open_watches)
