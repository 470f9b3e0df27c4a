"""What every benchmark needs: free loopback ports, waiting for a server, the processes it starts
(stopped by pid), and a line naming the machine (cores, CPU model, Python, load) so each printed
figure says where it was measured."""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import time

from meridian.demo import processes


free_port = processes.free_port  # the project's one free-port helper


def wait_port(port: int, timeout_s: float = 60.0, what: str = "server") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{what} not listening on 127.0.0.1:{port} after {timeout_s}s")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    load = os.getloadavg()
    return (f"{os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()}, "
            f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start")


class Stack:
    """Every process the bench starts; stopped by pid at the end."""

    def __init__(self, workdir: str):
        self.workdir = workdir
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, args: list[str], port: int, timeout_s: float = 30.0,
              env: dict[str, str] | None = None) -> None:
        """Start ``args`` (output to ``<workdir>/<name>.log``) and wait until ``port`` listens."""
        log = open(os.path.join(self.workdir, f"{name}.log"), "wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.procs.append((name, proc))
        wait_port(port, timeout_s, what=name)

    def pid(self, name: str) -> int:
        return next(p.pid for n, p in self.procs if n == name)

    def stop(self, names: set[str] | None = None) -> None:
        """SIGTERM the processes named (all when None), SIGKILL any still there after 10 s."""
        chosen = [(n, p) for n, p in self.procs if names is None or n in names]
        for _, proc in chosen:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in chosen:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs = [(n, p) for n, p in self.procs if (n, p) not in chosen]
