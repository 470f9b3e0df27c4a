"""The scheduler overlay's pods, run here as the manifests run them: the Redis container's own
script with the real redis-server, and `meridian scheduler` with the Deployment's own arguments and
environment, each mount a temporary directory filled as the kubelet would fill it (a Secret's keys,
a ConfigMap's data), paths and ports moved to loopback. What an operator relies on: Redis refuses
a client without the password, the password is on no command line, and the scheduler reaches that
Redis with it and serves its admin API and gRPC port over TLS from the mounted Secrets."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request

import pytest
import redis
import yaml

from meridian.demo import processes
from tests.deploy import kube
from tests.integration import tls_certs

KUBE = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
PASSWORD = "3f0c" * 16
ADMIN_TOKEN = "admin-" + "9a" * 16


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    return kube.render(KUBE / "overlays" / "scheduler")


def _workload(objects: list[dict], program: str) -> tuple[dict, dict]:
    (found,) = [(pod, c) for _o, pod, c in kube.containers(objects) if kube.program(c) == program]
    return found


def _secret_env(c: dict, secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """The container's env as the kubelet sets it: literals, and each secretKeyRef from ``secrets``."""
    env = {}
    for e in c.get("env", []):
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            env[e["name"]] = secrets[ref["name"]][ref["key"]]
        elif "value" in e:
            env[e["name"]] = e["value"]
    return env


def _mount(objects: list[dict], pod: dict, c: dict, root: pathlib.Path, secrets: dict[str, dict[str, str]]):
    """Each of the container's mounts as a directory under ``root``, filled from the Secret (``secrets``)
    or ConfigMap behind it; returns a function that moves a path of the pod into ``root``."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    moved = {}
    for m in c.get("volumeMounts", []):
        target = root / m["mountPath"].strip("/")
        target.mkdir(parents=True, exist_ok=True)
        volume = volumes[m["name"]]
        if "secret" in volume:
            data = secrets[volume["secret"]["secretName"]]
        elif "configMap" in volume:
            data = kube.find(objects, "ConfigMap", volume["configMap"]["name"])["data"]
        else:
            data = {}
        for key, value in data.items():
            (target / key).write_text(value)
        moved[m["mountPath"].rstrip("/")] = str(target)

    pattern = re.compile(r"(?<![\w/.-])(" + "|".join(map(re.escape, sorted(moved, key=len, reverse=True))) + r")(?=/|$)")

    def move(text: str) -> str:  # one pass: a moved path is not moved again
        return pattern.sub(lambda m: moved[m.group(1)], text)
    return move


def _start_redis(objects: list[dict], tmp: pathlib.Path, secrets) -> tuple[subprocess.Popen, int, dict]:
    _pod, c = _workload(objects, "redis-server")
    script = c["args"][0]
    assert "--dir /data" in script
    port = processes.free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    script = script.replace("--dir /data", f"--dir {tmp} --bind 127.0.0.1 --port {port}")
    proc = subprocess.Popen([*c["command"], script], env=dict(os.environ) | _secret_env(c, secrets),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port, c
        except OSError:
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "redis-server did not listen"
            time.sleep(0.05)


def _end(proc: subprocess.Popen) -> None:
    """Stop a started pod script and whatever it started (its own session): nothing outlives the test."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _secrets(pki: tls_certs.Pki) -> dict[str, dict[str, str]]:
    """The Secrets the scheduler overlay reads, with test values (keys as the Secrets table says)."""
    pair = {"tls.crt": pathlib.Path(pki.server_cert).read_text(), "tls.key": pathlib.Path(pki.server_key).read_text()}
    return {"meridian-redis-auth": {"password": PASSWORD},
            "meridian-scheduler-tls": pair, "meridian-scheduler-admin-tls": pair,
            "meridian-admin-token": {"token": ADMIN_TOKEN},
            "meridian-scheduler-tokens": {"tokens.yaml": yaml.safe_dump({"clusters": {"aws-use1": "c" * 32},
                                                                         "routers": ["r" * 32]})}}


