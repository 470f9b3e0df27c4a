"""What every benchmark needs: free loopback ports, waiting for a server, the processes it starts
(stopped by pid), the CPU time a process tree has used (from the kernel's own accounting), and a
line naming the machine (cores, CPU model, Python, load) so each printed figure says where it was
measured."""

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


def parse_stat(text: str) -> tuple[int, int]:
    """(parent pid, user + system CPU ticks) from the text of a ``/proc/<pid>/stat`` file.

    The command name (field 2) is in parentheses and may itself hold spaces and parentheses, so
    the fields are counted from the last ``)``: after it come state, ppid, ... utime (field 14)
    and stime (field 15), in clock ticks (``os.sysconf("SC_CLK_TCK")`` per second). The times
    cover every thread of the process (a multi-threaded Rust router included)."""
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def tree_cpu_s(pid: int, proc_root: str = "/proc") -> float:
    """CPU seconds (user + system, all threads) used so far by ``pid`` and its live descendants,
    e.g. a router's supervisor and its worker processes. Take it before and after a run: the
    difference over the requests served is the CPU time per request. Resolution: one clock tick
    (10 ms at the usual 100 Hz), per process."""
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, entry, "stat")) as fh:
                stats[int(entry)] = parse_stat(fh.read())
        except (OSError, IndexError, ValueError):
            continue  # exited between listdir and open, or not a process's stat
    ticks, seen, frontier = 0, set(), {pid}
    while frontier:
        ticks += sum(stats[p][1] for p in frontier if p in stats)
        seen |= frontier
        frontier = {p for p, (ppid, _) in stats.items() if ppid in frontier and p not in seen}
    return ticks / os.sysconf("SC_CLK_TCK")


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
