"""Selectors as the API server and the scheduler evaluate them: label selectors in their string form
(``a=b,c!=d,e in (x,y),f notin (z),g,!h``), field selectors (``spec.nodeName=n,status.phase!=Failed``,
per resource the fields the real server supports), node selector terms (``matchExpressions`` /
``matchFields``) and taint tolerations. Pure functions; a malformed selector raises a 400 ApiError."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from agents.testing.kube import objects

Match = Callable[[Mapping], bool]

# What each resource's field selector supports (the real server's field label conversion funcs).
FIELDS: dict[str, tuple[str, ...]] = {
    "pods": ("metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
             "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
             "status.nominatedNodeName"),
    "nodes": ("metadata.name", "spec.unschedulable"),
    "services": ("metadata.name", "metadata.namespace"),
    "namespaces": ("metadata.name", "status.phase"),
    "events": ("metadata.name", "metadata.namespace", "involvedObject.kind", "involvedObject.namespace",
               "involvedObject.name", "involvedObject.uid", "involvedObject.apiVersion",
               "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason", "reportingComponent",
               "source", "type"),
}

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_TOKEN = re.compile(r"\s*(!=|==|=|\(|\)|,|!|" + _KEY + r")")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise objects.bad_request(f"unable to parse requirement: unexpected character {text[pos]!r} at "
                                      f"position {pos} in label selector {text!r}")
        out.append(m.group(1))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def parse_label_selector(text: str | None) -> Match:
    """A label selector string as a predicate on objects (empty or None: everything)."""
    if not text or not text.strip():
        return lambda obj: True
    toks = _tokens(text)
    reqs: list[Callable[[Mapping], bool]] = []
    i = 0

    def fail(why: str) -> objects.ApiError:
        return objects.bad_request(f"unable to parse requirement: {why} in label selector {text!r}")

    while i < len(toks):
        if toks[i] == "!":
            if i + 1 >= len(toks) or toks[i + 1] in "=!=(),":
                raise fail("'!' must be followed by a key")
            key = toks[i + 1]
            reqs.append(lambda labels, k=key: k not in labels)
            i += 2
        else:
            key = toks[i]
            if key in ("=", "==", "!=", "(", ")", ","):
                raise fail(f"found {key!r}, expected a key")
            nxt = toks[i + 1] if i + 1 < len(toks) else ","
            if nxt == ",":
                reqs.append(lambda labels, k=key: k in labels)
                i += 1
            elif nxt in ("=", "==", "!="):
                if i + 2 >= len(toks) or toks[i + 2] in ("(", ")", ",", "=", "==", "!="):
                    value = ""
                    i += 2
                else:
                    value = toks[i + 2]
                    i += 3
                if nxt == "!=":
                    reqs.append(lambda labels, k=key, v=value: labels.get(k) != v)
                else:
                    reqs.append(lambda labels, k=key, v=value: labels.get(k) == v)
            elif nxt in ("in", "notin"):
                if i + 2 >= len(toks) or toks[i + 2] != "(":
                    raise fail(f"'{nxt}' must be followed by '('")
                values: list[str] = []
                j = i + 3
                while j < len(toks) and toks[j] != ")":
                    if toks[j] != ",":
                        values.append(toks[j])
                    j += 1
                if j >= len(toks):
                    raise fail("missing ')'")
                if nxt == "in":
                    reqs.append(lambda labels, k=key, vs=tuple(values): labels.get(k) in vs)
                else:
                    reqs.append(lambda labels, k=key, vs=tuple(values): labels.get(k) not in vs)
                i = j + 1
            else:
                raise fail(f"found {nxt!r}, expected: '=', '!=', '==', 'in', 'notin' or ','")
        if i < len(toks):
            if toks[i] != ",":
                raise fail(f"found {toks[i]!r}, expected ','")
            i += 1
            if i >= len(toks):
                raise fail("a trailing ','")

    def match(obj: Mapping) -> bool:
        labels = objects.labels_of(obj)
        return all(req(labels) for req in reqs)

    return match


def _field_value(obj: Mapping, path: str) -> str:
    value = objects.get_path(obj, path)
    if value is None:
        # metadata.namespace of a cluster-scoped object, spec.nodeName of an unbound pod: "".
        if path == "spec.unschedulable" or path == "spec.hostNetwork":
            return "false"
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping) and path == "source":
        return str(value.get("component", ""))
    return str(value)


def parse_field_selector(resource: str, text: str | None) -> Match:
    """A field selector (``f=v``, ``f==v``, ``f!=v`` joined by commas) for ``resource``."""
    if not text or not text.strip():
        return lambda obj: True
    supported = FIELDS.get(resource, ("metadata.name", "metadata.namespace"))
    reqs: list[tuple[str, str, bool]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise objects.bad_request(f"invalid field selector {text!r}: empty requirement")
        for op in ("!=", "==", "="):
            if op in part:
                field, value = part.split(op, 1)
                break
        else:
            raise objects.bad_request(f"invalid selector: '{part}'; can't understand '{part}'")
        field = field.strip()
        if field not in supported:
            raise objects.bad_request(f"field label not supported: {field}")
        reqs.append((field, value.strip(), op != "!="))
    return lambda obj: all((_field_value(obj, f) == v) == eq for f, v, eq in reqs)


def requirement_matches(req: Mapping, value: str | None, present: bool) -> bool:
    """One NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) against a label value."""
    op = req.get("operator")
    values = req.get("values") or []
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            mine, theirs = int(value or ""), int(values[0])
        except ValueError:
            return False
        return mine > theirs if op == "Gt" else mine < theirs
    return False


def node_selector_term_matches(term: Mapping, node: Mapping) -> bool:
    labels = objects.labels_of(node)
    name = node["metadata"]["name"]
    for req in term.get("matchExpressions") or []:
        key = req.get("key", "")
        if not requirement_matches(req, labels.get(key), key in labels):
            return False
    for req in term.get("matchFields") or []:
        if req.get("key") != "metadata.name" or not requirement_matches(req, name, True):
            return False
    # A term with no requirements matches nothing (the scheduler's NodeSelectorTerm rule).
    return bool(term.get("matchExpressions") or term.get("matchFields"))


def pod_matches_node_affinity(pod: Mapping, node: Mapping) -> bool:
    """``spec.nodeSelector`` AND required node affinity (terms ORed)."""
    spec = pod.get("spec") or {}
    labels = objects.labels_of(node)
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if required:
        terms = required.get("nodeSelectorTerms") or []
        return any(node_selector_term_matches(t, node) for t in terms)
    return True


def tolerates(toleration: Mapping, taint: Mapping) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated(taints: Sequence[Mapping], tolerations: Sequence[Mapping], effects: Sequence[str]) -> list[Mapping]:
    """Taints with one of ``effects`` that no toleration tolerates."""
    return [t for t in taints if t.get("effect") in effects and not any(tolerates(tol, t) for tol in tolerations)]
