"""``python -m runtime_adapter serve`` (the replica pod's entry point) as its own process, with the
SGLang emulator as engine: it becomes ready, /drain waits for an in-flight request and then stops
the engine, SIGTERM drains too, the exit code follows the engine, each phase is logged."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import aiohttp
import pytest

from meridian.demo import processes
from meridian.fleet import models
from runtime_adapter import serve

SPEC = models.RuntimeSpec(model_path="Qwen/Qwen2.5-0.5B-Instruct", served_model_name="qwen")
EMULATOR = {"MERIDIAN_EMULATOR_STARTUP_DELAY_S": "0.3", "MERIDIAN_EMULATOR_WARMUP_S": "0.2",
            "MERIDIAN_EMULATOR_SPEEDUP": "1"}


class Pod:
    """``python -m runtime_adapter serve`` configured through its environment, as a pod is."""

    def __init__(self, tmp_path, **env: str):
        self.port, self.adapter_port = processes.free_port(), processes.free_port()
        self.log_path = tmp_path / "serve.log"
        self.env = {**os.environ, **EMULATOR, "MERIDIAN_RUNTIME_SPEC": serve.runtime_spec_json(SPEC),
                    "MERIDIAN_BIND_HOST": "127.0.0.1", "MERIDIAN_ENGINE_PORT": str(self.port),
                    "MERIDIAN_ADAPTER_PORT": str(self.adapter_port), "MERIDIAN_REPLICA_ID": "r1",
                    "MERIDIAN_ENGINE_COMMAND": json.dumps(["python", "-m", "runtime_adapter.emulator"]),
                    "MERIDIAN_STOP_GRACE_S": "5", **env}
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Pod:
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "runtime_adapter", "serve"], env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    @property
    def engine(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def adapter(self) -> str:
        return f"http://127.0.0.1:{self.adapter_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    async def ready(self, session: aiohttp.ClientSession, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"serve exited {self.proc.returncode}:\n{self.log()}"
            if "phase=ready" in self.log():
                return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"not ready after {timeout_s}s:\n{self.log()}")

    async def exit_code(self, timeout_s: float = 30.0) -> int:
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert self.proc.poll() is not None, f"serve still running after {timeout_s}s:\n{self.log()}"
        return self.proc.returncode


async def _chat(session: aiohttp.ClientSession, url: str, max_tokens: int) -> int:
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens,
            "ignore_eos": True}
    async with session.post(url + "/v1/chat/completions", json=body, timeout=aiohttp.ClientTimeout(total=60)) as resp:
        await resp.read()
        return resp.status


async def test_serve_becomes_ready_and_logs_each_phase(tmp_path):
    """The engine starts with SGLang's flags, answers /health, /healthz reports the engine, and the
    phases spawn, load, warmup and ready are logged in that order."""
    async with aiohttp.ClientSession() as session:
        with Pod(tmp_path) as pod:
            await pod.ready(session)
            async with session.get(pod.engine + "/health") as resp:
                assert resp.status == 200
            async with session.get(pod.adapter + "/healthz") as resp:
                body = await resp.json()
                assert resp.status == 200 and body["phase"] == "ready" and body["engine_pid"] > 0
            async with session.get(pod.adapter + "/metrics") as resp:
                assert 'meridian_replica_phase_seconds{phase="load"}' in await resp.text()
            text = pod.log()
            order = [text.index(f"phase={p} ") for p in ("spawn", "load", "warmup", "ready")]
            assert order == sorted(order)
            assert "--served-model-name qwen" in text and f"--port {pod.port}" in text


async def test_drain_waits_for_the_request_in_flight_then_stops_the_engine(tmp_path):
    """/drain (what preStop calls) lets a running request finish with 200, then stops the engine;
    a second /drain shares the first; the process exits 0."""
    async with aiohttp.ClientSession() as session:
        with Pod(tmp_path) as pod:
            await pod.ready(session)
            request = asyncio.create_task(_chat(session, pod.engine, max_tokens=120))
            await asyncio.sleep(0.5)  # the request is being generated
            t0 = time.monotonic()
            first = asyncio.create_task(session.get(pod.adapter + "/drain?deadline_s=30"))
            second = asyncio.create_task(session.get(pod.adapter + "/drain?deadline_s=30"))
            assert await request == 200
            for call in (first, second):
                async with await call as resp:
                    result = await resp.json()
                    assert resp.status == 200 and result["outstanding_at_term"] == 0
                    assert result["deadline_hit"] is False and result["killed"] is False
            assert time.monotonic() - t0 < 30
            assert await pod.exit_code() == 0
            assert "phase=draining" in pod.log() and "phase=stopped" in pod.log()


async def test_sigterm_drains_and_exits_zero(tmp_path):
    """SIGTERM without a drain first (the kubelet's stop) drains with the default deadline and exits 0."""
    async with aiohttp.ClientSession() as session:
        with Pod(tmp_path) as pod:
            await pod.ready(session)
            request = asyncio.create_task(_chat(session, pod.engine, max_tokens=60))
            await asyncio.sleep(0.3)
            pod.proc.send_signal(signal.SIGTERM)
            assert await request == 200
            assert await pod.exit_code() == 0
            assert "phase=draining" in pod.log()


async def test_the_exit_code_follows_the_engine(tmp_path):
    """When the engine dies by itself (SIGKILL here), serve exits with 128 + the signal, so the
    kubelet counts a container restart."""
    async with aiohttp.ClientSession() as session:
        with Pod(tmp_path) as pod:
            await pod.ready(session)
            async with session.get(pod.adapter + "/healthz") as resp:
                pid = (await resp.json())["engine_pid"]
            os.kill(pid, signal.SIGKILL)
            assert await pod.exit_code() == 128 + signal.SIGKILL
            assert "exit_code=-9" in pod.log()


@pytest.mark.parametrize("env,message", [
    ({"MERIDIAN_RUNTIME_SPEC": ""}, "the runtime spec is missing"),
    ({"MERIDIAN_RUNTIME_SPEC": '{"model_path": "m", "served_model_name": "a:b"}'}, "served_model_name"),
    ({"MERIDIAN_RUNTIME_SPEC": '{"model_path": "m", "served_model_name": "m", "colour": 1}'}, "unknown fields"),
    ({"MERIDIAN_ADAPTER_PORT": "nope"}, "invalid int value"),
])
def test_bad_settings_exit_2_naming_the_setting(tmp_path, env, message):
    """A missing or invalid setting exits 2 (before any engine starts) with a message naming it."""
    pod = Pod(tmp_path, **env)
    out = subprocess.run([sys.executable, "-m", "runtime_adapter", "serve"], env=pod.env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and message in out.stderr


def test_help_lists_every_setting_with_its_variable():
    """`python -m runtime_adapter serve --help` exits 0 and names each setting's environment variable."""
    out = subprocess.run([sys.executable, "-m", "runtime_adapter", "serve", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0
    for var in serve.ENV.values():
        assert var in out.stdout


async def test_sigterm_during_a_drain_stops_the_engine_at_once(tmp_path):
    """The kubelet's SIGTERM while /drain still waits (its grace period is over) ends the wait: the
    engine is stopped within the stop grace and serve exits 0."""
    async with aiohttp.ClientSession() as session:
        with Pod(tmp_path) as pod:
            await pod.ready(session)
            request = asyncio.create_task(_chat(session, pod.engine, max_tokens=2000))
            await asyncio.sleep(0.5)
            drain = asyncio.create_task(session.get(pod.adapter + "/drain?deadline_s=300"))
            await asyncio.sleep(1.0)
            t0 = time.monotonic()
            pod.proc.send_signal(signal.SIGTERM)
            assert await pod.exit_code(timeout_s=20) == 0
            assert time.monotonic() - t0 < 10
            assert "event=drain_cut" in pod.log()
            drain.cancel()
            request.cancel()
            await asyncio.gather(drain, request, return_exceptions=True)


async def test_an_explicit_deadline_replaces_the_running_drains(tmp_path):
    """/drain without a deadline (preStop) drains with the default; the agent's /drain?deadline_s=1
    then replaces it: the engine is stopped about a second later, the answer says the deadline hit."""
    async with aiohttp.ClientSession() as session:
        with Pod(tmp_path) as pod:
            await pod.ready(session)
            request = asyncio.create_task(_chat(session, pod.engine, max_tokens=3000))
            await asyncio.sleep(0.5)
            prestop = asyncio.create_task(session.get(pod.adapter + "/drain"))
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            async with session.get(pod.adapter + "/drain?deadline_s=1") as resp:
                result = await resp.json()
            assert time.monotonic() - t0 < 10
            assert result["deadline_hit"] is True and result["outstanding_at_term"] >= 1
            async with await prestop as resp:
                assert (await resp.json()) == result
            assert "event=drain_deadline" in pod.log()
            request.cancel()
            await asyncio.gather(request, return_exceptions=True)


async def test_the_api_key_file_makes_the_engine_require_the_key_without_showing_it(tmp_path):
    """With ``MERIDIAN_API_KEY_FILE`` (the mounted Secret) the engine answers 401 without the key and
    200 with it, its command line holds only a private --config path, and neither the container's
    output nor the engine's argv carries the key; the config file goes when serve exits."""
    key = "sk-pod-" + os.urandom(8).hex()
    key_file = tmp_path / "api-key"
    key_file.write_text(key + "\n")
    async with aiohttp.ClientSession() as session:
        with Pod(tmp_path, MERIDIAN_API_KEY_FILE=str(key_file)) as pod:
            await pod.ready(session)
            async with session.get(pod.engine + "/v1/models") as resp:
                assert resp.status == 401
            async with session.get(pod.engine + "/v1/models", headers={"Authorization": f"Bearer {key}"}) as resp:
                assert resp.status == 200
            async with session.get(pod.adapter + "/healthz") as resp:
                pid = (await resp.json())["engine_pid"]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode().split("\0")
            config_path = cmdline[cmdline.index("--config") + 1]
            assert key not in " ".join(cmdline) and os.stat(config_path).st_mode & 0o077 == 0
            with open(f"/proc/{pid}/environ", "rb") as f:
                assert key.encode() not in f.read()
            assert await _chat(session, pod.engine, max_tokens=4) == 401
            pod.proc.send_signal(signal.SIGTERM)
            assert await pod.exit_code() == 0
            assert "Uvicorn running" in pod.log()  # the engine's own output still reaches the container's
            assert key not in pod.log()
            assert not os.path.exists(config_path)


def test_an_unreadable_api_key_file_exits_2_naming_the_setting(tmp_path):
    """A missing or empty key file is a configuration error naming --api-key-file and its variable."""
    for path, message in ((tmp_path / "missing", "cannot read"), (tmp_path / "empty", "is empty")):
        if path.name == "empty":
            path.write_text("\n")
        pod = Pod(tmp_path, MERIDIAN_API_KEY_FILE=str(path))
        out = subprocess.run([sys.executable, "-m", "runtime_adapter", "serve"], env=pod.env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 2 and "MERIDIAN_API_KEY_FILE" in out.stderr and message in out.stderr