def test_the_redis_pod_script_requires_the_password_and_keeps_it_off_every_command_line(objects, tmp_path):
    """The Redis container's own script with the real redis-server: a client without the password is
    refused, the probe passes only with REDISCLI_AUTH, and the password is in no process's argv;
    redis-server is the container's own process (exec'd), so the kubelet's SIGTERM reaches it and it
    shuts down cleanly instead of being killed after the grace period."""
    proc, port, c = _start_redis(objects, tmp_path, _secrets(tls_certs.make(tmp_path / "pki")))
    try:
        assert pathlib.Path(f"/proc/{proc.pid}/comm").read_text().strip().startswith("redis-server")
        with pytest.raises(redis.exceptions.AuthenticationError):
            redis.Redis(port=port, socket_timeout=2).ping()
        assert redis.Redis(port=port, password=PASSWORD, socket_timeout=2).ping()
        probe = [w.replace("redis-cli", f"redis-cli -p {port}") for w in c["readinessProbe"]["exec"]["command"]]
        assert subprocess.run(probe, env={"PATH": os.environ["PATH"], "REDISCLI_AUTH": PASSWORD}).returncode == 0
        assert subprocess.run(probe, env={"PATH": os.environ["PATH"]}).returncode != 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            assert PASSWORD.encode() not in argv, f"pid {pid} has the password in its argv"
        proc.terminate()
        assert proc.wait(timeout=10) == 0, "redis-server did not shut down cleanly on SIGTERM"
    finally:
        _end(proc)


def test_the_scheduler_pod_reaches_redis_with_the_password_and_serves_tls(objects, tmp_path):
    """`meridian scheduler` with the Deployment's arguments and env (Secrets and ConfigMaps mounted
    as files, the Redis URL and listen ports moved to loopback) takes the lead in the password-only
    Redis, and serves /healthz over HTTPS and its gRPC port over TLS, both verified with the CA;
    plain HTTP on the admin port gets no answer."""
    pki = tls_certs.make(tmp_path / "pki")
    secrets = _secrets(pki)
    redis_proc, redis_port, _c = _start_redis(objects, tmp_path / "redis", secrets)
    pod, c = _workload(objects, "scheduler")
    move = _mount(objects, pod, c, tmp_path / "pod", secrets)
    grpc_port, admin_port = processes.free_port(), processes.free_port()
    values = {"POD_NAME": "meridian-scheduler-0", "POD_IP": "127.0.0.1"}
    argv = []
    for arg in c["args"][1:]:
        arg = re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], move(arg))
        arg = {"--grpc-address=0.0.0.0:7070": f"--grpc-address=127.0.0.1:{grpc_port}",
               "--admin-address=0.0.0.0:7071": f"--admin-address=127.0.0.1:{admin_port}"}.get(arg, arg)
        argv.append(arg.replace("127.0.0.1:7070", f"127.0.0.1:{grpc_port}"))
    env = _secret_env(c, secrets)
    assert env["MERIDIAN_STATE_URL"] == "redis://meridian-redis:6379/0"
    env["MERIDIAN_STATE_URL"] = f"redis://127.0.0.1:{redis_port}/0"
    proc = subprocess.Popen([sys.executable, "-m", "meridian.cli.main", "scheduler", *argv],
                            env=dict(os.environ) | {k: v for k, v in env.items() if k not in values},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        ctx = ssl.create_default_context(cafile=pki.ca)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{admin_port}/healthz", context=ctx, timeout=2) as r:
                    if json.loads(r.read())["leader"]:  # it holds the lease, in that Redis
                        break
            except OSError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the scheduler's admin API did not answer over HTTPS"
            time.sleep(0.2)
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", grpc_port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.selected_alpn_protocol() == "h2"
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/healthz", timeout=2).read()
        assert redis.Redis(port=redis_port, password=PASSWORD).keys(), "the scheduler wrote nothing to Redis"
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        _end(redis_proc)
