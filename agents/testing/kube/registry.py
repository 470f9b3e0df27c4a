"""The API server's write path over the store: create (defaults, validation, generateName, uid,
ClusterIP and NodePort allocation), replace and patch (optimistic concurrency on
``metadata.resourceVersion``, immutable fields, the ``status`` subresource), graceful deletion (pods
get ``deletionTimestamp`` + ``deletionGracePeriodSeconds`` and are removed once the kubelet finished;
finalizers hold any object), binding, eviction and core/v1 Events.

The HTTP layer (api.py) and the in-process components (scheduler, kubelets, proxy) both write through
here, so an object always looks the same however it was written."""

from __future__ import annotations

import dataclasses
import logging
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from agents.testing.kube import ipam, objects, patch, store, validation

log = logging.getLogger("agents.testing.kube.registry")


@dataclasses.dataclass(frozen=True)
class Kind:
    resource: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
    returns_deleted_object: bool = True


KINDS: dict[str, Kind] = {
    "pods": Kind("pods", "Pod", True, "pod", ("po",)),
    "services": Kind("services", "Service", True, "service", ("svc",)),
    "nodes": Kind("nodes", "Node", False, "node", ("no",), returns_deleted_object=False),
    "namespaces": Kind("namespaces", "Namespace", False, "namespace", ("ns",),
                       ("create", "delete", "get", "list", "patch", "update", "watch")),
    "events": Kind("events", "Event", True, "event", ("ev",), returns_deleted_object=False),
}
SUBRESOURCES = {"pods": ("status", "log", "eviction", "binding"), "services": ("status",), "nodes": ("status",),
                "namespaces": ("status",)}
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # the generator's alphabet (no vowels, no look-alikes)


def no_such_path() -> objects.ApiError:
    return objects.ApiError(404, "NotFound", "the server could not find the requested resource",
                            {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})


def kind_of(resource: str) -> Kind:
    try:
        return KINDS[resource]
    except KeyError:
        raise no_such_path() from None


def success(kind: str, name: str, uid: str = "", code: int = 200) -> dict:
    details: dict[str, Any] = {"name": name, "kind": kind}
    if uid:
        details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details,
            "code": code}


