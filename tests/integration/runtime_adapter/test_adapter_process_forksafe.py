"""Spawning engines from a threaded supervisor: no Python code runs between fork and exec (the death
signal is set by a helper the child execs, then the engine replaces it in place), so spawns never
hang on a lock another thread held, and the engine still dies with its supervisor."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from runtime_adapter import process
from tests.conftest import free_port

HERE = os.path.dirname(__file__)
REPO = os.path.dirname(os.path.dirname(HERE))
CHILD = os.path.join(HERE, "supervisor_child.py")


def gone(pid: int) -> bool:
    return process.proc_state(pid) in (None, "Z")


async def test_spawns_from_a_busy_threaded_process_never_hang(monkeypatch):
    """With four threads dlopen-ing libraries, twenty spawns complete promptly; each child is the engine
    itself (same pid, its own command line), and no preexec_fn is handed to the fork."""
    stop = threading.Event()
    libm = ctypes.util.find_library("m") or "libm.so.6"

    def busy() -> None:
        while not stop.is_set():
            ctypes.CDLL(libm)

    threads = [threading.Thread(target=busy, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    seen_kwargs: list[dict] = []
    real = asyncio.create_subprocess_exec

    async def spy(*args, **kwargs):
        seen_kwargs.append(kwargs)
        return await real(*args, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spy)
    procs = []
    try:
        for _ in range(20):
            proc, _stream = await asyncio.wait_for(
                process.spawn(["sleep", "30"], dict(os.environ), survive_supervisor_exit=False, log_path=None), 10)
            procs.append(proc)
        for proc in procs:
            for _ in range(100):  # the helper execs the engine in place within milliseconds
                if process.proc_cmdline(proc.pid) == ("sleep", "30"):
                    break
                await asyncio.sleep(0.02)
            assert process.proc_cmdline(proc.pid) == ("sleep", "30")
        assert all("preexec_fn" not in kw for kw in seen_kwargs)
    finally:
        stop.set()
        for proc in procs:
            proc.signal(signal.SIGKILL)
            await proc.wait()


def test_the_helper_refuses_to_start_an_engine_whose_supervisor_is_gone():
    """If the supervisor died before the death signal was set, the engine is not started (it would
    be an orphan no signal ever reaches)."""
    out = subprocess.run(process.with_death_signal(["sleep", "30"], parent_pid=1), capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 125 and "is gone; not starting sleep" in out.stderr


def test_an_engine_that_cannot_be_found_fails_the_spawn_itself():
    """A missing engine command is an OSError from spawn (reported as a launch failure), as exec would give."""
    with pytest.raises(FileNotFoundError, match="no-such-engine"):
        asyncio.run(process.spawn(["no-such-engine"], {}, survive_supervisor_exit=False, log_path=None))


async def test_engine_dies_with_a_busy_supervisor_killed(tmp_path):
    """A supervisor with busy threads starts an emulator replica; SIGKILL of the supervisor takes the
    engine down (the death signal survived the helper's exec)."""
    child = subprocess.Popen([sys.executable, CHILD, str(free_port()), str(tmp_path), "die", "busy"],
                             stdout=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    engine_pid = None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), timeout=90)
        engine_pid = json.loads(line)["pid"]
        assert "runtime_adapter.emulator" in " ".join(process.proc_cmdline(engine_pid) or ())
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        for _ in range(150):
            if gone(engine_pid):
                break
            await asyncio.sleep(0.1)
        assert gone(engine_pid), "the engine outlived its supervisor"
    finally:
        child.kill()
        child.wait(timeout=10)
        if engine_pid and not gone(engine_pid):
            os.kill(engine_pid, signal.SIGKILL)
