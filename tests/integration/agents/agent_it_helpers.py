"""Helpers shared by the agent's integration tests (imported by name: this directory is on
sys.path under pytest's default import mode)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import sys
import time

import aiohttp

from meridian import spec
from meridian.fleet import models

import agents


TOKEN = "cluster-token-for-tests"


def cluster_doc(name: str, body: str, *, address: str = "127.0.0.1:1", state_dir: str = "/tmp/unused",
                ports: str = "32000-32999", report_interval_s: float = 1, tls_ca: str | None = None) -> spec.Cluster:
    """A Cluster document: ``body`` is the spec's cloud/provider/pools part (YAML, indented 2)."""
    return spec.load_text(cluster_text(name, body, address=address, state_dir=state_dir, ports=ports,
                                       report_interval_s=report_interval_s, tls_ca=tls_ca),
                          f"{name}.yaml").of_kind("Cluster")[0]


def cluster_text(name: str, body: str, *, address: str, state_dir: str, ports: str = "32000-32999",
                 report_interval_s: float = 1, tls_ca: str | None = None) -> str:
    tls = f", tls: {{ca_file: \"{tls_ca}\"}}" if tls_ca else ""
    text = f"""
apiVersion: meridian/v1
kind: Cluster
metadata: {{name: {name}}}
spec:
{body}
  auth: {{token_env: MERIDIAN_TEST_TOKEN}}
  scheduler: {{address: "{address}"{tls}}}
  agent:
    report_interval_s: {report_interval_s}
    heartbeat_interval_s: 1
    replica_ports: {ports}
    state_dir: {state_dir}
    cache_dir: ""
    engine_command: [{sys.executable}, -m, runtime_adapter.emulator]
"""
    return text


def build_agent(cluster: spec.Cluster, state_dir: pathlib.Path, **kwargs) -> agents.Agent:
    options = kwargs.pop("options", agents.AgentOptions(discover_interval_s=0.5, interruption_poll_s=0.5,
                                                        reconnect_initial_s=0.2, reconnect_max_s=2.0))
    settings = agents.config.replica_settings(cluster, **kwargs.pop("replica_overrides", {}))
    return agents.build(cluster, token=TOKEN, state_dir=state_dir, replica_settings=settings, options=options,
                        **kwargs)


async def wait_for(predicate, timeout_s: float = 30.0, what: str = "condition", interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


# Emulator settings for a quick start (model load 0.3 s, warm-up 0.2 s), carried in the runtime
# spec's environment as the scheduler would send them.
FAST_ENGINE_ENV = {"MERIDIAN_EMULATOR_STARTUP_DELAY_S": "0.3", "MERIDIAN_EMULATOR_WARMUP_S": "0.2"}


def runtime(served: str = "qwen") -> models.RuntimeSpec:
    return models.RuntimeSpec(model_path="Qwen/Qwen2.5-0.5B-Instruct", served_model_name=served, env=FAST_ENGINE_ENV)


def start(directive_id: str, replica_id: str, pool: str, gpus: int = 1, revision: str = "rev1",
          deployment: str = "chat") -> models.Directive:
    return models.Directive(directive_id, models.StartReplica(replica_id, deployment, revision, runtime(), pool, gpus), 1)


def drain(directive_id: str, replica_id: str, deadline_s: int = 10) -> models.Directive:
    return models.Directive(directive_id, models.DrainReplica(replica_id, deadline_s), 1)


def engine_pids(state_dir: pathlib.Path) -> dict[str, int]:
    """replica id -> engine pid, from the runtime adapter's records under ``state_dir``."""
    out = {}
    for path in state_dir.rglob("*.replica.json"):
        data = json.loads(path.read_text())
        out[data["replica_id"]] = data["pid"]
    return out


def relay_pids(state_dir: pathlib.Path) -> dict[str, int]:
    """replica id -> TLS relay pid, from the records of the replicas that have one."""
    out = {}
    for path in state_dir.rglob("*.replica.json"):
        data = json.loads(path.read_text())
        if data.get("relay"):
            out[data["replica_id"]] = data["relay"]["pid"]
    return out


def kill_engines(pids) -> None:
    """SIGKILL the engines the test started (by pid, and their process groups), if still alive."""
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_listening_on(port: int) -> list[int]:
    """Pids of engine processes started with ``--port <port>`` (duplicates would show up here)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"runtime_adapter.emulator" in argv and b"--port" in argv and argv[argv.index(b"--port") + 1] == str(port).encode():
            out.append(int(entry))
    return out


class Poller:
    """GETs ``url`` every ``interval_s`` in the background, counting answers and failures: the
    proof that a replica kept serving while something else was restarted."""

    def __init__(self, url: str, interval_s: float = 0.2):
        self.url = url
        self.interval_s = interval_s
        self.ok = 0
        self.failures: list[str] = []
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> Poller:
        # A slow answer on a loaded machine is still an answer: only errors count as failures.
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20))
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            try:
                async with self._session.get(self.url) as resp:
                    await resp.read()
                    if resp.status == 200:
                        self.ok += 1
                    else:
                        self.failures.append(f"HTTP {resp.status}")
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                self.failures.append(repr(exc))
            await asyncio.sleep(self.interval_s)

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._session.close()
