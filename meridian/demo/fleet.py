"""A whole Meridian on one machine, on loopback: a scheduler, one agent per cluster (``sim``
provider, emulator replicas), a router. Used by ``meridian demo``, the end-to-end tests and the
chaos suite (which runs two scheduler nodes on Redis and puts fault-injecting proxies on the
links: ``state_url``, ``scheduler_nodes`` and the address attributes set before ``prepare``).

The example specs are the input; this module only rewrites what a local run must change: the
scheduler address, ports, token files, state directories, the engine command (the SGLang
emulator) and the simulated cloud's provisioning delay. Clusters named in ``k8s_clusters`` run
their replicas through the kubernetes backend, as pods of a fake Kubernetes of their own
(``python -m meridian.demo.kubecluster``, started before the cluster's agent, its nodes mirrored
from the sim cloud)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import pathlib
import secrets
import sys
from collections.abc import Sequence

import aiohttp
import yaml

from meridian.demo import processes
from meridian.spec import base as spec_base
from runtime_adapter.emulator import settings as emulator_settings

log = logging.getLogger("meridian.demo.fleet")

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
REGION_HEADER = "x-meridian-client-region"


@dataclasses.dataclass(frozen=True)
class FleetConfig:
    workdir: pathlib.Path
    spec_files: tuple[pathlib.Path, ...] = (
        EXAMPLES / "capacity-policy.yaml", EXAMPLES / "deployments.yaml", EXAMPLES / "latency-overrides.yaml")
    cluster_file: pathlib.Path = EXAMPLES / "clusters.yaml"
    clusters: tuple[str, ...] = ()  # empty: every Cluster in cluster_file
    provisioning_delay_s: float = 4.0
    spot_preemptions_per_node_hour: float | None = None  # None: as the cluster spec says
    router_region: str = "na-east"
    # One router per client region here (each with that --region: edge routers near their clients,
    # so the RTT a router takes out of what it observes is the one its clients' requests travel);
    # empty: one router in router_region.
    edge_regions: tuple[str, ...] = ()
    router_policy: str = "latency"
    scheduler_settings: tuple[str, ...] = ("heartbeat_interval_s=2",)
    # Scheduler state: "" keeps it in a SQLite file in the workdir; redis://HOST:PORT/DB shares it
    # between ``scheduler_nodes`` nodes (one leads, the others stand by).
    state_url: str = ""
    scheduler_nodes: int = 1
    emulator_env: tuple[tuple[str, str], ...] = ()
    log_level: str = "INFO"
    # Clusters whose replicas run as pods (kubernetes backend) on a fake Kubernetes per cluster.
    k8s_clusters: tuple[str, ...] = ()


class LocalFleet:
    """Starts and stops the processes of one local Meridian; see FleetConfig."""

    def __init__(self, config: FleetConfig):
        self.config = config
        self.workdir = pathlib.Path(config.workdir)
        self.procs = processes.ProcessGroup(self.workdir)
        self.ports: processes.PortBlock | None = None  # replica ports, claimed by prepare()
        self.admin_token = secrets.token_urlsafe(16)
        # A read-only principal (role viewer) for the web dashboard: the admin token never goes into a URL.
        self.viewer_token = secrets.token_urlsafe(16)
        self.router_token = secrets.token_urlsafe(16)
        if config.scheduler_nodes > 1 and not config.state_url.startswith("redis://"):
            raise ValueError("scheduler_nodes > 1 needs a shared state_url (redis://...)")
        self.grpc_ports = [processes.free_port() for _ in range(config.scheduler_nodes)]
        self.admin_ports = [processes.free_port() for _ in range(config.scheduler_nodes)]
        self.grpc_port, self.admin_port = self.grpc_ports[0], self.admin_ports[0]
        # Where agents and routers reach the scheduler, and what each node advertises to agents
        # as its address when it leads; set before prepare() to route them through proxies.
        self.agent_scheduler_address = f"127.0.0.1:{self.grpc_port}"
        self.agent_scheduler_addresses: dict[str, str] = {}  # per cluster, over the one above
        self.router_scheduler_address = f"127.0.0.1:{self.grpc_port}"
        self.advertise_addresses: list[str] = [f"127.0.0.1:{p}" for p in self.grpc_ports]
        regions = config.edge_regions or (config.router_region,)
        self.router_ports: dict[str, int] = {region: processes.free_port() for region in regions}
        self.cluster_docs: dict[str, dict] = {}
        self.agent_ports: dict[str, int] = {}
        self.kube_ports: dict[str, int] = {}  # API server port per kubernetes cluster
        self._prepared = False

    # ------------------------------------------------------------------ set-up

    @property
    def admin_url(self) -> str:
        return self.admin_urls[0]

    @property
    def admin_urls(self) -> list[str]:
        """Every scheduler node's admin API (any node takes writes; the leader's status has the fleet)."""
        return [f"http://127.0.0.1:{p}" for p in self.admin_ports]

    @property
    def dashboard_url(self) -> str:
        """The web dashboard with the viewer's token in the URL fragment (which no browser sends to the
        server; the page keeps it in the tab's sessionStorage and strips it from the address bar)."""
        return f"{self.admin_url}/dashboard#token={self.viewer_token}"

    @property
    def router_url(self) -> str:
        """The first router's URL (its status stands for all: every router follows the scheduler)."""
        return next(iter(self.router_urls.values()))

    @property
    def router_urls(self) -> dict[str, str]:
        """Router URL by the client region it serves."""
        return {region: f"http://127.0.0.1:{port}" for region, port in self.router_ports.items()}

    def prepare(self) -> None:
        """Write the local copies of the cluster specs, token files and the scheduler's token book."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        docs = [d for d in yaml.safe_load_all(self.config.cluster_file.read_text()) if d]
        wanted = set(self.config.clusters) or {d["metadata"]["name"] for d in docs}
        unknown = sorted(set(self.config.k8s_clusters) - wanted)
        if unknown:
            raise ValueError(f"k8s_clusters name clusters this run does not have: {unknown}; "
                             f"clusters: {sorted(wanted)}")
        tokens: dict[str, str] = {}
        if self.ports is None:
            self.ports = processes.PortBlock.claim()
        base_port = self.ports.base
        for i, doc in enumerate(d for d in docs if d["metadata"]["name"] in wanted):
            name = doc["metadata"]["name"]
            token = secrets.token_urlsafe(16)
            token_file = self.workdir / "tokens" / f"{name}.token"
            token_file.parent.mkdir(parents=True, exist_ok=True)
            token_file.write_text(token)
            token_file.chmod(0o600)
            tokens[name] = token
            s = doc["spec"]
            s["scheduler"] = {"address": self.agent_scheduler_addresses.get(name, self.agent_scheduler_address)}
            s["auth"] = {"token_file": str(token_file)}
            sim = s.setdefault("sim", {})
            sim["provisioning_delay_s"] = self.config.provisioning_delay_s
            if self.config.spot_preemptions_per_node_hour is not None:
                sim["spot_preemptions_per_node_hour"] = self.config.spot_preemptions_per_node_hour
            self.agent_ports[name] = processes.free_port()
            lo = base_port + i * 100
            if lo + 99 >= base_port + processes.PORT_BLOCK_SIZE:
                raise ValueError(f"at most {processes.PORT_BLOCK_SIZE // 100} clusters per local fleet")
            s["agent"] = {
                "engine_command": [sys.executable, "-m", "runtime_adapter.emulator"],
                "state_dir": str(self.workdir / "agents" / name),
                "cache_dir": str(self.workdir / "weights-cache"),
                "replica_ports": f"{lo}-{lo + 99}",
                "metrics_port": self.agent_ports[name],
                "report_interval_s": 2,
                "heartbeat_interval_s": 2,
            }
            if name in self.config.k8s_clusters:
                self.kube_ports[name] = processes.free_port()
                s["replicas"] = {"backend": "kubernetes", "kubernetes": kube_settings(self.kubeconfig(name))}
            self.cluster_docs[name] = doc
        (self.workdir / "clusters.yaml").write_text(yaml.safe_dump_all(list(self.cluster_docs.values()), sort_keys=False))
        (self.workdir / "scheduler-tokens.yaml").write_text(
            yaml.safe_dump({"clusters": tokens, "routers": [self.router_token],
                            "admins": [{"name": "dashboard-viewer", "role": "viewer",
                                        "token": "sha256:" + hashlib.sha256(self.viewer_token.encode()).hexdigest()}]}))
        (self.workdir / "admin.token").write_text(self.admin_token)
        router_token_file = self.workdir / "tokens" / "router.token"
        router_token_file.parent.mkdir(parents=True, exist_ok=True)
        router_token_file.write_text(self.router_token)
        router_token_file.chmod(0o600)
        self._prepared = True

    def kubeconfig(self, name: str) -> pathlib.Path:
        """The kubeconfig of a kubernetes cluster's fake Kubernetes (written when it starts)."""
        return self.workdir / "kube" / name / "kubeconfig"

    def _env(self) -> dict[str, str]:
        return {"MERIDIAN_ADMIN_TOKEN": self.admin_token, "PYTHONUNBUFFERED": "1"}

    # ------------------------------------------------------------------ processes

    @staticmethod
    def scheduler_name(node: int) -> str:
        return "scheduler" if node == 0 else f"scheduler-{node + 1}"

    async def start_scheduler(self, node: int = 0) -> None:
        """Start scheduler node ``node`` (0: the first; the others need a shared state_url)."""
        state = self.config.state_url or f"sqlite://{self.workdir / 'scheduler.db'}"
        argv = processes.meridian_argv(
            "scheduler", "--grpc-address", f"127.0.0.1:{self.grpc_ports[node]}",
            "--admin-address", f"127.0.0.1:{self.admin_ports[node]}",
            "--state", state, "--tokens-file", str(self.workdir / "scheduler-tokens.yaml"),
            "--id", f"scheduler-{node + 1}", "--log-level", self.config.log_level,
            "--set", f"advertise_grpc_address={self.advertise_addresses[node]}")
        for setting in self.config.scheduler_settings:
            argv += ["--set", setting]
        child = self.procs.start(self.scheduler_name(node), argv, env=self._env())
        await self.procs.wait_port(child, self.admin_ports[node])
        await self.procs.wait_port(child, self.grpc_ports[node])

    async def start_schedulers(self) -> None:
        """Every scheduler node, the first first (it takes the lease)."""
        for node in range(self.config.scheduler_nodes):
            await self.start_scheduler(node)

    async def start_kube(self, name: str) -> None:
        """The cluster's fake Kubernetes, before its agent (killed with the cluster: it runs its pods)."""
        kubeconfig = self.kubeconfig(name)
        kubeconfig.unlink(missing_ok=True)
        state_file = pathlib.Path(self.cluster_docs[name]["spec"]["agent"]["state_dir"]) / name / "sim-cloud.json"
        argv = [sys.executable, "-m", "meridian.demo.kubecluster", "--cluster-file", str(self.workdir / "clusters.yaml"),
                "--name", name, "--port", str(self.kube_ports[name]), "--workdir", str(self.workdir / "kube" / name / "pods"),
                "--kubeconfig", str(kubeconfig), "--state-file", str(state_file), "--log-level", self.config.log_level]
        child = self.procs.start(f"kube-{name}", argv, env=self._env(), cluster=name)
        await self.procs.wait_port(child, self.kube_ports[name])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not kubeconfig.exists():
            if not child.running() or loop.time() > deadline:
                raise RuntimeError(f"the fake Kubernetes of {name} wrote no kubeconfig:\n{child.tail()}")
            await asyncio.sleep(0.05)

    async def start_agent(self, name: str) -> None:
        kube = self.procs.children.get(f"kube-{name}")
        if name in self.kube_ports and (kube is None or not kube.running()):
            await self.start_kube(name)
        argv = processes.meridian_argv("agent", "--cluster", str(self.workdir / "clusters.yaml"), "--name", name,
                                       "--log-level", self.config.log_level)
        env = self._env()
        for path in self._latency_files():
            # The replicas simulate distance with the measured RTTs the scheduler and routers use.
            env.update(emulator_settings.environment(latency_map_file=str(path)))
        env.update(dict(self.config.emulator_env))
        child = self.procs.start(f"agent-{name}", argv, env=env, cluster=name)
        await self.procs.wait_port(child, self.agent_ports[name])

    def _latency_files(self) -> list[pathlib.Path]:
        """The LatencyMap spec files among the applied ones (measured RTTs the routers and the
        emulator replicas use, as the scheduler does)."""
        return [path for path in self.config.spec_files if "latency" in path.name]

    async def start_agents(self) -> None:
        # Every fake Kubernetes first, then every agent at once: agents that report together are
        # planned together (the scheduler's first plan waits only adopt_grace_s for them).
        await asyncio.gather(*(self.start_kube(name) for name in self.kube_ports))
        await asyncio.gather(*(self.start_agent(name) for name in self.cluster_docs))

    async def start_router(self) -> None:
        """Every router (one per edge region, or the one)."""
        await asyncio.gather(*(self._start_router(region, port, first=i == 0)
                               for i, (region, port) in enumerate(self.router_ports.items())))

    async def _start_router(self, region: str, port: int, first: bool) -> None:
        name = "router" if first else f"router-{region}"
        argv = processes.meridian_argv(
            "router", "--listen", f"127.0.0.1:{port}", "--region", region,
            "--trusted-region-header", REGION_HEADER, "--scheduler", self.router_scheduler_address,
            "--scheduler-token-file", str(self.workdir / "tokens" / "router.token"),
            "--lkg-path", str(self.workdir / f"{name}-lkg.json"),
            "--policy", self.config.router_policy, "--log-level", self.config.log_level.lower())
        for path in self._latency_files():
            argv += ["--latency-map", str(path)]
        child = self.procs.start(name, argv, env=self._env())
        await self.procs.wait_port(child, port)

    async def start(self) -> None:
        if not self._prepared:
            self.prepare()
        await self.start_schedulers()
        await self.start_agents()
        await self.start_router()

    def stop(self) -> list[int]:
        stopped = self.procs.stop_all()
        if self.ports is not None:
            self.ports.release()
            self.ports = None
        return stopped

    def kill_cluster(self, name: str) -> list[int]:
        """Lose a whole cluster at once: its agent and its replicas are SIGKILLed."""
        return self.procs.kill_cluster(name)

    async def preempt_spot(self, session: aiohttp.ClientSession, clusters: Sequence[str] | None = None,
                           notice_s: float = 10.0) -> dict[str, int]:
        """A spot preemption wave: every running spot node of the given (default: all live) clusters
        gets an interruption notice through its agent's sim fault port. Returns notices per cluster."""
        hit: dict[str, int] = {}
        for name in clusters or list(self.cluster_docs):
            child = self.procs.children.get(f"agent-{name}")
            if child is None or not child.running():
                continue
            url = f"http://127.0.0.1:{self.agent_ports[name]}/sim/preempt"
            try:
                async with session.post(url, json={"notice_s": notice_s}, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    body = await resp.json(content_type=None)
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                log.warning("event=preempt_failed cluster=%s error=%r", name, str(exc))
                continue
            if resp.status == 200 and body.get("notices"):
                hit[name] = len(body["notices"])
        return hit

    async def restart_scheduler(self) -> None:
        """Stop the scheduler (SIGTERM, as an operator would) and start it again on the same state."""
        await asyncio.to_thread(self.procs.stop, "scheduler")
        await self.start_scheduler()

    # ------------------------------------------------------------------ admin API

    async def admin(self, session: aiohttp.ClientSession, method: str, path: str, body: dict | None = None,
                    url: str | None = None) -> dict:
        """An admin API call to ``url`` (default: the first node that answers)."""
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        urls = [url] if url else self.admin_urls
        for i, base in enumerate(urls):
            try:
                async with session.request(method, f"{base}{path}", json=body, headers=headers,
                                           timeout=aiohttp.ClientTimeout(total=30)) as resp:
                    data = await resp.json(content_type=None)
            except aiohttp.ClientConnectionError:
                if i == len(urls) - 1:
                    raise
                continue  # that node is down: another one answers
            if resp.status >= 400 and resp.status != 422:
                raise RuntimeError(f"admin {method} {path}: HTTP {resp.status}: {json.dumps(data)[:300]}")
            return {"status": resp.status, **(data if isinstance(data, dict) else {"data": data})}
        raise RuntimeError("no scheduler node configured")

    async def apply(self, session: aiohttp.ClientSession, files: Sequence[pathlib.Path]) -> dict:
        body = {"files": [{"name": str(p), "text": pathlib.Path(p).read_text()} for p in files]}
        return await self.admin(session, "POST", "/v1/apply", body)

    async def status(self, session: aiohttp.ClientSession) -> dict:
        """The scheduler's status; with several nodes, the leader's (it alone has the fleet's view)."""
        if len(self.admin_urls) == 1:
            return await self.admin(session, "GET", "/v1/status")
        answers = []
        for url in self.admin_urls:
            try:
                answers.append(await self.admin(session, "GET", "/v1/status", url=url))
            except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError):
                continue
        if not answers:
            raise RuntimeError("no scheduler node answers")
        return next((a for a in answers if a.get("leader")), answers[0])

    async def cost(self, session: aiohttp.ClientSession, wait_floor: bool = False) -> dict:
        """The scheduler's bill (``GET /v1/cost``; ``wait_floor``: wait for the cost floor's solve)."""
        return await self.admin(session, "GET", "/v1/cost" + ("?floor=wait" if wait_floor else ""))

    async def router_status(self, session: aiohttp.ClientSession, url: str | None = None) -> dict:
        """A router's status document (default: the first router's)."""
        async with session.get(f"{url or self.router_url}/router/status",
                               timeout=aiohttp.ClientTimeout(total=10)) as resp:
            return await resp.json(content_type=None)

    async def wait_for(self, session: aiohttp.ClientSession, predicate, timeout_s: float, what: str,
                       interval_s: float = 0.5) -> dict:
        """Poll the scheduler's status until ``predicate(status)`` holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last: dict = {}
        while loop.time() < deadline:
            try:
                last = await self.status(session)
                if predicate(last):
                    return last
            except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError) as exc:
                last = {"error": str(exc)}
            await asyncio.sleep(interval_s)
        raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}; last status: {json.dumps(last)[:800]}")


def kube_settings(kubeconfig: pathlib.Path) -> dict:
    """A demo cluster's kubernetes backend: pods of the emulator through the runtime adapter, on the
    sim cloud's nodes (NodeSync labels them ``meridian.dev/pool``), quick probes and short graces."""
    return {"image": "meridian/replica:demo", "namespace": "meridian", "kubeconfig": str(kubeconfig),
            "command": ["python", "-m", "runtime_adapter", "serve"], "node_pool_label": "meridian.dev/pool",
            "model_cache": {"type": "empty_dir"}, "probe_period_s": 1, "stop_grace_s": 5, "drain_deadline_s": 60,
            "cpu_request": "100m", "memory_request": "256Mi", "pod_start_timeout_s": 300}


def resolve_k8s_clusters(cluster_file: pathlib.Path, text: str) -> tuple[str, ...]:
    """``--k8s-clusters``: a number N (the first N clusters of the file, in order) or a comma-separated
    list of cluster names; "" or "0": none. Unknown names are an error with the closest valid one."""
    text = text.strip()
    if not text or text == "0":
        return ()
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(cluster_file.read_text()) if d]
    if text.isdigit():
        n = int(text)
        if n > len(names):
            raise ValueError(f"--k8s-clusters {n}: {cluster_file} has {len(names)} clusters")
        return tuple(names[:n])
    chosen = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
    for name in chosen:
        if name not in names:
            raise ValueError(f"--k8s-clusters: {spec_base.unknown_name('cluster', name, names)}")
    return chosen


def ready_replicas(status: dict) -> dict[str, int]:
    """Ready replicas per cluster from the scheduler's status."""
    return {c["cluster_id"]: int(c.get("replicas", {}).get("ready", 0)) for c in status.get("clusters", [])}
