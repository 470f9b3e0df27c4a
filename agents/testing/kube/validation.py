"""Defaulting and validation of the objects the fake serves, as the real API server's strategies do
for core/v1 (the subset whose absence a client would notice). Every error names the field path and
is reported with the others in one 422 Invalid, in the real server's wording."""

from __future__ import annotations

import re
from collections.abc import Mapping

from agents.testing.kube import objects

RESTART_POLICIES = ("Always", "OnFailure", "Never")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
PROTOCOLS = ("TCP", "UDP", "SCTP")
SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
DEFAULT_GRACE_S = 30
# Added by the DefaultTolerationSeconds admission plugin to every pod.
DEFAULT_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
)
_IANA_SVC = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def is_extended_resource(name: str) -> bool:
    return "/" in name and not name.startswith(("kubernetes.io/", "requests."))


def check_name(causes: objects.Causes, resource: str, name: str) -> None:
    """The name rule of each resource: DNS-1123 subdomain, label (namespaces), or DNS-1035 (services)."""
    if resource == "namespaces":
        objects.check_dns_label(causes, "metadata.name", name)
    elif resource == "services":
        if len(name) > 63 or not _DNS1035.match(name):
            causes.invalid("metadata.name", name, "a DNS-1035 label must consist of lower case alphanumeric "
                           "characters or '-', start with an alphabetic character, and end with an alphanumeric "
                           "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                           "'[a-z]([-a-z0-9]*[a-z0-9])?')")
    elif resource != "events":
        objects.check_dns_subdomain(causes, "metadata.name", name)


def check_metadata(causes: objects.Causes, obj: Mapping) -> None:
    md = obj.get("metadata") or {}
    objects.check_labels(causes, "metadata.labels", md.get("labels"))
    annotations = md.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            causes.invalid("metadata.annotations", "", "must be a map of string keys to string values")
        else:
            for key in annotations:
                objects.check_label_key(causes, "metadata.annotations", key)
            if sum(len(k) + len(v) for k, v in annotations.items()) > 256 * 1024:
                causes.invalid("metadata.annotations", "", "Too long: must have at most 262144 bytes")


# ---------------------------------------------------------------------- pods


def _image_pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    tag = tail.split(":", 1)[1] if ":" in tail else "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _default_probe(probe: dict | None) -> None:
    if not isinstance(probe, dict):
        return
    probe.setdefault("timeoutSeconds", 1)
    probe.setdefault("periodSeconds", 10)
    probe.setdefault("successThreshold", 1)
    probe.setdefault("failureThreshold", 3)
    if isinstance(probe.get("httpGet"), dict):
        probe["httpGet"].setdefault("scheme", "HTTP")
        probe["httpGet"].setdefault("path", "/")


