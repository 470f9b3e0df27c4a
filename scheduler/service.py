"""One scheduler process: the state store, leader election, the gRPC server (agents, routers), the
admin API and the control loop, wired together.

Every node serves the admin API and routers; only the leader accepts agents and sends directives.
On gaining the lease a node loads the open directives and the specs, resets its routing publisher,
and then (only then) accepts agent streams; on losing it, it closes every agent stream (agents
reconnect to the new leader) and forgets its fleet view."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping

import grpc
from aiohttp import web

from meridian import limits, redisconn
from meridian import tls as tls_files
from meridian.v1 import capacity_pb2_grpc, routing_pb2_grpc
from scheduler import clock as clock_mod
from scheduler import config as config_mod
from scheduler import metrics as metrics_mod
from scheduler import reconciler, state
from scheduler.admin import api as admin_api
from scheduler.admin import cost as cost_api
from scheduler.control import billing, routes
from scheduler.control import events as events_mod
from scheduler.control import fleet as fleet_mod
from scheduler.control import intake as intake_mod
from scheduler.control import journal as journal_mod
from scheduler.control import loop as loop_mod
from scheduler.server import agents, auth, capacity, routing, tls
from scheduler.solver import problem
from scheduler.state import election, records

log = logging.getLogger("meridian.scheduler.service")
# The most each shutdown step after the lease's release may take (see SchedulerService.stop).
STOP_STEP_S = 10.0
# The grace the gRPC server gets on stop (streams close, in-flight calls finish).
STOP_GRPC_GRACE_S = 2.0


def stop_worst_case_s(grace_s: float = STOP_GRPC_GRACE_S) -> float:
    """The longest ``SchedulerService.stop`` can take: each of its five steps overrunning to its
    bound (the resign, the tasks, the gRPC server with ``grace_s``, the admin server, the store). A
    pod's terminationGracePeriodSeconds must outlast it, or the kubelet kills a scheduler that is
    still releasing its lease (deploy/kubernetes/base/scheduler/scheduler.yaml)."""
    return 4 * STOP_STEP_S + grace_s + STOP_STEP_S


class SchedulerService:
    def __init__(self, config: config_mod.SchedulerConfig, *, clock: clock_mod.Clock | None = None,
                 store: state.StateStore | None = None, env: Mapping[str, str] | None = None,
                 tokens: auth.TokenBook | None = None, admin_auth: auth.AdminAuth | None = None):
        self.config = config
        self.metrics = metrics_mod.SchedulerMetrics()
        # TLS files first: a bad certificate stops the process before any state is opened.
        self.grpc_tls = tls.load(config, on_error=lambda where: self.metrics.errors.labels(f"grpc_{where}").inc())
        self.admin_tls = (tls_files.ServerTls(
            config.admin_tls_cert_file, config.admin_tls_key_file, reload_interval_s=config.admin_tls_reload_interval_s,
            on_error=lambda where: self.metrics.errors.labels(f"admin_{where}").inc(),
            cert_setting="admin_tls_cert_file (--admin-tls-cert-file)",
            key_setting="admin_tls_key_file (--admin-tls-key-file)")
            if config.admin_tls_cert_file and config.admin_tls_key_file else None)
        self.clock = clock or clock_mod.SystemClock()
        self.env = env
        tokens_file = auth.TokensFile.load(config.tokens_file) if config.tokens_file else None
        self.tokens = tokens or auth.TokenBook(tokens_file, env=env)
        self.admin_auth = admin_auth or auth.AdminAuth.load(token_file=config.admin_token_file, env=env,
                                                            tokens_file=tokens_file)
        self.store = store or state.open_store(config.state_url, namespace=config.namespace, clock=self.clock,
                                               replica_acks=config.state_replica_acks)
        self.spec_store = records.SpecStore(self.store)
        self.traffic = records.TrafficLog(self.store)
        self.routing_store = records.RoutingStore(self.store)
        self.hub = agents.AgentHub()
        self.route_hub = routing.RouteHub()
        self.journal = journal_mod.Journal()  # recent events (GET /v1/events), fed by the fleet view and events
        self.fleet = fleet_mod.FleetView(config.lost_after_s, journal=self.journal)
        self.events = events_mod.EventTracker(base_s=config.stock_out_backoff_s, max_s=config.stock_out_backoff_max_s,
                                              journal=self.journal)
        self.executor = reconciler.Executor(
            log_store=records.DirectiveLog(self.store), transport=self.hub, clock=self.clock, metrics=self.metrics,
            timeouts=reconciler.Timeouts(ack_s=config.ack_timeout_s, start_s=config.start_timeout_s))
        self.publisher = routes.RoutePublisher(store=self.routing_store, hub=self.route_hub, clock=self.clock,
                                               scheduler_id=config.scheduler_id,
                                               load_refresh_s=config.routes_load_refresh_s, metrics=self.metrics)
        self.loop = loop_mod.ControlLoop(
            config=config, clock=self.clock, spec_store=self.spec_store, traffic=self.traffic, fleet=self.fleet,
            events=self.events, executor=self.executor, publisher=self.publisher, metrics=self.metrics,
            tokens=self.tokens, fence=lambda: self.token, on_fenced=self._fenced, env=env,
            solver_settings=problem.SolverSettings(ttft_headroom_ms=config.ttft_headroom_ms,
                                                  backend=config.solver_backend))
        self.intake = intake_mod.Intake(fleet=self.fleet, executor=self.executor, events=self.events,
                                        metrics=self.metrics, fence=lambda: self.token, wake=self.loop.wake,
                                        on_fenced=self._fenced)
        advertise = config.advertise_grpc_address or config.grpc_address
        self.elector = election.LeaderElector(
            self.store, config.scheduler_id, ttl_s=config.lease_ttl_s, renew_interval_s=config.lease_renew_interval_s,
            poll_interval_s=config.standby_poll_interval_s, clock=self.clock,
            meta={"grpc": advertise, "admin": config.admin_address}, on_elected=self._elected,
            on_deposed=self._deposed, on_error=lambda where: self.metrics.errors.labels(where).inc())
        self.meter = billing.CostMeter()
        self._term_token = 0
        self._leader: state.Lease | None = None
        self._grpc: grpc.aio.Server | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task] = []
        self.grpc_port = 0
        self.admin_port = 0
        self._stopping = False
        self._stopped_cleanly = True

    # ------------------------------------------------------------ leadership (for the gRPC edge)

    @property
    def token(self) -> int:
        """Fencing token while this node leads *and* has finished taking over; else 0."""
        return self._term_token if self.elector.token == self._term_token else 0

    def leader_hint(self) -> str:
        lease = self._leader
        return lease.meta.get("grpc", "") if lease is not None else ""

    async def _elected(self, lease: state.Lease) -> None:
        self.metrics.leader_changes.labels("leader").inc()
        try:
            await self.loop.start_term()
        except state.StateError as exc:
            self.metrics.errors.labels("term_start").inc()
            log.error("event=term_start_failed error=%r; resigning", str(exc))
            await self.elector.resign()
            return
        self._term_token = lease.token
        self._leader = lease
        self.meter.reset()
        self.metrics.is_leader.set(1)
        self.metrics.fencing_token.set(lease.token)
        self.loop.wake("elected")
        log.info("event=leading scheduler=%s token=%d", self.config.scheduler_id, lease.token)

    async def _deposed(self, lease: state.Lease) -> None:
        self._term_token = 0
        self.metrics.is_leader.set(0)
        self.metrics.fencing_token.set(0)
        self.metrics.leader_changes.labels("standby").inc()
        self.hub.close_all("this scheduler is no longer the leader")
        self.loop.end_term()
        self.meter.reset()
        self.metrics.set_bill({})
        log.warning("event=standing_down scheduler=%s token=%d", self.config.scheduler_id, lease.token)

    def _fenced(self) -> None:
        """The store refused a fenced write: another node leads. Stop acting at once; the elector
        confirms on its next round."""
        if self._term_token:
            log.warning("event=fenced scheduler=%s token=%d", self.config.scheduler_id, self._term_token)
            self._term_token = -1  # never equal to a real token

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        # Messages in are bounded as every agent and router message is small; out, a routing table
        # of a large fleet may be bigger (routers receive up to the same bound).
        self._grpc = grpc.aio.server(options=[("grpc.keepalive_time_ms", 20_000),
                                              ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
                                              ("grpc.keepalive_permit_without_calls", 1),
                                              *limits.grpc_options(limits.GRPC_MAX_MESSAGE_BYTES,
                                                                   limits.GRPC_MAX_ROUTING_TABLE_BYTES)])
        capacity_pb2_grpc.add_CapacityServiceServicer_to_server(capacity.CapacityServicer(
            scheduler_id=self.config.scheduler_id, leadership=self, tokens=self.tokens, hub=self.hub,
            sink=self.intake, metrics=self.metrics, clock=self.clock,
            heartbeat_interval_s=self.config.heartbeat_interval_s), self._grpc)
        routing_pb2_grpc.add_RoutingServiceServicer_to_server(routing.RoutingServicer(
            hub=self.route_hub, tokens=self.tokens, traffic=self, metrics=self.metrics, clock=self.clock), self._grpc)
        if self.grpc_tls is None:
            self.grpc_port = self._grpc.add_insecure_port(self.config.grpc_address)
        else:
            self.grpc_port = self._grpc.add_secure_port(self.config.grpc_address, self.grpc_tls.credentials())
        if not self.grpc_port:
            raise OSError(f"cannot listen on grpc_address {self.config.grpc_address}")
        await self._grpc.start()
        tls.log_mode(self.grpc_tls, self.config.grpc_address, self.grpc_port)
        advertise = self.config.advertise_grpc_address or self.config.grpc_address
        host, port = advertise.rsplit(":", 1)
        if port == "0":  # asked for any free port: advertise the one bound
            self.elector.meta["grpc"] = f"{host}:{self.grpc_port}"
        app = admin_api.build_app(admin_api.AdminContext(
            spec_store=self.spec_store, traffic=self.traffic, loop=self.loop, tokens=self.tokens,
            admin_auth=self.admin_auth, metrics=self.metrics, clock=self.clock, status=self.status,
            is_leader=lambda: bool(self.token), solve_time_limit_s=self.config.solve_time_limit_s, meter=self.meter,
            floors=cost_api.FloorCache(self.config.solve_time_limit_s,
                                       on_error=lambda where: self.metrics.errors.labels(where).inc()),
            env=self.env, journal=self.journal))
        # aiohttp's own wait for in-flight admin requests ends before the stop step's limit.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=STOP_STEP_S / 2)
        await self._runner.setup()
        host, port = self.config.admin_address.rsplit(":", 1)
        site = web.TCPSite(self._runner, host, int(port),
                           ssl_context=self.admin_tls.context if self.admin_tls is not None else None)
        await site.start()
        self.admin_port = self._runner.addresses[0][1]  # the real port when 0 was asked
        if int(port) == 0:
            self.elector.meta["admin"] = f"{host}:{self.admin_port}"
        stored = await self.routing_store.load()
        if stored is not None:
            self.route_hub.publish(stored)
        self._log_admin_mode(host)
        self._tasks = [asyncio.create_task(self.elector.run(), name="elector"),
                       asyncio.create_task(self.loop.run(), name="control-loop"),
                       asyncio.create_task(self._standby_duties(), name="standby"),
                       asyncio.create_task(self._meter_duties(), name="cost-meter")]
        if self.admin_tls is not None:
            self._tasks.append(asyncio.create_task(
                self.admin_tls.watch(self.clock.sleep), name="admin-tls-reload"))
        if self.grpc_tls is not None:
            self._tasks.append(asyncio.create_task(self.grpc_tls.files.watch(self.clock.sleep), name="grpc-tls-reload"))
        log.info("event=started scheduler=%s grpc_port=%d admin_port=%d state=%s", self.config.scheduler_id,
                 self.grpc_port, self.admin_port, redisconn.parse(self.config.state_url).describe()
                 if "redis" in self.config.state_url.split("://", 1)[0] else self.config.state_url)

    def _log_admin_mode(self, host: str) -> None:
        """One line on how the admin API is secured; a warning when plain HTTP is reachable from
        other machines (admin tokens would cross the network in the clear)."""
        if self.admin_tls is not None:
            log.info("event=admin_tls mode=on address=%s port=%d", host, self.admin_port)
        elif tls.is_loopback(host):
            log.info("event=admin_tls mode=off address=%s port=%d", host, self.admin_port)
        else:
            log.warning("event=admin_insecure address=%s port=%d detail=%r", host, self.admin_port,
                        "plain HTTP admin API on a non-loopback address: admin tokens cross the network unencrypted; "
                        "set --admin-tls-cert-file and --admin-tls-key-file")

    async def _standby_duties(self) -> None:
        """Learn who leads (for redirects and status) and, while standing by, follow the routing
        table the leader stores so routers connected here stay current."""
        while True:
            try:
                self._leader = await self.store.lease()
                if not self.token:
                    await self.publisher.follow()
            except state.StateError as exc:
                self.metrics.errors.labels("standby").inc()
                log.warning("event=standby_error error=%r", str(exc))
            await self.clock.sleep(self.config.standby_poll_interval_s)

    async def _meter_duties(self) -> None:
        """While leading: observe the bill every tick interval, for ``GET /v1/cost``'s bill since this
        node leads and the bill gauges."""
        while True:
            if self.token:
                now = self.clock.now()
                try:
                    demand = await self.traffic.demand(now, self.config.demand_max_age_s)
                except state.StateError as exc:
                    self.metrics.errors.labels("cost_meter").inc()
                    log.warning("event=cost_meter_error error=%r", str(exc))
                    demand = []
                fleet_bill = billing.bill_now(self.fleet.snapshot(now), self.loop.specs)
                self.meter.observe(now, fleet_bill.reachable, billing.tokens_per_s(demand))
                self.metrics.set_bill(billing.by_cloud_tier_part(fleet_bill.reachable))
            await self.clock.sleep(self.config.tick_interval_s)

    async def stop(self, grace_s: float = STOP_GRPC_GRACE_S) -> bool:
        """Resign the lease (a standby takes over at once), then close everything. Idempotent.

        Each step (the resign; the service's tasks; the gRPC server, ``grace_s`` plus STOP_STEP_S;
        the admin HTTP server; the store) gets at most STOP_STEP_S. One that overruns
        or fails is logged by name (``event=stop_overran``, ``event=stop_failed``), counted, and
        left behind, and the other steps still run. Returns False when a step was left behind: a
        task that ignores its cancellation would then hold the process at exit (asyncio waits for
        every task), and the caller exits at once instead (``meridian scheduler`` does)."""
        if self._stopping:
            return self._stopped_cleanly
        self._stopping = True
        self.loop.stop()
        clean = False  # until the resign below returns
        try:
            # The lease's release waits on the store; one that does not answer (Redis accepting the
            # connection and never replying) must not hold the shutdown: a standby then takes over
            # when the lease lapses, as after a crash.
            clean = await self._bounded(self.elector.resign(), "resign", STOP_STEP_S)
        finally:
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                _, pending = await asyncio.wait(self._tasks, timeout=STOP_STEP_S)
                if pending:
                    clean = self._overran("tasks " + ",".join(sorted(t.get_name() for t in pending)), STOP_STEP_S)
            self.hub.close_all("scheduler shutting down")
            if self._grpc is not None:
                clean &= await self._bounded(self._grpc.stop(grace_s), "grpc_server", grace_s + STOP_STEP_S)
            if self._runner is not None:
                clean &= await self._bounded(self._runner.cleanup(), "admin_http", STOP_STEP_S)
            clean &= await self._bounded(self.store.close(), "store", STOP_STEP_S)
            self._stopped_cleanly = clean
        log.info("event=stopped scheduler=%s clean=%s", self.config.scheduler_id, clean)
        return clean

    async def _bounded(self, step, name: str, limit_s: float) -> bool:
        """Run one shutdown step for at most ``limit_s``; a step still running then is cancelled
        and not waited for (waiting is what could hang). False when it overran or failed."""
        task = asyncio.ensure_future(step)
        done, _ = await asyncio.wait({task}, timeout=limit_s)
        if not done:
            task.cancel()
            return self._overran(name, limit_s)
        if not task.cancelled() and task.exception() is not None:
            self.metrics.errors.labels("stop_failed").inc()
            log.error("event=stop_failed scheduler=%s step=%r error=%r", self.config.scheduler_id, name,
                      str(task.exception()))
            return False
        return True

    def _overran(self, step: str, limit_s: float) -> bool:
        self.metrics.errors.labels("stop_overran").inc()
        log.warning("event=stop_overran scheduler=%s step=%r limit_s=%g: left behind", self.config.scheduler_id,
                    step, limit_s)
        return False

    # ------------------------------------------------------------ traffic sink, status

    async def record_traffic(self, report, now_s: float) -> int:
        return await self.traffic.record(report, now_s)

    async def status(self) -> dict:
        now = self.clock.now()
        snap = self.fleet.snapshot(now)
        plan = self.loop.plan
        tick = self.loop.last_tick
        lease = self._leader
        return {
            "scheduler_id": self.config.scheduler_id,
            "leader": bool(self.token),
            "fencing_token": self.token,
            "grpc_tls": self.grpc_tls.mode if self.grpc_tls is not None else "off",
            "admin_tls": "on" if self.admin_tls is not None else "off",
            "current_leader": {"id": lease.holder, "token": lease.token, **dict(lease.meta)} if lease else None,
            "adopting": bool(self.token) and (now < self.loop.adopt_until_s or (tick is not None and tick.stage == "adopting")),
            "spec_generation": self.loop.specs.generation,
            "routing_version": self.route_hub.version,
            "clusters": [{"cluster_id": c.cluster_id, "cloud": c.identity.cloud.value, "region": c.identity.region,
                          "connected": c.connected, "lost": c.lost, "reported": c.reported,
                          "silent_s": round(now - c.last_seen_s, 1), "pools": len(c.pools),
                          "replicas": _count_states(c), "pool_details": _pool_details(c),
                          "replica_details": _replica_details(c)}
                         for c in sorted(snap.clusters.values(), key=lambda c: c.cluster_id)],
            # The autoscaler's last decision per deployment (the leader's; empty on a standby).
            "autoscaling": {name: d.view() for name, d in sorted(self.loop.autoscaler.decisions.items())},
            "plan": None if plan is None else {
                "status": plan.result.status.value, "at": plan.at_s, "trigger": plan.trigger,
                "cost_per_hour_usd": round(plan.result.cost_per_hour_usd, 4),
                "solve_time_s": round(plan.result.solve_time_s, 4), "placement": plan.result.placement.to_dict(),
                "unplaced": [{"deployment": u.deployment, "client_region": u.client_region,
                              "replicas": round(u.replicas, 3), "constraint": u.constraint, "reason": u.reason}
                             for u in plan.result.unplaced],
                "uncovered": [{"deployment": u.deployment, "client_region": u.client_region,
                               "constraint": u.constraint, "reason": u.reason, "served_from": u.served_from}
                              for u in plan.result.uncovered],
                "unhedged": [dataclasses.asdict(u) for u in plan.result.unhedged]},
            "open_directives": [{"id": r.directive_id, "cluster_id": r.cluster_id, "status": r.status.value,
                                 "action": records.action_name(r.directive.action), "age_s": round(now - r.created_at, 1)}
                                for r in self.executor.open_records()[:100]],
            "held": [{"cluster_id": h.cluster_id, "what": h.what, "reason": h.reason}
                     for h in (tick.held[:100] if tick else ())],
            "stocked_out_pools": self.events.no_growth(now),
            "doomed_replicas": {k: round(v - now, 1) for k, v in self.events.doomed.items()},
            "rollouts": self.loop.rollouts.status(),  # the leader's; any node: GET /v1/specs/ModelDeployment/NAME
            "cluster_token_problems": dict(self.tokens.problems),
        }


def _count_states(c: fleet_mod.ClusterView) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in c.replicas.values():
        out[r.state.value] = out.get(r.state.value, 0) + 1
    return out


def _pool_details(c: fleet_mod.ClusterView) -> list[dict]:
    """The cluster's GPU pools as last reported (what the operator surface and the demo show)."""
    return [{"pool_id": p.pool_id, "gpu_type": p.gpu_type, "tier": p.tier.value, "instance_type": p.instance_type,
             "gpus_per_node": p.gpus_per_node, "nodes_current": p.nodes_current, "nodes_max": p.nodes_max,
             "gpus_free": p.gpus_free, "price_per_node_hour_usd": p.price_per_node_hour_usd,
             "provisioning_state": p.provisioning_state.value} for _, p in sorted(c.pools.items())]


def _replica_details(c: fleet_mod.ClusterView) -> list[dict]:
    """The cluster's replicas as last reported, with their load summary."""
    return [{"replica_id": r.replica_id, "deployment": r.deployment, "served_model_name": r.served_model_name,
             "state": r.state.value, "pool_id": r.pool_id, "gpu_count": r.gpu_count, "endpoint": r.endpoint,
             "revision": r.revision, "running": r.load.running_requests, "queued": r.load.queued_requests,
             "ttft_p99_ms": round(r.load.ttft.p99_ms, 1),
             # None: the replica's engine or agent does not report its queue time.
             "queue_time_p90_ms": round(r.load.queue_time.p90_ms, 1) if r.load.queue_time is not None else None}
            for _, r in sorted(c.replicas.items())]

