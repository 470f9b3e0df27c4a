"""A real replicated Redis for tests: a primary, a replica and three sentinels (Debian's
redis-server and redis-sentinel) on free loopback ports, each in its own temporary directory, with
quick failure detection (down after 1 s). ``kill_primary`` SIGKILLs the primary; ``wait_failover``
waits for the sentinels to promote the replica. Every process is stopped on ``stop``."""

from __future__ import annotations

import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import redis

from tests.conftest import free_port, wait_for_port

SERVICE = "meridian"
DOWN_AFTER_MS = 1000


class SentinelCluster:
    def __init__(self) -> None:
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="meridian-sentinel-"))
        self.procs: dict[str, subprocess.Popen] = {}
        self.primary_port = free_port()
        self.replica_port = free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]

    @property
    def url(self) -> str:
        return f"redis+sentinel://{','.join(f'127.0.0.1:{p}' for p in self.sentinel_ports)}/{SERVICE}/0"

    def _redis(self, name: str, port: int, *extra: str) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: `make test` installs it")
        work = self.dir / name
        work.mkdir()
        self.procs[name] = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(work), "--protected-mode", "yes", "--repl-diskless-sync-delay", "0", *extra],
            stdout=open(work / "log", "w"), stderr=subprocess.STDOUT)
        wait_for_port(port, proc=self.procs[name])

    def start(self) -> SentinelCluster:
        binary = shutil.which("redis-sentinel")
        if binary is None:
            raise RuntimeError("redis-sentinel is not installed: `make test` installs it (apt-get install redis-sentinel)")
        self._redis("primary", self.primary_port)
        self._redis("replica", self.replica_port, "--replicaof", "127.0.0.1", str(self.primary_port))
        self._wait(lambda: redis.Redis(port=self.replica_port).info("replication").get("master_link_status") == "up",
                   "replica in sync")
        for i, port in enumerate(self.sentinel_ports):
            work = self.dir / f"sentinel{i}"
            work.mkdir()
            conf = work / "sentinel.conf"  # sentinels rewrite their config: each gets its own file
            conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {work}\nsentinel resolve-hostnames no\n"
                            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} 2\n"
                            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                            f"sentinel failover-timeout {SERVICE} 10000\n"
                            f"sentinel parallel-syncs {SERVICE} 1\n")
            self.procs[f"sentinel{i}"] = subprocess.Popen([binary, str(conf)], stdout=open(work / "log", "w"),
                                                          stderr=subprocess.STDOUT)
            wait_for_port(port, proc=self.procs[f"sentinel{i}"])
        self._wait(lambda: all(int(redis.Redis(port=p).sentinel_master(SERVICE)["num-other-sentinels"]) == 2
                               for p in self.sentinel_ports), "sentinels see each other")
        return self

    def primary(self) -> int:
        """The port the sentinels name as the primary now."""
        _host, port = redis.Redis(port=self.sentinel_ports[0]).sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def kill_primary(self) -> int:
        port = self.primary()
        name = "primary" if port == self.primary_port else "replica"
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait(timeout=10)
        return port

    def restart_as_replica(self, port: int) -> None:
        """Bring the killed node back (empty, on its old port) as a replica of the current primary,
        as an operator or the sentinels would; wait until it is in sync."""
        name = "primary" if port == self.primary_port else "replica"
        shutil.rmtree(self.dir / name, ignore_errors=True)
        self._redis(name, port, "--replicaof", "127.0.0.1", str(self.primary()))
        try:
            self._wait(lambda: redis.Redis(port=port).info("replication").get("master_link_status") == "up",
                       "restarted node in sync", 40.0)
        except TimeoutError as exc:
            tail = (self.dir / name / "log").read_text()[-2000:]
            raise TimeoutError(f"{exc}; its log ends:\n{tail}") from None

    def wait_failover(self, old_port: int, timeout_s: float = 30.0) -> int:
        """Wait until every sentinel names a new primary, and it accepts writes; its port."""
        self._wait(lambda: all(int(redis.Redis(port=p).sentinel_get_master_addr_by_name(SERVICE)[1]) != old_port
                               for p in self.sentinel_ports), "failover", timeout_s)
        port = self.primary()
        self._wait(lambda: redis.Redis(port=port).info("replication")["role"] == "master", "new primary writable")
        return port

    @staticmethod
    def _wait(predicate, what: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except redis.RedisError as exc:
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"sentinel cluster: no {what} after {timeout_s:g}s" + (f" ({last})" if last else ""))

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)
