"""Fixtures for router integration tests: fake replicas and routers on 127.0.0.1, cleaned up."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import aiohttp
import pytest

from router import app as app_mod
from router import config, testing
from tests.conftest import ProcessExited, wait_for_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture
async def replicas():
    """make(n, **kw) -> n started FakeReplica servers, stopped after the test."""
    started: list[testing.FakeReplica] = []

    async def make(n: int = 2, **kwargs) -> list[testing.FakeReplica]:
        out = []
        for _ in range(n):
            rep = await testing.FakeReplica(f"r{len(started)}", **kwargs).start()
            started.append(rep)
            out.append(rep)
        return out

    yield make
    for rep in started:
        rep.hold_last.set()
        await rep.stop()


@pytest.fixture
async def make_router():
    """make(table=None, **config) -> a started Router on a free port (no health checks, no LKG
    unless asked), stopped after the test."""
    routers: list[app_mod.Router] = []

    async def make(routing_table=None, **overrides) -> app_mod.Router:
        data = {"listen_port": 0, "lkg_store": "none", "health": {"enabled": False}}
        data.update(overrides)
        router = app_mod.Router(config.RouterConfig.model_validate(data), rng=random.Random(0))
        await router.start()
        routers.append(router)
        if routing_table is not None:
            router.state.apply(routing_table, "static")
        return router

    yield make
    for router in routers:
        await router.stop()


@pytest.fixture
async def http():
    async with aiohttp.ClientSession() as session:
        yield session


class Processes:
    """Subprocesses started by a test, killed by pid at the end."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.outputs: list = []  # each process's stdout and stderr, read back when it fails to start

    def start(self, args: list[str], port: int, timeout_s: float = 30.0) -> subprocess.Popen:
        """Starts ``python args`` and waits for it to listen on ``port``; a process that exits first
        fails the test at once with its last output (e.g. a config error), not after ``timeout_s``."""
        output = tempfile.TemporaryFile()
        self.outputs.append(output)
        proc = subprocess.Popen([sys.executable, *args], cwd=REPO, stdout=output,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        try:
            wait_for_port(port, timeout_s, proc=proc)
        except (TimeoutError, ProcessExited) as exc:
            output.seek(0)
            tail = output.read().decode(errors="replace")[-2000:]
            self.stop()
            raise RuntimeError(f"{' '.join(args[:3])}: {exc}:\n{tail}") from None
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for output in self.outputs:
            output.close()


@pytest.fixture
def processes():
    procs = Processes()
    try:
        yield procs
    finally:
        procs.stop()
