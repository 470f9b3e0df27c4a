"""Probe and lifecycle-hook handlers as the kubelet runs them: ``httpGet`` (against the pod IP, port
by number or by container port name; 200-399 is success), ``tcpSocket``, ``exec`` (the command in the
container's environment, exit 0 is success) and ``sleep``; and ``Prober``, one probe's loop with
``initialDelaySeconds``, ``periodSeconds``, ``timeoutSeconds``, ``successThreshold`` and
``failureThreshold`` honoured as specified. Failure messages are the kubelet's."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import ssl
import sys
from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from agents.testing.kube import containers

log = logging.getLogger("agents.testing.kube.probes")


def resolve_port(port: object, container: Mapping) -> int | None:
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    return None


async def run_handler(handler: Mapping, *, pod_ip: str, container: Mapping, env: Mapping[str, str],
                      cwd: pathlib.Path, session: aiohttp.ClientSession, timeout_s: float) -> tuple[bool, str]:
    """Run one handler; (success, message when it failed)."""
    if handler.get("httpGet") is not None:
        return await _http(handler["httpGet"], pod_ip, container, session, timeout_s)
    if handler.get("tcpSocket") is not None:
        spec = handler["tcpSocket"]
        port = resolve_port(spec.get("port"), container)
        host = spec.get("host") or pod_ip
        if port is None:
            return False, f"unknown port {spec.get('port')!r}"
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (TimeoutError, OSError) as exc:
            return False, f"dial tcp {host}:{port}: {_describe(exc)}"
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True, ""
    if handler.get("exec") is not None:
        return await _exec(handler["exec"], env, cwd, timeout_s)
    if handler.get("sleep") is not None:
        await asyncio.sleep(float(handler["sleep"].get("seconds", 0)))
        return True, ""
    return False, "grpc handlers are not modelled by the fake"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return "i/o timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "connect: connection refused"
    return str(exc) or type(exc).__name__


async def _http(spec: Mapping, pod_ip: str, container: Mapping, session: aiohttp.ClientSession,
                timeout_s: float) -> tuple[bool, str]:
    port = resolve_port(spec.get("port"), container)
    host = spec.get("host") or pod_ip
    scheme = str(spec.get("scheme") or "HTTP").lower()
    path = spec.get("path") or "/"
    if not path.startswith("/"):
        path = "/" + path
    url = f"{scheme}://{host}:{port}{path}"
    if port is None:
        return False, f"unknown port {spec.get('port')!r} in {url}"
    headers = {h["name"]: h.get("value", "") for h in spec.get("httpHeaders") or [] if h.get("name")}
    headers.setdefault("User-Agent", "kube-probe/1.31")
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s),
                               ssl=insecure if scheme == "https" else None) as resp:
            await resp.read()
            if 200 <= resp.status < 400:
                return True, ""
            return False, f"HTTP probe failed with statuscode: {resp.status}"
    except TimeoutError:
        return False, (f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting '
                       f'headers)')
    except aiohttp.ClientConnectorError as exc:
        return False, f'Get "{url}": dial tcp {host}:{port}: {_describe(exc.os_error)}'
    except aiohttp.ClientError as exc:
        return False, f'Get "{url}": {exc}'


async def _exec(spec: Mapping, env: Mapping[str, str], cwd: pathlib.Path, timeout_s: float) -> tuple[bool, str]:
    cmd = [containers.expand(str(p), env) for p in spec.get("command") or []]
    if cmd and cmd[0] in containers.PYTHONS:
        cmd[0] = sys.executable
    try:
        proc = await asyncio.create_subprocess_exec(*cmd, env=dict(env), cwd=str(cwd),
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                                    start_new_session=True)
    except OSError as exc:
        return False, f"exec failed: {exc}"
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        containers.signal_group(proc.pid, 9)
        await proc.wait()
        return False, f"command {cmd!r} timed out"
    if proc.returncode == 0:
        return True, ""
    return False, f"command {cmd!r} exited with {proc.returncode}: {out.decode(errors='replace').strip()[:200]}"


class Prober:
    """One probe of one container run. ``result`` is the current verdict (readiness and startup start
    False, liveness True, as the kubelet's prober does); after every attempt
    ``on_result(ok, message, changed)`` is called, ``changed`` when the verdict flipped (after
    ``successThreshold`` successes or ``failureThreshold`` failures in a row). ``sleep`` is injected so
    a test could drive the loop with a virtual clock."""

    def __init__(self, name: str, spec: Mapping, run: Callable[[float], Awaitable[tuple[bool, str]]],
                 on_result: Callable[[bool, str, bool], None], *, initial: bool,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.name = name
        self.initial_delay_s = float(spec.get("initialDelaySeconds") or 0)
        self.period_s = float(spec.get("periodSeconds") or 10)
        self.timeout_s = float(spec.get("timeoutSeconds") or 1)
        self.success_threshold = int(spec.get("successThreshold") or 1)
        self.failure_threshold = int(spec.get("failureThreshold") or 3)
        self.result = initial
        self.finished = False  # set by the owner to end the loop (a startup probe that succeeded)
        self._run = run
        self._on_result = on_result
        self._sleep = sleep
        self._successes = 0
        self.failures = 0

    async def loop(self) -> None:
        await self._sleep(self.initial_delay_s)
        while True:
            ok, message = await self._run(self.timeout_s)
            changed = False
            if ok:
                self._successes, self.failures = self._successes + 1, 0
                if not self.result and self._successes >= self.success_threshold:
                    self.result, changed = True, True
            else:
                self.failures, self._successes = self.failures + 1, 0
                if self.result and self.failures >= self.failure_threshold:
                    self.result, changed = False, True
            self._on_result(ok, message, changed)
            if self.finished:
                return
            await self._sleep(self.period_s)