class Registry:
    def __init__(self, st: store.Store, *, clock: Callable[[], float], service_ips: ipam.IpPool,
                 node_ports: ipam.PortPool, rng: random.Random | None = None):
        self.store = st
        self._clock = clock
        self._service_ips = service_ips
        self._node_ports = node_ports
        self._rng = rng or random.Random()
        self._event_index: dict[tuple, tuple[str, str]] = {}

    def now(self) -> str:
        return objects.timestamp(self._clock())

    # ------------------------------------------------------------------ create

    def create(self, resource: str, namespace: str, body: Any, *, dry_run: bool = False) -> dict:
        kind = kind_of(resource)
        if not isinstance(body, dict):
            raise objects.bad_request(f"the body of the request must be a {kind.kind} object")
        obj = objects.deep(body)
        if obj.get("kind") not in (None, "", kind.kind):
            raise objects.bad_request(f"the API version in the data (v1) does not match the expected kind: got "
                                      f"{obj.get('kind')!r}, want {kind.kind!r}")
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise objects.bad_request("metadata must be an object")
        if kind.namespaced:
            if md.get("namespace") and md["namespace"] != namespace:
                raise objects.bad_request("the namespace of the provided object does not match the namespace sent "
                                          "on the request")
            md["namespace"] = namespace
            self._check_namespace_open(namespace)
        else:
            md.pop("namespace", None)
        if not md.get("name") and md.get("generateName"):
            suffix = "".join(self._rng.choice(_NAME_CHARS) for _ in range(5))
            md["name"] = md["generateName"][:63 - 5] + suffix
        causes = objects.Causes()
        name = md.get("name") or ""
        if not name:
            causes.required("metadata.name: name or generateName is required")
        else:
            validation.check_name(causes, resource, name)
        validation.check_metadata(causes, obj)
        for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            md.pop(key, None)
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = self.now()
        if resource != "events":
            md["generation"] = 1
        obj["kind"], obj["apiVersion"] = kind.kind, "v1"
        if resource == "pods":
            validation.default_pod(obj)
            obj["status"] = {"phase": "Pending", "qosClass": obj["status"].get("qosClass", "BestEffort")}
        elif resource == "services":
            validation.default_service(obj)
        elif resource == "namespaces":
            obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
            obj["status"] = {"phase": "Active"}
        validator = validation.VALIDATORS.get(resource)
        if validator is not None:
            causes.items.extend(validator(obj).items)
        causes.raise_if_any(kind.kind, name)
        if self.store.peek(resource, md.get("namespace", ""), name) is not None:
            raise objects.already_exists(resource, name)
        if resource == "services":
            self._allocate_service(obj, None, dry_run=dry_run)
        if dry_run:
            return obj
        created = self.store.create(resource, obj)
        log.debug("event=created resource=%s namespace=%s name=%s rv=%s", resource, md.get("namespace", ""), name,
                  created["metadata"]["resourceVersion"])
        return created

    def _check_namespace_open(self, namespace: str) -> None:
        ns = self.store.peek("namespaces", "", namespace)
        if ns is None:
            raise objects.not_found("namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise objects.ApiError(403, "Forbidden", f"unable to create new content in namespace {namespace} "
                                   f"because it is being terminated",
                                   {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]})

    def _allocate_service(self, svc: dict, old: dict | None, *, dry_run: bool = False) -> None:
        """ClusterIP and NodePorts, as the API server allocates them (kept across updates)."""
        spec = svc["spec"]
        name = svc["metadata"]["name"]
        causes = objects.Causes()
        if spec["type"] == "ExternalName":
            return
        old_spec = (old or {}).get("spec") or {}
        if old_spec.get("clusterIP"):
            if spec.get("clusterIP") not in (None, "", old_spec["clusterIP"]):
                causes.invalid("spec.clusterIP", spec["clusterIP"], "field is immutable")
            spec["clusterIP"] = old_spec["clusterIP"]
        elif spec.get("clusterIP") == "None":
            pass
        elif spec.get("clusterIP"):
            if not dry_run and not self._service_ips.reserve(spec["clusterIP"]):
                causes.invalid("spec.clusterIP", spec["clusterIP"], "provided IP is already allocated" if
                               self._service_ips.contains(spec["clusterIP"]) else
                               f"provided IP is not in the valid range. The range of valid IPs is "
                               f"{self._service_ips.network}")
        else:
            spec["clusterIP"] = "" if dry_run else self._service_ips.allocate()
        spec["clusterIPs"] = [spec["clusterIP"]] if spec.get("clusterIP") else []
        old_ports = {p.get("nodePort") for p in old_spec.get("ports") or []}
        wants_node_ports = spec["type"] == "NodePort" or (spec["type"] == "LoadBalancer"
                                                         and spec.get("allocateLoadBalancerNodePorts", True))
        for n, port in enumerate(spec.get("ports") or []):
            if not wants_node_ports:
                port.pop("nodePort", None)
                continue
            if port.get("nodePort"):
                if port["nodePort"] not in old_ports and not dry_run and not self._node_ports.reserve(port["nodePort"]):
                    causes.invalid(f"spec.ports[{n}].nodePort", port["nodePort"],
                                   "provided port is already allocated" if self._node_ports.low <= port["nodePort"]
                                   <= self._node_ports.high else "provided port is not in the valid range. The "
                                   f"range of valid ports is {self._node_ports.low}-{self._node_ports.high}")
            elif not dry_run:
                port["nodePort"] = self._node_ports.allocate()
        for gone_port in old_ports - {p.get("nodePort") for p in spec.get("ports") or []}:
            self._node_ports.release(gone_port)
        causes.raise_if_any("Service", name)

    # ------------------------------------------------------------------ update

    def replace(self, resource: str, namespace: str, name: str, body: Any, *, subresource: str | None = None,
                expect_rv: str | None = None) -> dict:
        kind = kind_of(resource)
        old = self.store.peek(resource, namespace if kind.namespaced else "", name)
        if old is None:
            raise objects.not_found(resource, name)
        if not isinstance(body, dict):
            raise objects.bad_request(f"the body of the request must be a {kind.kind} object")
        new_md = body.get("metadata") or {}
        if new_md.get("name") not in (None, name):
            raise objects.bad_request(f"the name of the object ({new_md.get('name')}) does not match the name on "
                                      f"the URL ({name})")
        expect_rv = expect_rv or new_md.get("resourceVersion") or None
        merged = objects.deep(old)
        if subresource == "status":
            merged["status"] = objects.deep(body.get("status") or {})
        else:
            keep = {k: old["metadata"][k] for k in ("uid", "creationTimestamp", "deletionTimestamp",
                                                     "deletionGracePeriodSeconds", "generation", "namespace", "name")
                    if k in old["metadata"]}
            merged["metadata"] = {**objects.deep(new_md), **keep}
            merged["spec"] = objects.deep(body.get("spec") or {})
            for extra in set(body) - {"metadata", "spec", "status", "kind", "apiVersion"}:
                merged[extra] = objects.deep(body[extra])
            causes = objects.Causes()
            validation.check_metadata(causes, merged)
            if resource == "pods":
                validation.default_pod(merged)
                merged["status"] = objects.deep(old.get("status") or {})
                causes.items.extend(validation.check_pod_update(old, merged).items)
            elif resource == "services":
                validation.default_service(merged)
                merged["status"] = objects.deep(old.get("status") or {})
            validator = validation.VALIDATORS.get(resource)
            if validator is not None:
                causes.items.extend(validator(merged).items)
            causes.raise_if_any(kind.kind, name)
            if resource == "services":
                self._allocate_service(merged, old)
            if merged.get("spec") != old.get("spec") and "generation" in merged["metadata"]:
                merged["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        if expect_rv and expect_rv != old["metadata"]["resourceVersion"]:
            raise objects.conflict(resource, name)
        updated = self.store.update(resource, merged)
        return self._maybe_finish(resource, updated)

    def patch(self, resource: str, namespace: str, name: str, content_type: str, body: Any, *,
              subresource: str | None = None) -> dict:
        kind = kind_of(resource)
        old = self.store.peek(resource, namespace if kind.namespaced else "", name)
        if old is None:
            raise objects.not_found(resource, name)
        patched = patch.apply(content_type, objects.deep(old), body)
        expect = (patched.get("metadata") or {}).get("resourceVersion")
        return self.replace(resource, namespace, name, patched, subresource=subresource, expect_rv=expect)

    def mutate(self, resource: str, namespace: str, name: str, fn: Callable[[dict], None]) -> dict | None:
        """For in-process components: apply ``fn`` to a copy and write it (None when the object is gone)."""
        current = self.store.peek(resource, namespace, name)
        if current is None:
            return None
        obj = objects.deep(current)
        fn(obj)
        return self._maybe_finish(resource, self.store.update(resource, obj))

    # ------------------------------------------------------------------ delete

    def delete(self, resource: str, namespace: str, name: str, *, grace_s: int | None = None,
               preconditions: Mapping | None = None) -> dict:
        kind = kind_of(resource)
        ns = namespace if kind.namespaced else ""
        obj = self.store.peek(resource, ns, name)
        if obj is None:
            raise objects.not_found(resource, name)
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != obj["metadata"]["uid"]:
            raise objects.conflict(resource, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in "
                                   f"object meta: {obj['metadata']['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise objects.conflict(resource, name, f"Precondition failed: ResourceVersion in precondition: "
                                   f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                   f"{obj['metadata']['resourceVersion']}")
        if resource == "pods":
            return self._delete_pod(obj, grace_s)
        if resource == "namespaces":
            return self._delete_namespace(obj)
        if obj["metadata"].get("finalizers"):
            return self._mark_deleting(resource, obj, 0)
        last = self._remove(resource, obj)
        return last if kind.returns_deleted_object else success(resource, name, obj["metadata"]["uid"])

    def _mark_deleting(self, resource: str, obj: dict, grace_s: int) -> dict:
        marked = objects.deep(obj)
        marked["metadata"]["deletionTimestamp"] = objects.timestamp(self._clock() + grace_s)
        marked["metadata"]["deletionGracePeriodSeconds"] = grace_s
        return self._maybe_finish(resource, self.store.update(resource, marked))

    def _delete_pod(self, pod: dict, grace_s: int | None) -> dict:
        spec, md = pod.get("spec") or {}, pod["metadata"]
        grace = spec.get("terminationGracePeriodSeconds", validation.DEFAULT_GRACE_S) if grace_s is None else grace_s
        grace = max(0, int(grace))
        if not spec.get("nodeName") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            grace = 0  # nothing runs it: no kubelet needs to stop anything
        if md.get("deletionTimestamp") is not None and grace >= md.get("deletionGracePeriodSeconds", 0):
            return objects.deep(pod)  # already terminating, at least as fast
        if grace == 0 and not md.get("finalizers"):
            return self._remove("pods", pod)
        return self._mark_deleting("pods", pod, grace)

    def finish_pod(self, namespace: str, name: str) -> dict | None:
        """The kubelet is done with a terminating pod: remove it (unless finalizers still hold it)."""
        pod = self.store.peek("pods", namespace, name)
        if pod is None:
            return None
        if pod["metadata"].get("finalizers"):
            return self._mark_deleting("pods", pod, 0)
        return self._remove("pods", pod)

    def _maybe_finish(self, resource: str, obj: dict) -> dict:
        md = obj["metadata"]
        done = md.get("deletionTimestamp") and not md.get("finalizers") and (
            resource != "pods" or md.get("deletionGracePeriodSeconds", 0) == 0) and (
            resource != "namespaces" or not self._namespace_has_content(md["name"]))
        return self._remove(resource, obj) if done else obj

    def _remove(self, resource: str, obj: dict) -> dict:
        md = obj["metadata"]
        last = self.store.delete(resource, md.get("namespace", ""), md["name"])
        if resource == "services":
            self._service_ips.release(obj["spec"].get("clusterIP"))
            for port in obj["spec"].get("ports") or []:
                self._node_ports.release(port.get("nodePort"))
        if resource in ("pods", "services") and md.get("namespace"):
            ns = self.store.peek("namespaces", "", md["namespace"])
            if ns is not None and ns["metadata"].get("deletionTimestamp") and not self._namespace_has_content(
                    md["namespace"]):
                self._remove("namespaces", ns)
        return last

    # ------------------------------------------------------------------ namespaces

    def _delete_namespace(self, ns: dict) -> dict:
        name = ns["metadata"]["name"]
        if ns["metadata"].get("deletionTimestamp") is None:
            marked = objects.deep(ns)
            marked["metadata"]["deletionTimestamp"] = self.now()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            marked["status"] = {"phase": "Terminating"}
            ns = self.store.update("namespaces", marked)
        for resource in ("services", "events"):
            for obj in list(self.store.items(resource, name)):
                self._remove(resource, obj)
        for pod in list(self.store.items("pods", name)):
            self._delete_pod(pod, None)
        current = self.store.peek("namespaces", "", name)
        return self._maybe_finish("namespaces", objects.deep(current)) if current else ns

    def _namespace_has_content(self, name: str) -> bool:
        return any(self.store.items(resource, name) for resource in ("pods", "services"))

    # ------------------------------------------------------------------ pods: binding, eviction

    def bind(self, namespace: str, name: str, node: str) -> dict:
        pod = self.store.peek("pods", namespace, name)
        if pod is None:
            raise objects.not_found("pods", name)
        if pod["spec"].get("nodeName"):
            raise objects.conflict("pods/binding", name, f"pod {name} is already assigned to node "
                                   f"\"{pod['spec']['nodeName']}\"")
        if pod["metadata"].get("deletionTimestamp"):
            raise objects.conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
        bound = objects.deep(pod)
        bound["spec"]["nodeName"] = node
        status = bound.setdefault("status", {})
        status["conditions"] = objects.set_condition(status.get("conditions") or [], "PodScheduled", "True",
                                                     self.now(), probe_time=True)
        return self.store.update("pods", bound)

    def evict(self, namespace: str, name: str, body: Any) -> dict:
        """policy/v1 Eviction: a graceful delete with the DisruptionTarget condition (no PDBs modelled)."""
        pod = self.store.peek("pods", namespace, name)
        if pod is None:
            raise objects.not_found("pods", name)
        options = (body or {}).get("deleteOptions") or {}
        if not pod["metadata"].get("deletionTimestamp"):
            self.add_disruption(namespace, name, "EvictionByEvictionAPI", "Eviction API: evicting")
            self.delete("pods", namespace, name, grace_s=options.get("gracePeriodSeconds"),
                        preconditions=options.get("preconditions"))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def add_disruption(self, namespace: str, name: str, reason: str, message: str) -> None:
        def fn(pod: dict) -> None:
            status = pod.setdefault("status", {})
            status["conditions"] = objects.set_condition(status.get("conditions") or [], "DisruptionTarget", "True",
                                                         self.now(), reason, message, probe_time=True)
        self.mutate("pods", namespace, name, fn)

    # ------------------------------------------------------------------ events

    def record_event(self, involved: Mapping, reason: str, message: str, *, type_: str = "Normal",
                     component: str = "kubelet", host: str = "", field_path: str = "") -> None:
        """A core/v1 Event about ``involved``; repeats of the same one bump ``count`` (the recorder's
        aggregation). Never raises: an event is best effort, as in the real components."""
        md = involved.get("metadata") or {}
        namespace = md.get("namespace") or "default"
        key = (namespace, md.get("uid"), reason, message, field_path)
        now = self.now()
        try:
            existing = self._event_index.get(key)
            if existing and self.store.peek("events", *existing) is not None:
                def bump(ev: dict) -> None:
                    ev["count"] = ev.get("count", 1) + 1
                    ev["lastTimestamp"] = now
                self.mutate("events", existing[0], existing[1], bump)
                return
            if self.store.peek("namespaces", "", namespace) is None:
                return
            ref = {"kind": involved.get("kind", ""), "namespace": md.get("namespace", ""), "name": md.get("name", ""),
                   "uid": md.get("uid", ""), "apiVersion": involved.get("apiVersion", "v1"),
                   "resourceVersion": md.get("resourceVersion", "")}
            if field_path:
                ref["fieldPath"] = field_path
            name = f"{md.get('name', 'object')}.{uuid.uuid4().hex[:16]}"
            event = {"metadata": {"name": name, "namespace": namespace}, "involvedObject": ref, "reason": reason,
                     "message": message, "type": type_, "count": 1, "firstTimestamp": now, "lastTimestamp": now,
                     "source": {"component": component, **({"host": host} if host else {})},
                     "reportingComponent": component, "reportingInstance": host}
            self.create("events", namespace, event)
            self._event_index[key] = (namespace, name)
        except objects.ApiError as exc:
            log.warning("event=event_dropped reason=%s error=%s", reason, exc.message)
