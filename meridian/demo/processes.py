"""Child processes of a local Meridian (the demo and the end-to-end tests): start, wait until
ready, stop, and make sure nothing is left behind.

Every process started here, and everything it starts in turn (agents start engine replicas), carries
the environment variable ``MERIDIAN_RUN_ID=<run id>``. Children may start their own sessions (the
runtime adapter puts each engine in its own process group so replicas survive an agent restart), so
process groups alone cannot find them all; the run id can: ``sweep()`` scans /proc for it. That is
also how the demo loses a whole region: it kills every process whose environment names the
cluster."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence

log = logging.getLogger("meridian.demo.processes")

RUN_ID_ENV = "MERIDIAN_RUN_ID"
CLUSTER_ENV = "MERIDIAN_RUN_CLUSTER"


# Replica port blocks of local fleets: below Linux's ephemeral range (32768+), so the OS never hands
# them to connections, and below the ports free_port() walks; each fleet holds an flock on its
# block's lock file while it runs, so two fleets on one machine (a demo beside end-to-end tests)
# never share replica ports.
PORT_BLOCK_FIRST, PORT_BLOCK_SIZE, PORT_BLOCKS = 20_000, 1_000, 12


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


class _PortCursor:
    """Hands out loopback ports from outside the kernel's ephemeral range (above it when at least
    512 ports are there, as with Linux's default 32768-60999, else between the replica port blocks
    and it). A port bound to 0 and closed again is free only until the kernel gives it to the next
    outgoing connection, which under load is a matter of milliseconds, so a server started on it a
    moment later can find it taken; ports outside the range are never handed to connections. The
    cursor walks the range from a random start (other processes start elsewhere) and never returns
    a port twice before it wraps; each port is checked to bind before it is returned."""

    def __init__(self) -> None:
        low, high = _ephemeral_range()
        blocks_end = PORT_BLOCK_FIRST + PORT_BLOCKS * PORT_BLOCK_SIZE
        if 65535 - high >= 512:
            self.first, self.size = high + 1, 65535 - high
        elif low - blocks_end >= 512:
            self.first, self.size = blocks_end, low - blocks_end
        else:
            self.first, self.size = 0, 0  # no room outside the range: ask the kernel
        self._next = random.randrange(self.size) if self.size else 0

    def take(self, count: int = 1) -> int:
        """The first of ``count`` consecutive ports that all bind now (a run never wraps past 65535)."""
        for _ in range(min(self.size, 256)):
            if self._next + count > self.size:
                self._next = 0
            port = self.first + self._next
            self._next = (self._next + count) % self.size
            if all(_binds(p) for p in range(port, port + count)):
                return port
        for _ in range(64):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port + count - 1 <= 65535 and all(_binds(p) for p in range(port + 1, port + count)):
                return port
        raise RuntimeError(f"no {count} consecutive free loopback ports found")


def _binds(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_cursors: dict[int, _PortCursor] = {}  # by pid: a forked child starts its own walk


def free_port(count: int = 1) -> int:
    """A loopback TCP port free now, outside the kernel's ephemeral range (see ``_PortCursor``);
    with ``count`` > 1, the first of that many consecutive free ports (e.g. one ``/metrics`` port
    per router worker), all at or below 65535."""
    cursor = _cursors.get(os.getpid())
    if cursor is None:
        cursor = _cursors[os.getpid()] = _PortCursor()
    return cursor.take(count)


class PortBlock:
    """A block of ``PORT_BLOCK_SIZE`` loopback ports claimed for this process until ``release``."""

    def __init__(self, base: int, handle) -> None:
        self.base = base
        self._handle = handle

    @classmethod
    def claim(cls, lock_dir: pathlib.Path | None = None) -> PortBlock:
        """The first block no other live fleet holds; raises RuntimeError when all are held."""
        import fcntl  # noqa: PLC0415 (POSIX only, like the demo's /proc sweep)

        lock_dir = lock_dir or pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / "meridian-port-blocks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        for i in range(PORT_BLOCKS):
            base = PORT_BLOCK_FIRST + i * PORT_BLOCK_SIZE
            handle = open(lock_dir / f"{base}.lock", "w")  # noqa: SIM115 (held open: the lock lives with it)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            return cls(base, handle)
        raise RuntimeError(f"every replica port block {PORT_BLOCK_FIRST}-"
                           f"{PORT_BLOCK_FIRST + PORT_BLOCKS * PORT_BLOCK_SIZE - 1} is held by another local fleet")

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _environ_of(pid: int) -> dict[str, str]:
    try:
        raw = pathlib.Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def pids_with(env: Mapping[str, str]) -> list[int]:
    """Pids of live (not zombie) processes whose environment contains every pair of ``env`` (not this one)."""
    found = []
    me = os.getpid()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        environ = _environ_of(int(entry.name))
        if environ and all(environ.get(k) == v for k, v in env.items()) and _alive(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def cmdline_of(pid: int) -> list[str]:
    try:
        raw = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def describe(pids: Sequence[int]) -> list[str]:
    """Each pid with its command line (shortened), for a message about processes left behind."""
    return [f"{pid} ({' '.join(cmdline_of(pid))[:160] or 'gone'})" for pid in pids]


def kill_pids(pids: Sequence[int], grace_s: float = 3.0) -> None:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                alive.append(pid)
        if sig == signal.SIGKILL or not alive:
            break
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(p) for p in alive):
            time.sleep(0.05)
        pids = [p for p in alive if _alive(p)]
        if not pids:
            break


def _alive(pid: int) -> bool:
    try:
        status = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # A zombie has exited; it only waits for its parent to reap it.
    return status.rsplit(")", 1)[-1].split()[0] != "Z"


@dataclasses.dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen
    log_path: pathlib.Path
    cluster: str = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ProcessGroup:
    """The processes of one local run. Use as a context manager: leaving it stops everything."""

    def __init__(self, workdir: pathlib.Path, run_id: str | None = None, base_env: Mapping[str, str] | None = None):
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self._base_env = dict(os.environ if base_env is None else base_env)
        self.children: dict[str, Child] = {}

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()

    def start(self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              cluster: str = "") -> Child:
        if name in self.children and self.children[name].running():
            raise RuntimeError(f"{name} is already running (pid {self.children[name].pid})")
        full_env = dict(self._base_env)
        full_env.update(env or {})
        full_env[RUN_ID_ENV] = self.run_id
        if cluster:
            full_env[CLUSTER_ENV] = cluster
        log_path = self.workdir / "logs" / f"{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(list(argv), env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True)
        child = Child(name, list(argv), proc, log_path, cluster)
        self.children[name] = child
        log.info("event=process_started name=%s pid=%d", name, proc.pid)
        return child

    async def wait_port(self, child: Child, port: int, timeout_s: float = 30.0) -> None:
        """Wait (without blocking the loop) until ``port`` accepts connections or the child dies."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if port_open(port):
                return
            if not child.running():
                raise RuntimeError(f"{child.name} exited with {child.proc.returncode}:\n{child.tail()}")
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{child.name} did not listen on port {port} within {timeout_s}s:\n{child.tail()}")

    def stop(self, name: str, grace_s: float = 5.0) -> None:
        child = self.children.get(name)
        if child is None or not child.running():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.proc.wait(timeout=5)

    def kill_cluster(self, cluster: str) -> list[int]:
        """SIGKILL every process of one cluster (its agent and the replicas it started): a lost region."""
        pids = pids_with({RUN_ID_ENV: self.run_id, CLUSTER_ENV: cluster})
        kill_pids(pids, grace_s=0)
        for child in self.children.values():
            if child.cluster == cluster:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(timeout=5)
        return pids

    def sweep(self) -> list[int]:
        """Kill anything of this run still alive (replicas of killed agents included)."""
        pids = pids_with({RUN_ID_ENV: self.run_id})
        if pids:
            kill_pids(pids)
        return pids

    def stragglers(self, wait_s: float = 3.0) -> list[int]:
        """Processes of this run still alive after up to ``wait_s`` (for a last check; empty is good)."""
        deadline = time.monotonic() + wait_s
        while True:
            left = pids_with({RUN_ID_ENV: self.run_id})
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.1)

    def engine_pid(self, port: int) -> int | None:
        """The pid of this run's engine (replica) process serving ``port``, if any."""
        for pid in pids_with({RUN_ID_ENV: self.run_id}):
            argv = cmdline_of(pid)
            if any(a == "--port" and b == str(port) for a, b in zip(argv, argv[1:])) or f"--port={port}" in argv:
                return pid
        return None

    def stop_all(self) -> list[int]:
        """Stop every child (reverse start order), then sweep; returns the pids the sweep had to kill."""
        for name in reversed(list(self.children)):
            try:
                self.stop(name)
            except Exception:  # a failed stop must not keep the others running
                log.exception("event=stop_failed name=%s", name)
        leftovers = self.sweep()
        for child in self.children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=1)
        return leftovers


def meridian_argv(*args: str) -> list[str]:
    """argv that runs the ``meridian`` CLI with this interpreter."""
    return [sys.executable, "-m", "meridian.cli.main", *args]
