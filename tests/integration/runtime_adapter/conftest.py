"""Fixtures for the runtime adapter's integration tests: emulators in-process (port 0) or as real
processes through the supervisor. Every server and process is closed in the fixture."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator

import aiohttp
import pytest

from runtime_adapter import SupervisorConfig
from runtime_adapter.emulator import config as emulator_config
from runtime_adapter.emulator import server as emulator_server

# Fast supervision for tests; generous timeouts because CI shares 2 cores with other jobs.
FAST = SupervisorConfig(ready_timeout_s=60, probe_interval_s=0.1, health_timeout_s=10, health_interval_s=0.5,
                        unhealthy_threshold=2, scrape_interval_s=0.2, restart_backoff_initial_s=0.1,
                        restart_backoff_max_s=0.4, max_crashes=3, term_grace_s=5, kill_wait_s=10,
                        drain_poll_interval_s=0.1)


def emulator_cfg(**kw) -> emulator_config.EmulatorConfig:
    base = dict(model_path="meta-llama/Llama-3.1-8B-Instruct", served_model_name="llama", port=0,
                enable_metrics=True, startup_delay_s=0.0, warmup_s=0.0, speedup=50.0, health_timeout_s=20.0)
    base.update(kw)
    return emulator_config.EmulatorConfig(**base)


@contextlib.asynccontextmanager
async def running_emulator(**kw) -> AsyncIterator[emulator_server.EmulatorServer]:
    async with emulator_server.serve(emulator_cfg(**kw)) as srv:
        yield srv


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        yield session


def pid_gone(pid: int) -> bool:
    """True when no live process has ``pid`` (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped between the open and the read: ESRCH
        return True


PYTHON = sys.executable