def _qos_class(containers: list[dict]) -> str:
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or objects.parse_quantity(limits[name]) != objects.parse_quantity(
                    requests.get(name, limits[name])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def default_pod(pod: dict) -> None:
    spec = pod.setdefault("spec", {})
    for key, value in (("restartPolicy", "Always"), ("terminationGracePeriodSeconds", DEFAULT_GRACE_S),
                       ("dnsPolicy", "ClusterFirst"), ("schedulerName", "default-scheduler"),
                       ("securityContext", {}), ("enableServiceLinks", True), ("priority", 0),
                       ("preemptionPolicy", "PreemptLowerPriority")):
        spec.setdefault(key, value)
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    tolerations = list(spec.get("tolerations") or [])
    for default in DEFAULT_TOLERATIONS:
        if not any(t.get("key") == default["key"] and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
            tolerations.append(dict(default))
    spec["tolerations"] = tolerations
    all_containers = [c for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
                      if isinstance(c, dict)]
    for c in all_containers:
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        if isinstance(c.get("image"), str):
            c.setdefault("imagePullPolicy", _image_pull_policy(c["image"]))
        res = c.setdefault("resources", {})
        if isinstance(res, dict) and res.get("limits"):
            requests = res.setdefault("requests", {})
            for name, value in res["limits"].items():
                requests.setdefault(name, value)
        for port in c.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
        for key in ("readinessProbe", "livenessProbe", "startupProbe"):
            _default_probe(c.get(key))
    status = pod.setdefault("status", {})
    status.setdefault("phase", "Pending")
    try:
        status["qosClass"] = _qos_class([c for c in spec.get("containers") or [] if isinstance(c, dict)])
    except ValueError:
        pass  # reported by validate_pod


def _check_handler(causes: objects.Causes, field: str, handler: object, *, probe: bool) -> None:
    if not isinstance(handler, dict):
        causes.invalid(field, "", "must be an object")
        return
    kinds = [k for k in ("httpGet", "tcpSocket", "exec", "grpc", "sleep") if handler.get(k) is not None]
    if len(kinds) != 1:
        if kinds:
            causes.forbidden(field, "may not specify more than 1 handler type")
        else:
            causes.required(f"{field}: must specify a handler type")
        return
    kind = kinds[0]
    body = handler[kind]
    if kind in ("httpGet", "tcpSocket"):
        port = body.get("port") if isinstance(body, dict) else None
        if port is None:
            causes.required(f"{field}.{kind}.port")
        elif isinstance(port, int):
            if not 1 <= port <= 65535:
                causes.invalid(f"{field}.{kind}.port", port, "must be between 1 and 65535, inclusive")
        elif not (isinstance(port, str) and len(port) <= 15 and _IANA_SVC.match(port)):
            causes.invalid(f"{field}.{kind}.port", port, "must contain only alpha-numeric characters (a-z, 0-9), "
                           "and hyphens (-), at most 15 characters")
    if kind == "exec" and not (isinstance(body, dict) and body.get("command")):
        causes.required(f"{field}.exec.command")
    if probe:
        for key in ("periodSeconds", "timeoutSeconds", "successThreshold", "failureThreshold"):
            value = handler.get(key)
            if value is not None and (not isinstance(value, int) or value < 1):
                causes.invalid(f"{field}.{key}", value, "must be greater than or equal to 1")
        if (handler.get("initialDelaySeconds") or 0) < 0:
            causes.invalid(f"{field}.initialDelaySeconds", handler.get("initialDelaySeconds"),
                           "must be greater than or equal to 0")


_VOLUME_SOURCES = ("hostPath", "emptyDir", "persistentVolumeClaim", "configMap", "secret", "projected",
                   "downwardAPI", "ephemeral", "csi", "nfs", "image")


def _check_volumes(causes: objects.Causes, spec: Mapping) -> set[str]:
    names: set[str] = set()
    for n, vol in enumerate(spec.get("volumes") or []):
        path = f"spec.volumes[{n}]"
        name = vol.get("name") if isinstance(vol, dict) else None
        if not name:
            causes.required(f"{path}.name")
            continue
        objects.check_dns_label(causes, f"{path}.name", name)
        if name in names:
            causes.duplicate(f"{path}.name", name)
        names.add(name)
        sources = [k for k in _VOLUME_SOURCES if vol.get(k) is not None]
        if not sources:
            causes.required(f"{path}: must specify a volume type")
        elif len(sources) > 1:
            causes.forbidden(path, "may not specify more than 1 volume type")
        if vol.get("hostPath") is not None and not str((vol["hostPath"] or {}).get("path", "")).startswith("/"):
            causes.invalid(f"{path}.hostPath.path", (vol["hostPath"] or {}).get("path", ""), "must be an absolute path")
        if vol.get("persistentVolumeClaim") is not None and not (vol["persistentVolumeClaim"] or {}).get("claimName"):
            causes.required(f"{path}.persistentVolumeClaim.claimName")
    return names


def _check_mounts(causes: objects.Causes, path: str, c: Mapping, volumes: set[str]) -> None:
    seen: set[str] = set()
    for n, mount in enumerate(c.get("volumeMounts") or []):
        mpath = f"{path}.volumeMounts[{n}]"
        if mount.get("name") not in volumes:
            causes.items.append((f"{mpath}.name", "FieldValueNotFound", f'Not found: "{mount.get("name")}"'))
        mount_path = mount.get("mountPath")
        if not mount_path:
            causes.required(f"{mpath}.mountPath")
        elif mount_path in seen:
            causes.invalid(f"{mpath}.mountPath", mount_path, "must be unique")
        else:
            seen.add(mount_path)


def _check_container(causes: objects.Causes, path: str, c: object, names: set[str]) -> None:
    if not isinstance(c, dict):
        causes.invalid(path, "", "must be an object")
        return
    name = c.get("name")
    if not name:
        causes.required(f"{path}.name")
    else:
        objects.check_dns_label(causes, f"{path}.name", name)
        if name in names:
            causes.duplicate(f"{path}.name", name)
        names.add(name)
    if not c.get("image"):
        causes.required(f"{path}.image")
    port_names: set[str] = set()
    for n, port in enumerate(c.get("ports") or []):
        number = port.get("containerPort") if isinstance(port, dict) else None
        if not isinstance(number, int) or not 1 <= number <= 65535:
            causes.invalid(f"{path}.ports[{n}].containerPort", number, "must be between 1 and 65535, inclusive")
        pname = port.get("name") if isinstance(port, dict) else None
        if pname:
            if len(pname) > 15 or not _IANA_SVC.match(pname):
                causes.invalid(f"{path}.ports[{n}].name", pname, "must be no more than 15 characters")
            elif pname in port_names:
                causes.duplicate(f"{path}.ports[{n}].name", pname)
            port_names.add(pname)
        if isinstance(port, dict) and port.get("protocol") not in PROTOCOLS:
            causes.unsupported(f"{path}.ports[{n}].protocol", port.get("protocol"), PROTOCOLS)
    for n, env in enumerate(c.get("env") or []):
        if not isinstance(env, dict) or not env.get("name"):
            causes.required(f"{path}.env[{n}].name")
    res = c.get("resources") or {}
    for section in ("limits", "requests"):
        for rname, value in (res.get(section) or {}).items():
            try:
                objects.parse_quantity(value)
            except ValueError as exc:
                causes.invalid(f"{path}.resources.{section}[{rname}]", value, str(exc))
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    for rname, value in requests.items():
        try:
            if is_extended_resource(rname) and objects.parse_quantity(value) != objects.parse_quantity(
                    limits.get(rname, -1)):
                causes.invalid(f"{path}.resources.requests[{rname}]", value, f"must be equal to {rname} limit of "
                               f"{limits.get(rname, 0)}")
            elif rname in limits and objects.parse_quantity(value) > objects.parse_quantity(limits[rname]):
                causes.invalid(f"{path}.resources.requests", value, f"must be less than or equal to {rname} limit "
                               f"of {limits[rname]}")
        except ValueError:
            pass
    for key in ("readinessProbe", "livenessProbe", "startupProbe"):
        if c.get(key) is not None:
            _check_handler(causes, f"{path}.{key}", c[key], probe=True)
            if key != "readinessProbe" and (c[key].get("successThreshold") or 1) != 1:
                causes.invalid(f"{path}.{key}.successThreshold", c[key].get("successThreshold"), "must be 1")
    for hook in ("preStop", "postStart"):
        handler = (c.get("lifecycle") or {}).get(hook)
        if handler is not None:
            _check_handler(causes, f"{path}.lifecycle.{hook}", handler, probe=False)


def _check_toleration(causes: objects.Causes, path: str, tol: Mapping) -> None:
    op = tol.get("operator") or "Equal"
    if op not in ("Equal", "Exists"):
        causes.unsupported(f"{path}.operator", op, ("Equal", "Exists"))
    if op == "Exists" and tol.get("value"):
        causes.invalid(f"{path}.operator", tol.get("value"), "value must be empty when `operator` is 'Exists'")
    if op == "Equal" and not tol.get("key"):
        causes.invalid(f"{path}.operator", op, "operator must be Exists when `key` is empty, which means \"match "
                       "all values and all keys\"")
    if tol.get("effect") and tol["effect"] not in TAINT_EFFECTS:
        causes.unsupported(f"{path}.effect", tol["effect"], TAINT_EFFECTS)
    if tol.get("tolerationSeconds") is not None and tol.get("effect") != "NoExecute":
        causes.invalid(f"{path}.effect", tol.get("effect") or "", "effect must be 'NoExecute' when "
                       "`tolerationSeconds` is set")


def _check_affinity(causes: objects.Causes, spec: Mapping) -> None:
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    terms = required.get("nodeSelectorTerms")
    if not terms:
        causes.required(base)
        return
    for t, term in enumerate(terms):
        for section in ("matchExpressions", "matchFields"):
            for r, req in enumerate(term.get(section) or []):
                path = f"{base}[{t}].{section}[{r}]"
                op = req.get("operator")
                if op not in SELECTOR_OPS:
                    causes.unsupported(f"{path}.operator", op, SELECTOR_OPS)
                elif op in ("In", "NotIn") and not req.get("values"):
                    causes.required(f"{path}.values: must be specified when `operator` is 'In' or 'NotIn'")
                elif op in ("Exists", "DoesNotExist") and req.get("values"):
                    causes.forbidden(f"{path}.values", "may not be specified when `operator` is 'Exists' or "
                                     "'DoesNotExist'")
                if section == "matchFields" and req.get("key") != "metadata.name":
                    causes.invalid(f"{path}.key", req.get("key"), "not a valid field selector key")


def validate_pod(pod: Mapping) -> objects.Causes:
    causes = objects.Causes()
    spec = pod.get("spec") or {}
    containers = spec.get("containers")
    names: set[str] = set()
    volumes = _check_volumes(causes, spec)
    if not containers:
        causes.required("spec.containers")
    else:
        for n, c in enumerate(containers):
            _check_container(causes, f"spec.containers[{n}]", c, names)
            if isinstance(c, dict):
                _check_mounts(causes, f"spec.containers[{n}]", c, volumes)
    for n, c in enumerate(spec.get("initContainers") or []):
        _check_container(causes, f"spec.initContainers[{n}]", c, names)
        if isinstance(c, dict):
            _check_mounts(causes, f"spec.initContainers[{n}]", c, volumes)
    if spec.get("restartPolicy") not in RESTART_POLICIES:
        causes.unsupported("spec.restartPolicy", spec.get("restartPolicy"), RESTART_POLICIES)
    grace = spec.get("terminationGracePeriodSeconds")
    if not isinstance(grace, int) or grace < 0:
        causes.invalid("spec.terminationGracePeriodSeconds", grace, "must be greater than or equal to 0")
    for n, tol in enumerate(spec.get("tolerations") or []):
        _check_toleration(causes, f"spec.tolerations[{n}]", tol)
    objects.check_labels(causes, "spec.nodeSelector", spec.get("nodeSelector"))
    _check_affinity(causes, spec)
    return causes


# Fields a pod update may change (the rest of the spec is immutable once created).
_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds",
                     "schedulingGates", "nodeName")


def check_pod_update(old: Mapping, new: Mapping) -> objects.Causes:
    causes = objects.Causes()
    a = {k: v for k, v in (old.get("spec") or {}).items() if k not in _MUTABLE_POD_SPEC}
    b = {k: v for k, v in (new.get("spec") or {}).items() if k not in _MUTABLE_POD_SPEC}
    for key in ("containers", "initContainers"):
        a[key] = [{k: v for k, v in c.items() if k != "image"} for c in a.get(key) or []]
        b[key] = [{k: v for k, v in c.items() if k != "image"} for c in b.get(key) or []]
    if a != b:
        causes.forbidden("spec", "pod updates may not change fields other than `spec.containers[*].image`,"
                         "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
                         "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
                         "set to 1 if it was previously negative)")
    old_tol = (old.get("spec") or {}).get("tolerations") or []
    new_tol = (new.get("spec") or {}).get("tolerations") or []
    if any(t not in new_tol for t in old_tol):
        causes.forbidden("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds")
    if (old.get("spec") or {}).get("nodeName") and (new.get("spec") or {}).get("nodeName") != old["spec"]["nodeName"]:
        causes.forbidden("spec.nodeName", "field is immutable once set")
    return causes


# ---------------------------------------------------------------------- services


def default_service(svc: dict) -> None:
    spec = svc.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "port" in port:
                port.setdefault("targetPort", port["port"])
    svc.setdefault("status", {}).setdefault("loadBalancer", {})


def validate_service(svc: Mapping) -> objects.Causes:
    causes = objects.Causes()
    spec = svc.get("spec") or {}
    stype = spec.get("type")
    if stype not in SERVICE_TYPES:
        causes.unsupported("spec.type", stype, SERVICE_TYPES)
    if stype == "ExternalName" and not spec.get("externalName"):
        causes.required("spec.externalName")
    ports = spec.get("ports") or []
    if not ports and stype != "ExternalName" and spec.get("clusterIP") != "None":
        causes.required("spec.ports")
    names: set[str] = set()
    for n, port in enumerate(ports):
        path = f"spec.ports[{n}]"
        if not isinstance(port, dict):
            causes.invalid(path, "", "must be an object")
            continue
        number = port.get("port")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            causes.invalid(f"{path}.port", number, "must be between 1 and 65535, inclusive")
        name = port.get("name")
        if len(ports) > 1 and not name:
            causes.required(f"{path}.name")
        if name:
            objects.check_dns_label(causes, f"{path}.name", name)
            if name in names:
                causes.duplicate(f"{path}.name", name)
            names.add(name)
        if port.get("protocol") not in PROTOCOLS:
            causes.unsupported(f"{path}.protocol", port.get("protocol"), PROTOCOLS)
        target = port.get("targetPort")
        if isinstance(target, int) and not 1 <= target <= 65535:
            causes.invalid(f"{path}.targetPort", target, "must be between 1 and 65535, inclusive")
        elif isinstance(target, str) and not target.isdigit() and (len(target) > 15 or not _IANA_SVC.match(target)):
            causes.invalid(f"{path}.targetPort", target, "must contain only alpha-numeric characters (a-z, 0-9), "
                           "and hyphens (-)")
        if port.get("nodePort") and stype not in ("NodePort", "LoadBalancer"):
            causes.forbidden(f"{path}.nodePort", "may not be used when `type` is 'ClusterIP'")
    objects.check_labels(causes, "spec.selector", spec.get("selector"))
    return causes


# ---------------------------------------------------------------------- nodes, namespaces, events


def validate_node(node: Mapping) -> objects.Causes:
    causes = objects.Causes()
    seen: set[tuple[str, str]] = set()
    for n, taint in enumerate((node.get("spec") or {}).get("taints") or []):
        path = f"spec.taints[{n}]"
        if not taint.get("key"):
            causes.required(f"{path}.key")
        else:
            objects.check_label_key(causes, f"{path}.key", taint["key"])
        if taint.get("value"):
            objects.check_label_value(causes, f"{path}.value", taint["value"])
        if taint.get("effect") not in TAINT_EFFECTS:
            causes.unsupported(f"{path}.effect", taint.get("effect"), TAINT_EFFECTS)
        key = (taint.get("key", ""), taint.get("effect", ""))
        if key in seen:
            causes.duplicate(f"{path}", f"{key[0]}:{key[1]}")
        seen.add(key)
    return causes


def validate_event(event: Mapping) -> objects.Causes:
    causes = objects.Causes()
    involved = event.get("involvedObject")
    if not isinstance(involved, dict) or not involved.get("name"):
        causes.required("involvedObject")
    elif involved.get("namespace") and involved["namespace"] != event["metadata"].get("namespace"):
        causes.invalid("involvedObject.namespace", involved["namespace"], "does not match event.namespace")
    return causes


VALIDATORS = {"pods": validate_pod, "services": validate_service, "nodes": validate_node,
              "events": validate_event}
