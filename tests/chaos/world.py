"""The chaos suite's world: a whole Meridian on loopback (``meridian.demo.fleet.LocalFleet``) with two
scheduler nodes on a real, persistent Redis, three agents (sim provider, SGLang emulator replicas)
and a router, each agent's and the router's link to the scheduler through a ``FaultyProxy``.

Proxies stand where a load balancer in front of the scheduler nodes would: each new connection goes
to the current leader first (``follow_leader`` re-orders them after a leadership change), the
other node second. ``whole()`` says whether the fleet is back to its steady state; the evidence
readers (``directives_twice``, ``served_twice``, ``specs``) are what a fault is judged on besides
the clients' view."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import aiohttp

from meridian.demo import fleet as fleet_mod
from meridian.demo import processes
from runtime_adapter.emulator import settings as emulator_settings
from tests.chaos import tcp_proxy

log = logging.getLogger("meridian.tests.chaos")
SPECS = pathlib.Path(__file__).parent / "specs"
MODEL = "chat"
MIN_REPLICAS = 3
CLUSTERS = ("aws-use1", "gcp-usc1", "azure-eus2")  # as in specs/clusters.yaml
_DIRECTIVE = re.compile(r"directive id=(\S+) action=(\S+) outcome=(\S+)")
_STARTED = re.compile(r"replica started replica=(\S+)")
_COUNTER = re.compile(r'meridian_router_(retries|upstream_errors)_total\{.*(?:reason|kind)="([^"]+)".*\} (\S+)$')


class ChaosRedis:
    """redis-server on a free loopback port with an append-only file fsynced on every write, so a
    restart keeps the scheduler's state (what a production Redis with persistence does)."""

    def __init__(self, workdir: pathlib.Path):
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = processes.free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: `make test` installs it (apt-get install redis-server)")
        self.proc = await asyncio.to_thread(self._spawn, binary)
        deadline = time.monotonic() + 15
        while not processes.port_open(self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"redis-server did not start (see {self.dir / 'redis.log'})")
            await asyncio.sleep(0.05)

    def _spawn(self, binary: str) -> subprocess.Popen:
        with open(self.dir / "redis.log", "ab") as log_file:
            return subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", "",
                 "--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "yes"],
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait, 5)
        self.proc = None


@dataclasses.dataclass
class Whole:
    """What ``World.whole`` found (for the failure message when it never holds)."""

    ok: bool
    why: str = ""


