"""What every benchmark needs: free loopback ports, waiting for a server, and a line naming the
machine (cores, CPU model, Python, load) so each printed figure says where it was measured."""

from __future__ import annotations

import os
import platform
import socket
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
