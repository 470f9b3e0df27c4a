"""Shared fixtures: real local servers on free loopback ports (Redis first; others join as their
components land). No fake stands in where a test claims a real server's behaviour."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from meridian.demo import processes


# The project's one free-port helper (a TCP port free on 127.0.0.1 at the time of the call).
free_port = processes.free_port


def wait_for_port(port: int, timeout_s: float = 10.0, host: str = "127.0.0.1",
                  proc: subprocess.Popen | None = None) -> None:
    """Until something listens on ``host:port``; a TimeoutError after ``timeout_s``, or at once a
    ProcessExited when ``proc`` (the server started to listen there) exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise ProcessExited(f"exited with {proc.returncode} before listening on {host}:{port}") from None
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout_s}s")


class ProcessExited(RuntimeError):
    """The process a test waited for exited before it listened."""


@contextlib.contextmanager
def running_redis(extra_config: str = "") -> Iterator[str]:
    """A real redis-server (Debian package) on a free loopback port, its config on standard input
    (``extra_config``: more lines, e.g. ``requirepass``, which so stays off every argv); yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: `make test` installs it (apt-get install redis-server)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="meridian-redis-")
    config = (f"port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\ndir {workdir}\nprotected-mode yes\n"
              + extra_config)
    proc = subprocess.Popen([binary, "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    assert proc.stdin is not None
    proc.stdin.write(config.encode())
    proc.stdin.close()
    try:
        wait_for_port(port, proc=proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server():
    """The session's redis-server (``running_redis``); yields its URL."""
    with running_redis() as url:
        yield url


@pytest.fixture
def redis_url(redis_server):
    """The session's Redis, flushed before each test."""
    import redis  # test-only dependency of this fixture

    client = redis.Redis.from_url(redis_server)
    client.flushall()
    client.close()
    return redis_server


@pytest.fixture
def repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# CI keeps only the tail of the output, where the durations come last: repeat each failure and
# error there, with the end of its traceback, so the tail says which test failed and why.
_TAIL_LINES = 25


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus, config):
    bad = [r for kind in ("failed", "error") for r in terminalreporter.stats.get(kind, [])]
    if not bad:
        return
    terminalreporter.write_sep("=", f"{len(bad)} failed or errored (repeated for the log's tail)")
    for report in bad:
        terminalreporter.write_line(f"{report.when.upper():8} {report.nodeid}")
        for line in report.longreprtext.splitlines()[-_TAIL_LINES:]:
            terminalreporter.write_line(f"    {line}")
