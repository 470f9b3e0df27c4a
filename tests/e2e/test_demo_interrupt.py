"""``meridian demo`` stopped with Ctrl-C while its traffic runs: it says so, exits 130, and leaves no
process behind (scheduler, agents, routers, engine replicas in their own sessions included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from meridian.demo import processes

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
MARK = "MERIDIAN_TEST_DEMO_MARK"  # inherited by everything the demo starts, so leftovers can be found


def test_ctrl_c_during_traffic_stops_everything(tmp_path):
    mark = uuid.uuid4().hex
    env = {**os.environ, MARK: mark, "PYTHONUNBUFFERED": "1"}
    # Its own session, as a shell's foreground job: Ctrl-C is SIGINT to the whole process group.
    demo = subprocess.Popen([sys.executable, "-m", "meridian.cli.main", "demo", "--no-live", "--duration", "120",
                             "--workdir", str(tmp_path / "run")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    stderr_lines: list[str] = []
    progress = threading.Event()

    def read() -> None:
        for line in demo.stdout:
            lines.append(line)
            if line.startswith("["):  # the first progress line: replicas serve, traffic runs
                progress.set()

    # One reader per pipe, each to its end of file (a pipe nobody drains can stall the demo; a pipe
    # closed under its reader raises in that thread).
    readers = [threading.Thread(target=read, daemon=True),
               threading.Thread(target=lambda: stderr_lines.extend(demo.stderr), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        assert progress.wait(150), "no progress line within 150 s:\n" + "".join(lines)
        started = processes.pids_with({MARK: mark})
        # Scheduler, 9 agents, 4 routers and the engine replicas the agents started.
        assert len(started) >= 14, started
        os.killpg(demo.pid, signal.SIGINT)
        demo.wait(timeout=90)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        for reader in readers:
            reader.join(10)
    stderr = "".join(stderr_lines)
    assert demo.returncode == 130, stderr
    assert "interrupted: everything stopped" in stderr
    deadline = time.monotonic() + 5
    while processes.pids_with({MARK: mark}) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes.pids_with({MARK: mark}) == [], "processes of the demo outlived it"
