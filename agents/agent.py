"""The agent: one per GPU cluster. Wires the provider (eyes on the cloud), the replica backend
(hands on the engines: local processes or Kubernetes pods), the directive executor and the stream
to the scheduler, and runs the loops that keep them in step:

- discovery: ask the provider for the pools every ``discover_interval_s`` (sooner after a resize),
  turn pool problems and cloud errors into events, stop replicas whose node is gone;
- interruptions: poll spot notices (the cloud's, and the backend's signs of a node being reclaimed),
  tell the scheduler, drain the replicas on the doomed node so routers stop sending to them before
  the node goes (``agents.interruptions``);
- supervision: every ``supervise_interval_s`` look at the replicas (the runtime adapter restarts
  crashed engines itself), report state changes at once and load every ``report_interval_s``;
- the stream, which reconnects on its own.

Static stability: none of the first three depends on the stream. While the scheduler is away the
replicas keep serving and being supervised; reports simply wait for the next connection."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import pathlib
import random
import time
from collections.abc import Callable

import prometheus_client as prom

import meridian
from meridian import backoff as backoff_mod
from meridian import spec
from meridian.fleet import models
from meridian import waits

from agents import allocation, backends, directives, interruptions, metrics as metrics_mod
from agents import nodes, outbox as outbox_mod, providers, state, status as status_mod, stream
from agents.backends import local as local_backend
from agents.providers import base as provider_base
from agents.providers import sim as sim_provider
from agents.providers.errors import CloudError, CloudErrorKind

log = logging.getLogger(__name__)

AGENT_VERSION = f"meridian-agent/{meridian.__version__}"
# Notice lead kept for the node itself: drains end this long before a preempted node goes.
INTERRUPTION_MARGIN_S = 10.0
# The same cloud error is re-announced to the scheduler at most this often.
ERROR_EVENT_REPEAT_S = 60.0


@dataclasses.dataclass(frozen=True)
class AgentOptions:
    """Tuning the Cluster spec does not carry (defaults suit production; tests shrink them)."""

    discover_interval_s: float | None = None  # None: report_interval_s (sim) or max(15, it) (clouds)
    interruption_poll_s: float = 5.0
    supervise_interval_s: float = 0.5
    reconnect_initial_s: float = 0.5
    # The longest wait between reconnect attempts. After a scheduler restart the new leader waits
    # adopt_grace_s (15 s by default) for agents to report before it plans without their clusters
    # and re-places their replicas; with 30 s here an agent that failed a few attempts while the
    # scheduler was down could come back after that grace (seen in the e2e restart test: a draw of
    # 6.0 s of an 8-s ceiling against a 5-s grace, and one replica replaced).
    reconnect_max_s: float = 5.0
    welcome_timeout_s: float = 15.0
    ready_timeout_s: float = 3600.0
    adopt_settle_s: float = 15.0  # longest wait for re-adopted replicas' first probe before connecting
    status_host: str | None = None  # None: loopback when advertising loopback, else all interfaces
    serve_status: bool = True


class Agent:
    def __init__(self, cluster: spec.Cluster, *, token: str, provider: provider_base.Provider,
                 backend: backends.ReplicaBackend, state_dir: pathlib.Path,
                 options: AgentOptions = AgentOptions(), clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None, registry: prom.CollectorRegistry | None = None,
                 metrics: metrics_mod.AgentMetrics | None = None):
        s = cluster.spec
        self.cluster = cluster
        self.cluster_id = cluster.metadata.name
        self.identity = models.ClusterIdentity(self.cluster_id, models.Cloud(s.cloud), s.region, s.zone or "",
                                               AGENT_VERSION)
        self.options = options
        self._clock = clock
        self._rng = rng or random.Random()
        self.metrics = metrics or metrics_mod.AgentMetrics(self.cluster_id, registry)
        self.metrics.info.labels(self.cluster_id, s.provider_name, AGENT_VERSION).set(1)
        self.provider = provider
        self.replicas = backend
        self.journal = state.DirectiveJournal(state_dir / state.JOURNAL_FILE)
        self.outbox = outbox_mod.Outbox()
        self._declared = {p.name: p for p in s.pools}
        self._pools: dict[str, provider_base.PoolStatus] = {}
        self._discovered_once = False
        self._problems: dict[str, CloudErrorKind] = {}
        self._error_events: dict[tuple[str, str, str], float] = {}
        self.auth_failure = ""
        self.last_cloud_error = ""
        self._wake_discovery = asyncio.Event()
        self._first_discovery = asyncio.Event()  # set after the first discovery attempt, however it ended
        self._wake_supervision = asyncio.Event()
        self.interruptions = interruptions.Interruptions(
            self.cluster_id, provider=provider, backend=backend, emit=self._event, on_cloud_error=self._cloud_error,
            on_change=self._wake_supervision.set, clock=clock, margin_s=INTERRUPTION_MARGIN_S)
        if options.discover_interval_s is not None:
            self._discover_interval_s = options.discover_interval_s
        elif s.provider_name == "sim":
            self._discover_interval_s = s.agent.report_interval_s
        else:
            self._discover_interval_s = max(15.0, s.agent.report_interval_s)
        self.executor = directives.DirectiveExecutor(
            journal=self.journal, replicas=self.replicas, provider=provider, view=self.view, outbox=self.outbox,
            metrics=self.metrics, on_cloud_error=self._cloud_error, on_change=self._changed, clock=clock,
            ready_timeout_s=options.ready_timeout_s)
        self.stream = stream.StreamClient(
            address=s.scheduler.address, tls=s.scheduler.tls, token=token, identity=self.identity,
            journal=self.journal, outbox=self.outbox, on_directive=self.executor.handle, metrics=self.metrics,
            backoff=backoff_mod.Backoff(options.reconnect_initial_s, options.reconnect_max_s, rng=self._rng),
            heartbeat_interval_s=s.agent.heartbeat_interval_s, welcome_timeout_s=options.welcome_timeout_s,
            clock=clock)
        status_host = options.status_host or local_backend.bind_host_for(s.agent.advertise_host)
        preempt = self._sim_preempt if isinstance(provider, sim_provider.SimProvider) else None
        self.status_server = status_mod.StatusServer(self.metrics, self.status, host=status_host,
                                                     port=s.agent.metrics_port, preempt=preempt)
        self._tasks: list[asyncio.Task] = []
        self.adopted: list[str] = []

    def _sim_preempt(self, pool_id: str | None, notice_s: float | None) -> list[dict]:
        """Serve spot interruption notices in the simulated cloud (every running spot node, or those of
        ``pool_id``); the interruption loop then handles them as it would a real cloud's notice."""
        notices = self.provider.cloud.preempt_wave(pool_id, notice_s)
        self._wake_discovery.set()
        return [{"pool_id": n.pool_id, "node_id": n.node_id, "deadline": n.deadline} for n in notices]

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Re-adopt running replicas, then start every loop. Returns at once."""
        self.adopted, cleaned = await self.replicas.adopt()
        log.info("agent starting cluster=%s provider=%s adopted=%s cleaned=%s", self.cluster_id,
                 self.cluster.spec.provider_name, self.adopted, cleaned)
        if self.options.serve_status:
            await self.status_server.start()
        self._supervise_once(refresh=True)
        self._tasks = [
            asyncio.create_task(self._discover_loop(), name="agent-discover"),
            asyncio.create_task(self.interruptions.run(self.options.interruption_poll_s), name="agent-interruptions"),
            asyncio.create_task(self._supervise_loop(), name="agent-supervise"),
            asyncio.create_task(self._stream_after_adoption(), name="agent-stream"),
        ]

    async def _stream_after_adoption(self) -> None:
        """Connect once the cloud has been asked once and re-adopted replicas have been probed
        (bounded by ``adopt_settle_s``), so the first complete report after an agent restart shows
        the pools, and the replicas READY rather than STARTING (which would make routers stop
        sending to replicas that never stopped serving)."""
        deadline = time.monotonic() + self.options.adopt_settle_s
        while time.monotonic() < deadline and (not self._first_discovery.is_set() or any(
                (m := self.replicas.get(rid)) is not None and m.state == models.ReplicaState.STARTING
                for rid in self.adopted)):
            await asyncio.sleep(0.1)
        self._supervise_once(refresh=True)
        await self.stream.run()

    async def run(self, stop: asyncio.Event) -> None:
        """Start, serve until ``stop`` is set (or a loop dies), then shut down."""
        await self.start()
        stopper = asyncio.ensure_future(stop.wait())
        try:
            done, _ = await asyncio.wait([stopper, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopper and not task.cancelled() and task.exception() is not None:
                    log.error("agent loop died task=%s error=%r", task.get_name(), task.exception())
        finally:
            stopper.cancel()

    async def shutdown(self, *, stop_replicas: bool = False) -> None:
        """Stop the loops; detach the replicas (they keep serving and the next agent re-adopts
        them) or, with ``stop_replicas``, stop them."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.interruptions.close()
        await self.executor.close()
        await self.replicas.close(stop_replicas=stop_replicas)
        with contextlib.suppress(Exception):
            await self.provider.close()
        await self.status_server.stop()
        log.info("agent stopped cluster=%s replicas=%s", self.cluster_id, "stopped" if stop_replicas else "detached")

    # ------------------------------------------------------------------ views

    def view(self) -> directives.View:
        views = self.replicas.node_views()
        return directives.View(
            pools=dict(self._pools), declared=self._declared, holdings=tuple(self.replicas.holdings()),
            replicas={m.placement.replica_id: (m.placement.deployment, m.placement.revision, m.state)
                      for m in self.replicas.all()},
            noticed_nodes=self.interruptions.noticed_nodes(), node_sets=nodes.node_sets(self._pools, views),
            cloud_ids=nodes.cloud_ids(views))

    def inventory(self) -> list[models.GpuPool]:
        """The pools as reported: free GPUs are those no replica holds, on nodes that can take a replica
        (the backend's node list where it has one) and are not being preempted."""
        holdings = self.replicas.holdings()
        noticed = self.interruptions.noticed_nodes()
        sets = nodes.node_sets(self._pools, self.replicas.node_views())
        return [dataclasses.replace(st.pool, gpus_free=allocation.gpus_free(nodes.without(sets[pid], noticed), holdings))
                for pid, st in self._pools.items()]

    def status(self) -> dict:
        return {
            "cluster": self.cluster_id, "provider": self.cluster.spec.provider_name, "version": AGENT_VERSION,
            "scheduler": {"address": self.cluster.spec.scheduler.address, "connected": self.stream.connected,
                          "scheduler_id": self.stream.scheduler_id, "sessions": self.stream.sessions,
                          "last_error": self.stream.last_error},
            "cloud": {"auth_failure": self.auth_failure, "last_error": self.last_cloud_error,
                      "discovered": self._discovered_once},
            "pools": [dataclasses.asdict(p) for p in self.inventory()],
            "backend": self.replicas.status(),
            "replicas": [{"replica_id": r.replica_id, "state": r.state.value, "endpoint": r.endpoint,
                          "pool_id": r.pool_id, "restarts": r.restarts} for r in self.replicas.reports()],
            "interruptions": [dataclasses.asdict(n) for n in self.interruptions.notices.values()],
            "fencing_token": self.journal.fencing_token,
        }

    # ------------------------------------------------------------------ events

    def _event(self, event: models.Event) -> None:
        self.outbox.put_event(event)
        self.metrics.event(event.kind)

    def _cloud_error(self, err: CloudError, directive_id: str = "") -> None:
        """Count, log, surface and (rate-limited per operation/pool/kind) announce a cloud error."""
        self.metrics.cloud_error(err.operation or "unknown", err.kind.value)
        self.last_cloud_error = str(err)
        log.warning("cloud error cluster=%s %s", self.cluster_id, err)
        if err.kind == CloudErrorKind.AUTH_FAILURE:
            self.auth_failure = str(err)
            self.metrics.auth_failing.labels(self.cluster_id).set(1)
        kind = err.event_kind
        if kind is None:
            return
        key = (err.operation, err.pool_id, err.kind.value)
        now = self._clock()
        if not directive_id and now - self._error_events.get(key, -1e18) < ERROR_EVENT_REPEAT_S:
            return
        self._error_events[key] = now
        self._event(models.Event(kind, pool_id=err.pool_id, message=str(err), directive_id=directive_id))

    def _cloud_ok(self) -> None:
        if self.auth_failure:
            log.info("cloud authentication works again cluster=%s", self.cluster_id)
        self.auth_failure = ""
        self.metrics.auth_failing.labels(self.cluster_id).set(0)

    def _changed(self) -> None:
        """Something a directive did changed the cluster: rediscover and report now."""
        self._wake_discovery.set()
        self._wake_supervision.set()

    # ------------------------------------------------------------------ loops

    async def _sleep_or_wake(self, event: asyncio.Event, timeout_s: float) -> None:
        await waits.event_set(event, timeout_s)  # never asyncio.wait_for here: meridian.waits says why
        event.clear()

    async def _discover_loop(self) -> None:
        retry = backoff_mod.Backoff(self._discover_interval_s, max(300.0, self._discover_interval_s), rng=self._rng)
        while True:
            delay_s = self._discover_interval_s
            try:
                await self.discover_once()
                retry.reset()
            except CloudError as exc:
                self._cloud_error(exc.with_pool(exc.pool_id, exc.operation or "discover"))
                delay_s = retry.next_delay_s()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in a provider must not stop the agent; it is logged and counted
                log.exception("discovery failed cluster=%s", self.cluster_id)
                self.metrics.cloud_error("discover", CloudErrorKind.UNKNOWN.value)
                delay_s = retry.next_delay_s()
            self._first_discovery.set()
            await self._sleep_or_wake(self._wake_discovery, delay_s)

    async def discover_once(self) -> None:
        t0 = time.monotonic()
        statuses = await self.provider.discover()
        self.metrics.discover_seconds.labels(self.cluster_id).observe(time.monotonic() - t0)
        self._cloud_ok()
        self._pools = {st.pool.pool_id: st for st in statuses}
        self._discovered_once = True
        for st in statuses:
            self._pool_problem(st)
        await self._stop_lost_replicas()
        inventory = self.inventory()
        self.metrics.set_pools(inventory)
        self.outbox.set_inventory(inventory)

    def _pool_problem(self, st: provider_base.PoolStatus) -> None:
        pool_id = st.pool.pool_id
        if st.problem is None:
            if self._problems.pop(pool_id, None) is not None:
                log.info("pool problem cleared cluster=%s pool=%s", self.cluster_id, pool_id)
            return
        if self._problems.get(pool_id) != st.problem.kind:
            self._problems[pool_id] = st.problem.kind
            self._error_events.pop((st.problem.operation or "discover", pool_id, st.problem.kind.value), None)
        err = st.problem if st.problem.pool_id else st.problem.with_pool(pool_id)
        self._cloud_error(err if err.operation else err.with_pool(pool_id, "discover"))

    async def _stop_lost_replicas(self) -> None:
        if not self.replicas.nodes_listed():
            return  # a restarted agent may discover before its node list is in: not a verdict on any node
        present = nodes.present_nodes(self._pools, self.replicas.node_views())
        for m in self.replicas.all():
            pool = present.get(m.placement.pool_id)
            if pool is None or m.state not in backends.LIVE_STATES or m.placement.node_id in pool:
                continue
            note = f"node {m.placement.node_id} left pool {m.placement.pool_id}"
            log.warning("replica lost its node cluster=%s replica=%s %s", self.cluster_id, m.placement.replica_id, note)
            await self.replicas.stop(m.placement.replica_id, note=note)
            self._event(models.Event(models.EventKind.REPLICA_CRASH, pool_id=m.placement.pool_id,
                                     replica_id=m.placement.replica_id, message=note))
            self._wake_supervision.set()

    async def _supervise_loop(self) -> None:
        next_refresh = time.monotonic() + self.cluster.spec.agent.report_interval_s
        while True:
            await self._sleep_or_wake(self._wake_supervision, self.options.supervise_interval_s)
            refresh = time.monotonic() >= next_refresh
            if refresh:
                next_refresh = time.monotonic() + self.cluster.spec.agent.report_interval_s
            try:
                self._supervise_once(refresh)
            except Exception:
                log.exception("supervision pass failed cluster=%s", self.cluster_id)

    def _supervise_once(self, refresh: bool) -> None:
        for change in self.replicas.poll():
            log.info("replica state cluster=%s replica=%s from=%s to=%s", self.cluster_id, change.replica_id,
                     change.old.value, change.new.value)
            if change.crashed:
                m = self.replicas.get(change.replica_id)
                self._event(models.Event(models.EventKind.REPLICA_CRASH, replica_id=change.replica_id,
                                         pool_id=m.placement.pool_id if m else "",
                                         message=change.message.split("\n")[0][:500]))
        reports = self.replicas.reports()
        self.metrics.set_replicas([r.state for r in reports])
        self.outbox.set_replicas(reports, refresh=refresh)
        if self._discovered_once:
            inventory = self.inventory()
            self.metrics.set_pools(inventory)
            self.outbox.set_inventory(inventory)


