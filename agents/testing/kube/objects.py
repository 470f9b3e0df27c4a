"""Helpers every part of the fake shares: API errors as ``Status`` objects, timestamps, quantities,
name and label validation, and small accessors on object dicts.

Objects are plain JSON-shaped dicts exactly as the API serves them (camelCase keys), so what a test
asserts on is what the real client deserializes."""

from __future__ import annotations

import copy
import datetime
import fractions
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ApiError(Exception):
    """An error the API server answers with a ``Status`` body (``code`` is the HTTP status)."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    def status(self) -> dict:
        out = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            out["details"] = self.details
        return out


def not_found(resource: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource})


def already_exists(resource: str, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists', {"name": name, "kind": resource})


def conflict(resource: str, name: str, why: str = "the object has been modified; please apply your changes "
                                                   "to the latest version and try again") -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": {why}',
                    {"name": name, "kind": resource})


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


class Causes:
    """Collects field errors, reported all at once as one 422 Invalid (as ``field.ErrorList``)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str, str]] = []  # (field, cause reason, message)

    def required(self, field: str) -> None:
        self.items.append((field, "FieldValueRequired", "Required value"))

    def invalid(self, field: str, value: Any, detail: str) -> None:
        shown = value if isinstance(value, (int, float)) else f'"{value}"'
        self.items.append((field, "FieldValueInvalid", f"Invalid value: {shown}: {detail}"))

    def unsupported(self, field: str, value: Any, valid: Iterable[str]) -> None:
        choices = ", ".join(f'"{v}"' for v in valid)
        self.items.append((field, "FieldValueNotSupported", f'Unsupported value: "{value}": supported values: {choices}'))

    def duplicate(self, field: str, value: Any) -> None:
        self.items.append((field, "FieldValueDuplicate", f'Duplicate value: "{value}"'))

    def forbidden(self, field: str, detail: str) -> None:
        self.items.append((field, "FieldValueForbidden", f"Forbidden: {detail}"))

    def raise_if_any(self, kind: str, name: str) -> None:
        if not self.items:
            return
        parts = [f"{field}: {message}" for field, _, message in self.items]
        body = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
        raise ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {body}', {
            "name": name, "kind": kind,
            "causes": [{"reason": r, "message": m, "field": f} for f, r, m in self.items]})


def check_dns_label(causes: Causes, field: str, value: str) -> None:
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        causes.invalid(field, value, "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                       "characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name', "
                       "or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")


def check_dns_subdomain(causes: Causes, field: str, value: str) -> None:
    if len(value) > 253 or not DNS1123_SUBDOMAIN.match(value):
        causes.invalid(field, value, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                       "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
                       "'example.com', regex used for validation is "
                       "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def check_label_key(causes: Causes, field: str, key: str) -> None:
    prefix, sep, name = key.rpartition("/")
    if sep and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        causes.invalid(field, key, "prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                       "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")
    if not name or len(name) > 63 or not LABEL_NAME.match(name):
        causes.invalid(field, key, "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                       "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
                       "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') and be at most "
                       "63 characters")


def check_label_value(causes: Causes, field: str, value: Any) -> None:
    if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
        causes.invalid(field, value, "a valid label must be an empty string or consist of alphanumeric characters, "
                       "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                       "'my_value',  or '12345', regex used for validation is "
                       "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?') and be at most 63 characters")


def check_labels(causes: Causes, field: str, labels: Any) -> None:
    if labels is None:
        return
    if not isinstance(labels, dict):
        causes.invalid(field, labels, "must be a map of string keys to string values")
        return
    for key, value in labels.items():
        check_label_key(causes, field, key)
        check_label_value(causes, field, value)


def timestamp(unix_s: float) -> str:
    """RFC 3339 at second precision in UTC, as metav1.Time serializes."""
    return datetime.datetime.fromtimestamp(int(unix_s), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_timestamp(unix_s: float) -> str:
    """metav1.MicroTime (events.k8s.io eventTime)."""
    return datetime.datetime.fromtimestamp(unix_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
             "n": fractions.Fraction(1, 10**9), "u": fractions.Fraction(1, 10**6), "m": fractions.Fraction(1, 1000),
             "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$")


def parse_quantity(value: Any) -> fractions.Fraction:
    """A resource.Quantity ("500m", "64Gi", "2", 1) as an exact number; ValueError when malformed."""
    if isinstance(value, (int, float)):
        return fractions.Fraction(value)
    match = _QUANTITY.match(str(value).strip())
    if not match:
        raise ValueError(f"quantities must match the regular expression "
                         f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {value!r}")
    number, exponent, suffix = match.groups()
    base = fractions.Fraction(number)
    if exponent:
        return base * fractions.Fraction(10) ** int(exponent[1:])
    return base * _SUFFIXES[suffix or ""]


def deep(obj: Any) -> Any:
    return copy.deepcopy(obj)


def meta(obj: Mapping) -> dict:
    return obj.setdefault("metadata", {}) if isinstance(obj, dict) else obj.get("metadata", {})


def labels_of(obj: Mapping) -> dict:
    return (obj.get("metadata") or {}).get("labels") or {}


def get_path(obj: Mapping, dotted: str) -> Any:
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def condition(obj: Mapping, type_: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def set_condition(conditions: list[dict], type_: str, status: str, now: str, reason: str = "", message: str = "",
                  *, probe_time: bool = False) -> list[dict]:
    """Set (or add) one condition, keeping ``lastTransitionTime`` when the status does not change."""
    out = []
    found = False
    for cond in conditions:
        if cond.get("type") == type_:
            found = True
            new = dict(cond)
            if cond.get("status") != status:
                new["lastTransitionTime"] = now
            new["status"] = status
            for key, value in (("reason", reason), ("message", message)):
                if value:
                    new[key] = value
                else:
                    new.pop(key, None)
            if probe_time:
                new["lastProbeTime"] = None
            out.append(new)
        else:
            out.append(cond)
    if not found:
        new = {"type": type_, "status": status, "lastTransitionTime": now}
        if probe_time:
            new["lastProbeTime"] = None
        if reason:
            new["reason"] = reason
        if message:
            new["message"] = message
        out.append(new)
    return out


def is_pod_ready(pod: Mapping) -> bool:
    cond = condition(pod, "Ready")
    return bool(cond and cond.get("status") == "True")


def clock_fn(clock: Any) -> Callable[[], float]:
    """Wall-clock seconds from an injected clock: a ``Clock`` (``.time()``) or a bare callable."""
    if clock is None:
        return time.time
    if hasattr(clock, "time"):
        return clock.time
    if callable(clock):
        return clock
    raise TypeError(f"clock must be a callable returning Unix seconds or an object with .time(), got {clock!r}")