class World:
    def __init__(self, workdir: pathlib.Path):
        self.workdir = workdir
        self.redis = ChaosRedis(workdir)
        self.request_log_dir = workdir / "requests"
        env = emulator_settings.environment(startup_delay_s=1.0, warmup_s=0.5,
                                            request_log_dir=str(self.request_log_dir))
        self.fleet = fleet_mod.LocalFleet(fleet_mod.FleetConfig(
            workdir=workdir, spec_files=(SPECS / "fleet.yaml",), cluster_file=SPECS / "clusters.yaml",
            provisioning_delay_s=1.0, router_region="na-east", state_url=self.redis.url, scheduler_nodes=2,
            scheduler_settings=("heartbeat_interval_s=2", "adopt_grace_s=10", "tick_interval_s=1"),
            emulator_env=tuple(env.items())))
        self.agent_proxies = {name: tcp_proxy.FaultyProxy(self.fleet.grpc_ports, name=f"agent-{name}")
                              for name in CLUSTERS}
        self.router_proxy = tcp_proxy.FaultyProxy(list(reversed(self.fleet.grpc_ports)), name="router")
        self.session: aiohttp.ClientSession | None = None
        self.leader_node = 0

    # ------------------------------------------------------------------ life

    async def start(self) -> None:
        self.session = aiohttp.ClientSession()
        await self.redis.start()
        for proxy in (*self.agent_proxies.values(), self.router_proxy):
            await proxy.start()
        fleet = self.fleet
        # Every agent reaches the scheduler through its own proxy, the router through its own.
        fleet.agent_scheduler_addresses = {name: p.address for name, p in self.agent_proxies.items()}
        fleet.router_scheduler_address = self.router_proxy.address
        fleet.prepare()
        # The specs go in before the agents start, inside the first leader's adoption grace, so its
        # first plan sees every cluster's pools (a deployment the first plan of a term could not
        # place at all is not re-solved incrementally when pools appear later; see the report).
        await fleet.start_scheduler(0)
        applied = await fleet.apply(self.session, [SPECS / "fleet.yaml", fleet.workdir / "clusters.yaml"])
        if applied["status"] != 200:
            raise RuntimeError(f"apply failed: {applied}")
        await fleet.start_agents()
        await fleet.start_scheduler(1)
        await fleet.start_router()
        await self.wait_whole(180)

    async def stop(self) -> None:
        try:
            await asyncio.to_thread(self.fleet.stop)
            for proxy in (*self.agent_proxies.values(), self.router_proxy):
                await proxy.stop()
            await self.redis.stop()
        finally:
            if self.session is not None:
                await self.session.close()

    # ------------------------------------------------------------------ views

    async def status(self) -> dict:
        return await self.fleet.status(self.session)

    async def router_status(self) -> dict:
        return await self.fleet.router_status(self.session)

    async def router_connected(self) -> bool:
        async with self.session.get(f"{self.fleet.router_url}/metrics") as resp:
            text = await resp.text()
        return any(line.startswith("meridian_router_scheduler_connected ") and line.split()[-1] == "1.0"
                   for line in text.splitlines())

    async def router_counters(self) -> collections.Counter:
        """The router's retries by reason and upstream errors by kind (summed over replicas)."""
        async with self.session.get(f"{self.fleet.router_url}/metrics") as resp:
            text = await resp.text()
        out: collections.Counter = collections.Counter()
        for line in text.splitlines():
            m = _COUNTER.match(line)
            if m:
                out[f"{m.group(1)}:{m.group(2)}"] += float(m.group(3))
        return out

    @staticmethod
    def ready(status: dict, exclude: str = "") -> list[tuple[dict, dict]]:
        """(cluster, replica) of ready chat replicas on live clusters."""
        return [(c, r) for c in status.get("clusters", []) if c["cluster_id"] != exclude and not c.get("lost")
                for r in c.get("replica_details", []) if r["deployment"] == MODEL and r["state"] == "ready"]

    async def whole(self) -> Whole:
        """The steady state: a leader, every cluster connected, at least MIN_REPLICAS chat replicas,
        all ready, no directive open; the router connected to the scheduler and routing to every one
        of those replicas, each passing its health checks and not ejected."""
        try:
            status = await self.status()
            if not status.get("leader"):
                return Whole(False, "no leader")
            down = [c["cluster_id"] for c in status.get("clusters", []) if not c.get("connected") or c.get("lost")]
            if down:
                return Whole(False, f"clusters not connected: {down}")
            ready = {r["replica_id"] for _, r in self.ready(status)}
            if len(ready) < MIN_REPLICAS:
                return Whole(False, f"{len(ready)} ready replicas")
            unsettled = [(r["replica_id"], r["state"]) for c in status["clusters"] if not c.get("lost")
                         for r in c.get("replica_details", []) if r["deployment"] == MODEL and r["state"] != "ready"]
            if unsettled:
                return Whole(False, f"replicas not ready: {unsettled}")
            if status.get("open_directives"):
                return Whole(False, f"open directives: {status['open_directives']}")
            rs = await self.router_status()
            entry = next((m for m in rs.get("models", []) if m["model"] == MODEL), {})
            good = {r["replica_id"] for r in entry.get("replicas", []) if r["state"] == "ready" and r["active_up"]
                    and r["ejected_for_s"] == 0}
            if not ready <= good:
                return Whole(False, f"router does not route healthily to {sorted(ready - good)}")
            if not await self.router_connected():
                return Whole(False, "router not connected to the scheduler")
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError, KeyError) as exc:
            return Whole(False, f"{type(exc).__name__}: {exc}")
        return Whole(True)

    async def wait_whole(self, timeout_s: float) -> float:
        """Seconds until the fleet is whole; raises TimeoutError saying what was missing."""
        t0 = time.monotonic()
        last = Whole(False, "not checked")
        while time.monotonic() - t0 < timeout_s:
            last = await self.whole()
            if last.ok:
                return time.monotonic() - t0
            await asyncio.sleep(0.5)
        raise TimeoutError(f"the fleet was not whole after {timeout_s:.0f} s: {last.why}")

    async def wait_for(self, predicate, timeout_s: float, what: str) -> dict:
        return await self.fleet.wait_for(self.session, predicate, timeout_s, what, interval_s=0.3)

    async def follow_leader(self) -> int:
        """Point every proxy at the leading node first; returns its index."""
        for node, url in enumerate(self.fleet.admin_urls):
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, RuntimeError):
                if (await self.fleet.admin(self.session, "GET", "/v1/status", url=url)).get("leader"):
                    self.leader_node = node
                    break
        order = [self.fleet.grpc_ports[self.leader_node]] + [p for i, p in enumerate(self.fleet.grpc_ports)
                                                             if i != self.leader_node]
        for proxy in self.agent_proxies.values():
            proxy.targets = order
        return self.leader_node

    # ------------------------------------------------------------------ evidence

    async def specs(self) -> list[tuple[str, str, int]]:
        items = (await self.fleet.admin(self.session, "GET", "/v1/specs"))["items"]
        return sorted((i["kind"], i["name"], int(i.get("generation", 0))) for i in items)

    def directives_twice(self) -> dict[str, list[str]]:
        """From every agent's log: directive ids acted on (accepted) more than once, and replica ids
        launched more than once. Empty lists are the promise."""
        accepted: collections.Counter = collections.Counter()
        started: collections.Counter = collections.Counter()
        for path in sorted((self.workdir / "logs").glob("agent-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                m = _DIRECTIVE.search(line)
                if m and m.group(3) == "accepted":
                    accepted[m.group(1)] += 1
                m = _STARTED.search(line)
                if m:
                    started[m.group(1)] += 1
        return {"directives": sorted(k for k, n in accepted.items() if n > 1),
                "replicas": sorted(k for k, n in started.items() if n > 1)}

    def served_twice(self, request_ids: set[str]) -> list[str]:
        """Of ``request_ids``, those that more than one answer was generated for (the replicas'
        request logs, which survive a SIGKILL: each line is written as the answer is)."""
        seen: collections.Counter = collections.Counter()
        for path in self.request_log_dir.glob("*.log"):
            for _, rid in _answers(path):
                if rid in request_ids:
                    seen[rid] += 1
        return sorted(k for k, n in seen.items() if n > 1)

    def answered_by(self, pid: int, since_unix: float) -> int:
        """Answers the replica process ``pid`` generated since ``since_unix`` (its request log)."""
        return sum(1 for path in self.request_log_dir.glob(f"replica-{pid}-*.log")
                   for at, _ in _answers(path) if at >= since_unix)

    # ------------------------------------------------------------------ handles on parts

    def replica_port(self, replica: dict) -> int:
        return int(replica["endpoint"].rsplit(":", 1)[1])

    def engine_pid(self, replica: dict) -> int:
        pid = self.fleet.procs.engine_pid(self.replica_port(replica))
        if pid is None:
            raise RuntimeError(f"no engine process serves {replica['endpoint']}")
        return pid

    async def emulator_faults(self, replica: dict, **faults) -> dict:
        url = f"{replica['endpoint']}/_emulator/faults"
        async with self.session.post(url, json=faults, timeout=aiohttp.ClientTimeout(total=5)) as resp:
            return await resp.json()

    def kill(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _answers(path: pathlib.Path) -> list[tuple[float, str]]:
    """(unix time, request id) of each line of an emulator request log."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        at, _, rid = line.partition(" ")
        try:
            out.append((float(at), rid))
        except ValueError:
            continue  # a line cut short by a SIGKILL
    return out

