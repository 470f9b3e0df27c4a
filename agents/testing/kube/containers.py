"""A container as a local process: its argv (``command``/``args`` with the kubelet's ``$(VAR)``
expansion, or the image's entrypoint from the fake's ``command_map``), its environment (the fake's
own environment with the container's ``env`` laid over it, downward-API ``fieldRef`` and
``resourceFieldRef`` included) and its process group (``start_new_session``), so a signal reaches
everything the container started, as a container runtime's cgroup kill does."""

from __future__ import annotations

import asyncio
import math
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

from agents.testing.kube import objects

PYTHONS = ("python", "python3", f"python{sys.version_info.major}.{sys.version_info.minor}")


class ConfigError(Exception):
    """The container cannot be configured (CreateContainerConfigError): a missing secret, say."""


class ImageError(Exception):
    """The image is unknown to the fake (ErrImagePull)."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` -> the value when VAR is defined, left as is when not; ``$$`` -> ``$`` (the kubelet's rule)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "$" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end < 0:
                out.append(text[i:])
                break
            name = text[i + 2:end]
            out.append(env[name] if name in env else text[i:end + 1])
            i = end + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _field_ref(pod: Mapping, path: str) -> str:
    md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    simple = {"metadata.name": md.get("name"), "metadata.namespace": md.get("namespace"), "metadata.uid": md.get("uid"),
              "spec.nodeName": spec.get("nodeName"), "spec.serviceAccountName": spec.get("serviceAccountName"),
              "status.podIP": status.get("podIP"), "status.hostIP": status.get("hostIP"),
              "status.podIPs": ",".join(p["ip"] for p in status.get("podIPs") or []),
              "status.hostIPs": ",".join(p["ip"] for p in status.get("hostIPs") or [])}
    if path in simple:
        return simple[path] or ""
    for prefix, table in (("metadata.labels", md.get("labels") or {}),
                          ("metadata.annotations", md.get("annotations") or {})):
        if path.startswith(prefix + "['") and path.endswith("']"):
            return table.get(path[len(prefix) + 2:-2], "")
    raise ConfigError(f"unsupported fieldRef fieldPath {path!r}")


def _resource_ref(container: Mapping, ref: Mapping) -> str:
    section, _, name = str(ref.get("resource", "")).partition(".")
    resources = container.get("resources") or {}
    value = (resources.get(section) or {}).get(name)
    if value is None:
        return "0" if section == "requests" else {"cpu": "8", "memory": "68719476736"}.get(name, "0")
    divisor = objects.parse_quantity(ref.get("divisor") or "1")
    return str(math.ceil(objects.parse_quantity(value) / divisor))


def environment(container: Mapping, pod: Mapping, base: Mapping[str, str]) -> dict[str, str]:
    """The process environment: ``base`` (the fake's own, so the venv works), HOSTNAME = pod name, then
    each ``env`` entry in order, ``$(VAR)`` in a value expanded against the entries before it."""
    if container.get("envFrom"):
        raise ConfigError("envFrom (ConfigMaps and Secrets) is not modelled by the fake")
    own: dict[str, str] = {}
    for entry in container.get("env") or []:
        name = entry["name"]
        if "value" in entry:
            own[name] = expand(str(entry.get("value") or ""), own)
            continue
        source = entry.get("valueFrom") or {}
        if "fieldRef" in source:
            own[name] = _field_ref(pod, source["fieldRef"].get("fieldPath", ""))
        elif "resourceFieldRef" in source:
            own[name] = _resource_ref(container, source["resourceFieldRef"])
        elif "secretKeyRef" in source or "configMapKeyRef" in source:
            ref = source.get("secretKeyRef") or source.get("configMapKeyRef") or {}
            kind = "secret" if "secretKeyRef" in source else "configmap"
            if ref.get("optional"):
                continue
            raise ConfigError(f'{kind} "{ref.get("name", "")}" not found')
        else:
            own[name] = ""
    env = dict(base)
    env["HOSTNAME"] = (pod.get("metadata") or {}).get("name", "")
    env.update(own)
    return env


def argv(container: Mapping, command_map: Mapping[str, Sequence[str]], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` (expanded against the container's env), or the image's entrypoint from
    ``command_map`` + ``args``; a bare ``python``/``python3`` runs as ``sys.executable``."""
    command = container.get("command")
    args = container.get("args") or []
    if command:
        parts = list(command) + list(args)
    else:
        image = container.get("image", "")
        if image not in command_map:
            raise ImageError(f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": '
                             f'not found (the fake runs only the images of its command_map: '
                             f'{sorted(command_map) or "none"})')
        parts = list(command_map[image]) + list(args)
    parts = [expand(str(p), env) for p in parts]
    if parts and parts[0] in PYTHONS:
        parts[0] = sys.executable
    return parts


async def start(cmd: Sequence[str], *, env: Mapping[str, str], cwd: pathlib.Path,
                log_path: pathlib.Path) -> asyncio.subprocess.Process:
    """Start ``cmd`` in its own session/process group, stdout+stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        return await asyncio.create_subprocess_exec(*cmd, env=dict(env), cwd=str(cwd), stdin=subprocess.DEVNULL,
                                                    stdout=fd, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        os.close(fd)


def signal_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to the process group ``pid`` leads; False when it is already gone."""
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def exit_details(returncode: int) -> tuple[int, int | None]:
    """(exitCode as the runtime reports it, signal or None): a signal death is 128 + signal."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)
