"""The three PATCH formats the API server accepts for built-in types: JSON merge patch (RFC 7386,
``application/merge-patch+json``), strategic merge patch (``application/strategic-merge-patch+json``,
what kubernetes_asyncio sends for a dict body) and JSON patch (RFC 6902, ``application/json-patch+json``,
what it sends for a list body). Server-side apply is not modelled (415).

Strategic merge uses the merge keys of the core/v1 fields the fake's objects carry (containers by
``name``, conditions by ``type``, ports by ``containerPort`` ...); lists without one are replaced,
as their ``patchStrategy`` is. ``$patch: delete|replace`` directives are honoured."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from agents.testing.kube import objects

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"

# Field name -> merge key, for lists whose patchStrategy is "merge" in core/v1.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
    "ports": "containerPort", "volumes": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath",
    "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name", "hostAliases": "ip",
    "addresses": "type", "containerStatuses": "name", "initContainerStatuses": "name", "podIPs": "ip",
    "taints": None, "tolerations": None,
}
SERVICE_PORT_KEY = "port"  # ServiceSpec.ports merges by port
SCALAR_MERGE_LISTS = {"finalizers"}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _merge_key(field: str, path: tuple[str, ...]) -> str | None:
    if field == "ports" and path[-2:-1] == ("spec",) and "containers" not in path:
        return SERVICE_PORT_KEY
    return MERGE_KEYS.get(field)


def strategic_merge(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            out[field] = [v for v in out.get(field) or [] if v not in (value or [])]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and key in SCALAR_MERGE_LISTS:
            merged = list(out.get(key) or [])
            merged.extend(v for v in value if v not in merged)
            out[key] = merged
        elif isinstance(value, list) and _merge_key(key, path + (key,)) and isinstance(out.get(key), list):
            out[key] = _merge_list(out[key], value, _merge_key(key, path + (key,)) or "", path + (key,))
        elif isinstance(value, Mapping):
            out[key] = strategic_merge(out.get(key), value, path + (key,))
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_list(current: list, patch: list, key: str, path: tuple[str, ...]) -> list:
    out = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, Mapping):
            out.append(copy.deepcopy(item))
            continue
        if item.get("$patch") == "replace":
            return [copy.deepcopy({k: v for k, v in i.items() if k != "$patch"}) for i in patch
                    if isinstance(i, Mapping)]
        index = next((n for n, cur in enumerate(out) if isinstance(cur, Mapping) and cur.get(key) == item.get(key)),
                     None)
        if item.get("$patch") == "delete":
            if index is not None:
                out.pop(index)
        elif index is None:
            out.append({k: copy.deepcopy(v) for k, v in item.items() if k != "$patch"})
        else:
            out[index] = strategic_merge(out[index], item, path)
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise objects.bad_request(f"json patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], op: str) -> tuple[Any, str]:
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, list):
            try:
                cur = cur[int(part)]
            except (ValueError, IndexError):
                raise objects.ApiError(422, "Invalid", f"{op} operation does not apply: doc is missing path: "
                                       f"/{'/'.join(parts)}") from None
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise objects.ApiError(422, "Invalid",
                                   f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")
    return cur, parts[-1]


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 add/remove/replace/move/copy/test."""
    if not isinstance(ops, list):
        raise objects.bad_request("json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, Mapping) or "op" not in op or "path" not in op:
            raise objects.bad_request(f"invalid json patch operation {op!r}: 'op' and 'path' are required")
        kind = op["op"]
        if kind in ("move", "copy"):
            src_parent, src_key = _walk(doc, _pointer(op["from"]), kind)
            value = src_parent[int(src_key)] if isinstance(src_parent, list) else src_parent.get(src_key)
            if kind == "move":
                _remove(src_parent, src_key)
            doc = _add(doc, op["path"], copy.deepcopy(value))
        elif kind == "add":
            doc = _add(doc, op["path"], copy.deepcopy(op.get("value")))
        elif kind in ("remove", "replace", "test"):
            parts = _pointer(op["path"])
            if not parts:
                if kind == "replace":
                    doc = copy.deepcopy(op.get("value"))
                continue
            parent, key = _walk(doc, parts, kind)
            exists = (key.isdigit() and int(key) < len(parent)) if isinstance(parent, list) else key in parent
            if not exists:
                raise objects.ApiError(422, "Invalid", f"{kind} operation does not apply: doc is missing path: "
                                       f"{op['path']}")
            if kind == "remove":
                _remove(parent, key)
            elif kind == "replace":
                parent[int(key) if isinstance(parent, list) else key] = copy.deepcopy(op.get("value"))
            elif (parent[int(key)] if isinstance(parent, list) else parent[key]) != op.get("value"):
                raise objects.ApiError(422, "Invalid", f"testing value {op['path']} failed")
        else:
            raise objects.bad_request(f"unknown json patch operation {kind!r}")
    return doc


def _remove(parent: Any, key: str) -> None:
    if isinstance(parent, list):
        parent.pop(int(key))
    else:
        parent.pop(key, None)


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, key = _walk(doc, parts, "add")
    if isinstance(parent, list):
        if key == "-":
            parent.append(value)
        else:
            parent.insert(int(key), value)
    elif isinstance(parent, dict):
        parent[key] = value
    else:
        raise objects.ApiError(422, "Invalid", f"add operation does not apply: doc is missing path: {path}")
    return doc


def apply(content_type: str, target: dict, body: Any) -> dict:
    """Apply a PATCH body of ``content_type`` to ``target``; 415 for an unsupported type."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind == JSON_PATCH:
        result = json_patch(target, body)
    elif kind == MERGE_PATCH:
        result = merge_patch(target, body)
    elif kind == STRATEGIC:
        result = strategic_merge(target, body)
    else:
        raise objects.ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - "
                               f"accepted media types include: {JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC}")
    if not isinstance(result, dict):
        raise objects.bad_request("the patched object is not a JSON object")
    return result