def build(cluster: spec.Cluster, *, token: str, state_dir: pathlib.Path,
          replica_settings: backends.ReplicaSettings, provider: provider_base.Provider | None = None,
          provider_options: dict | None = None, backend_options: dict | None = None,
          options: AgentOptions = AgentOptions(), clock: Callable[[], float] = time.time,
          rng: random.Random | None = None, registry: prom.CollectorRegistry | None = None) -> Agent:
    """An agent for ``cluster`` with the provider and the replica backend its spec names (or the
    provider given). A sim cloud keeps its state in the agent's state directory, as a real cloud
    keeps its own across agent restarts. ``backend_options`` go to the backend's factory."""
    seed = cluster.spec.sim.seed if cluster.spec.provider_name == "sim" else None
    # The simulated cloud draws from its own source (per cluster, so clusters given one seed do not
    # preempt in lockstep): the agent's backoffs must not shift its draws.
    cloud_rng = random.Random(f"{cluster.metadata.name}/{seed}") if seed is not None and rng is None else None
    rng = rng or random.Random()
    state_dir.mkdir(parents=True, exist_ok=True)
    if provider is None:
        opts = dict(provider_options or {})
        if cluster.spec.provider_name == "sim":
            opts.setdefault("state_path", state_dir / "sim-cloud.json")
        provider = providers.create(cluster.spec.provider_name, cluster, clock=clock, rng=cloud_rng or rng, **opts)
    metrics = metrics_mod.AgentMetrics(cluster.metadata.name, registry)
    backend = backends.create(cluster.spec.replicas.backend, cluster, settings=replica_settings, state_dir=state_dir,
                              clock=clock, registry=metrics.registry, **(backend_options or {}))
    return Agent(cluster, token=token, provider=provider, backend=backend, state_dir=state_dir,
                 options=options, clock=clock, rng=rng, metrics=metrics)
