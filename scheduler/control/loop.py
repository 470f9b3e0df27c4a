"""The leader's control loop: autoscaler -> solver -> reconciler -> executor, once per tick
(``tick_interval_s``) and at once when something happens (an agent joins or is lost, a stock-out,
a spot notice, a spec change).

One ``tick``:
1. reload specs if their generation moved (and the cluster tokens they name); mark silent agents lost;
2. during the adoption grace after gaining leadership, stop here until every Cluster spec's agent
   has reported (or the grace ends): acting, or publishing routes, before would restart replicas
   that are running and hide them from routers. Until the first plan of the term, also wait (grace
   or not) for the first complete report of every agent connected now, for at most
   ``REPORT_WAIT_INTERVALS`` heartbeats after it connected: a plan made the instant an agent
   connects, before its inventory, knows neither its pools nor its replicas;
3. publish the routing table if routes changed; resolve open directives from reports (done,
   failed, expired);
4. run the autoscaler; re-plan (solver, on a worker thread) when its inputs changed, after a
   failure, or every ``plan_interval_s``;
5. advance every deployment's rollout (``scheduler.rollout``: canary steps, blue_green switch,
   rollback) and store it; reconcile the plan, split between revisions as the rollouts say, against
   the reported fleet and send the directives; a deployment the plan does not fully place keeps the
   replicas serving it (see ``reconciler.plan``).

Every input is injected (clock, store, transport, autoscaling policy), so the simulator can call
``tick()`` on a simulated clock."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import math
import os
from collections.abc import Callable, Mapping

from meridian import spec
from meridian.fleet import models as fm
from scheduler import autoscaler
from scheduler import clock as clock_mod
from scheduler import config as config_mod
from scheduler import metrics as metrics_mod
from scheduler import reconciler
from scheduler.control import events as events_mod
from scheduler.control import fleet as fleet_mod
from scheduler.control import planner, routes
from scheduler.control import rollouts as rollouts_mod
from scheduler.server import auth
from scheduler.solver import problem, throughput
from scheduler.state import base, records

log = logging.getLogger("meridian.scheduler.loop")
PRUNE_EVERY_S = 600.0  # closed directives older than directive_retention_s are forgotten this often
# An agent sends its inventory and replicas right after its Hello; one that has not within this many
# heartbeat intervals of first connecting is planned without (its pools and replicas count once they come).
REPORT_WAIT_INTERVALS = 3


@dataclasses.dataclass(frozen=True)
class PlanRecord:
    result: problem.PlacementResult
    problem: problem.PlacementProblem
    current: problem.Placement
    decisions: Mapping[str, autoscaler.Decision]
    at_s: float
    trigger: str
    inputs: tuple


@dataclasses.dataclass(frozen=True)
class TickReport:
    at_s: float
    stage: str  # standby, adopting, store_empty, no_plan, shadow, reconciled
    planned: str = ""  # the re-plan trigger, "" when the plan was kept
    sent: tuple[str, ...] = ()  # directive ids sent
    held: tuple[reconciler.Held, ...] = ()


class ControlLoop:
    def __init__(self, *, config: config_mod.SchedulerConfig, clock: clock_mod.Clock, spec_store: records.SpecStore,
                 traffic: records.TrafficLog, fleet: fleet_mod.FleetView, events: events_mod.EventTracker,
                 executor: reconciler.Executor, publisher: routes.RoutePublisher, metrics: metrics_mod.SchedulerMetrics,
                 tokens: auth.TokenBook, fence: Callable[[], int], on_fenced: Callable[[], None],
                 autoscaling: planner.Autoscaler | None = None, env: Mapping[str, str] | None = None,
                 solver_settings: problem.SolverSettings | None = None,
                 rollout_log: records.RolloutLog | None = None):
        self.config = config
        self._clock = clock
        self._specs_store = spec_store
        self._traffic = traffic
        self.fleet = fleet
        self.events = events
        self.executor = executor
        self._publisher = publisher
        self._metrics = metrics
        self._tokens = tokens
        self._fence = fence
        self._on_fenced = on_fenced
        self.autoscaler = autoscaling or planner.Autoscaler()
        # Rollout records live beside the specs they roll out, in the same store.
        self.rollouts = rollouts_mod.RolloutDriver(log_store=rollout_log or records.RolloutLog(spec_store.store),
                                                   traffic=traffic, metrics=metrics, journal=events.journal)
        self._env = env
        self._solver_settings = solver_settings
        self.settings = reconciler.ReconcileSettings(
            drain_deadline_s=config.drain_deadline_s, directives_per_min=config.cluster_directives_per_min,
            burst=config.cluster_directive_burst, pool_scale_down_delay_s=config.pool_scale_down_delay_s)
        self.specs = planner.SpecView.empty()
        self._infos: dict[str, reconciler.DeploymentInfo] = {}
        self.plan: PlanRecord | None = None
        self._full_at: float | None = None  # when the last full solve was planned (None: none this term)
        self.rstate = reconciler.ReconcileState()
        self._reach = reconciler.reach.ReachCache()
        self.adopt_until_s = 0.0
        self.last_tick: TickReport | None = None
        self._wake = asyncio.Event()
        self._stopped = False
        self._pruned_at = 0.0
        self._waiting_for: tuple[str, ...] = ()
        self._store_empty_logged = False
        # The stored specs' problems when they no longer validate (a rule added in an upgrade): the
        # loop keeps the set it had, none after a restart, and says why rather than "no specs".
        self._stored_invalid: list[str] = []
        self._unmet: dict[tuple[str, str, str], problem.Uncovered] = {}
        self._short: dict[tuple[str, str, str], problem.Unplaced] = {}

    # ------------------------------------------------------------ term

    async def start_term(self) -> None:
        """Called when this node becomes leader, before it accepts agents."""
        opened = await self.executor.load()
        rolling = await self.rollouts.load()
        self.rstate = reconciler.ReconcileState()
        self.plan = None
        self._full_at = None
        self.autoscaler = planner.Autoscaler(self.autoscaler.policy)
        self._publisher.reset()
        self.adopt_until_s = self._clock.now() + self.config.adopt_grace_s
        await self.refresh_specs(force=True)
        log.info("event=term_started open_directives=%d rollout_records=%d adopt_grace_s=%g deployments=%d "
                 "clusters=%d", opened, rolling, self.config.adopt_grace_s, len(self.specs.deployments),
                 len(self.specs.clusters))

    def end_term(self) -> None:
        self.executor.clear()
        self.rollouts.clear()
        self.fleet.clear()
        self.plan = None
        self.autoscaler = planner.Autoscaler(self.autoscaler.policy)  # a standby shows no stale decisions
        self._export_decisions({})

    def _export_decisions(self, decisions: Mapping[str, autoscaler.Decision]) -> None:
        """The autoscaler's gauges hold exactly ``decisions`` (a deployment gone has no series)."""
        self._metrics.desired_replicas.clear()
        self._metrics.slo_breach.clear()
        for name, decision in decisions.items():
            self._metrics.desired_replicas.labels(name).set(decision.replicas)
            self._metrics.slo_breach.labels(name).set(1 if decision.slo_breach else 0)

    def wake(self, why: str = "") -> None:
        self._wake.set()

    @property
    def solver_settings(self) -> problem.SolverSettings:
        """The settings the loop solves with (dry runs and SLA checks use the same)."""
        return self._solver_settings or problem.SolverSettings()

    # ------------------------------------------------------------ specs

    async def refresh_specs(self, force: bool = False) -> bool:
        gen = await self._specs_store.generation()
        if not force and gen == self.specs.generation:
            return False
        stored = await self._specs_store.all()
        try:
            spec_set = await asyncio.to_thread(records.spec_set, stored)
        except spec.SpecError as exc:
            self._metrics.errors.labels("stored_specs").inc()
            self._stored_invalid = [str(i) for i in exc.issues]
            log.error("event=stored_specs_invalid generation=%d errors=%r (keeping generation %d)", gen,
                      self._stored_invalid[:20], self.specs.generation)
            return False
        self._stored_invalid = []
        self.specs = planner.SpecView.of(spec_set, gen)
        if self.specs.policy is not None and self.specs.policy.spot.fallback == "none":
            log.warning("event=spot_fallback_unsupported generation=%d detail=%r", gen,
                        "spot.fallback 'none' is not implemented: lost spot capacity is replaced on demand")
        self._infos = {n: reconciler.DeploymentInfo.of(d) for n, d in self.specs.deployments.items()}
        env = self._env if self._env is not None else os.environ
        found, problems = await asyncio.to_thread(auth.resolve_cluster_tokens, list(self.specs.clusters.values()), env)
        self._tokens.set_cluster_tokens(found, problems)
        log.info("event=specs_loaded generation=%d deployments=%d clusters=%d policy=%s", gen,
                 len(self.specs.deployments), len(self.specs.clusters), self.specs.policy is not None)
        return True

    # ------------------------------------------------------------ tick

    async def tick(self) -> TickReport:
        fence = self._fence()
        now = self._clock.now()
        if not fence:
            report = TickReport(now, "standby")
            self.last_tick = report
            return report
        await self.refresh_specs()
        self.fleet.sweep(now)
        snapshot = self.fleet.snapshot(now)
        self._export(snapshot, now)
        waits = self._adoption_waits(snapshot, now)
        if waits:
            # Routers keep the last table and nothing is decided until agents have told what runs.
            waiting_for = tuple(w.cluster_id or "-" for w in waits)
            if waiting_for != self._waiting_for:
                log.info("event=adopting waiting_for=%s reasons=%r", ",".join(waiting_for),
                         [w.reason for w in waits][:10])
            self._waiting_for = waiting_for
            report = TickReport(now, "adopting", held=tuple(waits))
            self.last_tick = report
            return report
        self._waiting_for = ()
        self.events.prune({r.replica_id for _, r in snapshot.replicas()})
        open_dirs = self.executor.open_directives()
        draining = {od.directive.action.replica_id for od in open_dirs if isinstance(od.directive.action,
                                                                                      fm.DrainReplica)}
        unrouted = self.rollouts.unrouted(self._infos, snapshot, draining)
        await self._publisher.refresh(routes.build_models(snapshot, self.specs.deployments, draining, unrouted), fence)

        reported = [c for c in snapshot.live() if c.reported]
        observed = reconciler.Observed(
            {c.cluster_id for c in reported}, {r.replica_id: r for c in reported for r in c.replicas.values()},
            {problem.pool_key(c.cluster_id, p.pool_id): p for c in reported for p in c.pools.values()})
        await self.executor.resolve(observed, fence)
        if now - self._pruned_at >= PRUNE_EVERY_S:
            self._pruned_at = now
            gone = await self.executor.prune(now - self.config.directive_retention_s, fence)
            if gone:
                log.info("event=directives_pruned count=%d", gone)

        orphaned = self._empty_store_hold(snapshot)
        if orphaned:
            report = TickReport(now, "store_empty", held=orphaned)
            self.last_tick = report
            return report
        doomed = set(self.events.doomed)
        demand = await self._traffic.demand(now, self.config.demand_max_age_s)
        if self._fence() != fence:  # deposed while it read: a standby decides and exports nothing
            report = TickReport(now, "standby")
            self.last_tick = report
            return report
        # Replicas a rollout keeps out of traffic serve no demand: the autoscaler does not count them.
        decisions = self.autoscaler.decide(self.specs, snapshot, demand, now, doomed=doomed | unrouted)
        self._export_decisions(decisions)
        open_dirs = self.executor.open_directives()
        draining = {od.directive.action.replica_id for od in open_dirs if isinstance(od.directive.action,
                                                                                      fm.DrainReplica)}
        starts = [(od.cluster_id, od.directive.action) for od in open_dirs
                  if isinstance(od.directive.action, fm.StartReplica)]
        no_growth = self.events.no_growth(now)
        trigger = self._plan_trigger(snapshot, decisions, no_growth, doomed, now)
        if trigger:
            await self._replan(trigger, snapshot, decisions, starts, draining, doomed, no_growth, now)
        if self.plan is None:
            report = TickReport(now, "no_plan", trigger)
            self.last_tick = report
            return report

        splits = await self.rollouts.advance(self._infos, snapshot, self.plan.result.placement, draining, now, fence)
        inp = reconciler.ReconcileInput(
            now_s=now, target=self.plan.result.placement, deployments=self._infos,
            pools={problem.pool_key(c.cluster_id, p.pool_id): reconciler.PoolInfo(c.cluster_id, p)
                   for c in snapshot.live() for p in c.pools.values()},
            replicas=tuple(reconciler.ReplicaInfo(c.cluster_id, r, self.events.doomed_at(r.replica_id))
                           for c, r in snapshot.replicas()),
            open_directives=open_dirs, no_growth=no_growth,
            unplaced=reconciler.unplaced_deployments(self.plan.result, self._infos), rollouts=splits,
            reach=self._reach.of(self._infos, snapshot.pool_regions(), self.specs.latency_map))
        result = reconciler.reconcile(inp, self.rstate, self.settings, id_prefix=f"t{fence}")
        self.rstate = result.state
        for held in result.held:
            if held.reason == "rate limited":
                self._metrics.directives.labels(held.what.split(" ", 1)[0], "rate_limited").inc()
        if not self.config.directives_enabled:
            report = TickReport(now, "shadow", trigger, (), result.held + tuple(
                reconciler.Held(p.cluster_id, p.reason, "shadow mode: directives disabled") for p in result.directives))
            self.last_tick = report
            return report
        sent = await self.executor.execute(result.directives, fence)
        report = TickReport(now, "reconciled", trigger, tuple(r.directive_id for r in sent), result.held)
        self.last_tick = report
        return report

    def _empty_store_hold(self, snapshot: fleet_mod.FleetSnapshot) -> tuple[reconciler.Held, ...]:
        """A store that has never held a spec (spec generation 0) while agents report replicas was
        lost or is the wrong one: planning on it would drain every replica as deleted. Routes are
        still published (replicas without a spec keep serving, as ever); no directive is sent until
        specs are applied or a backup is imported."""
        replicas = snapshot.replicas()
        if self.specs.generation != 0 or not replicas:
            if self._store_empty_logged:
                log.info("event=store_specs_back generation=%d", self.specs.generation)
            self._store_empty_logged = False
            return ()
        clusters = sorted({c.cluster_id for c, _ in replicas})
        if self._stored_invalid:
            why = (f"the stored specs no longer validate ({len(self._stored_invalid)} problem(s), first: "
                   f"{self._stored_invalid[0]}; all in event=stored_specs_invalid) while agents report "
                   f"{len(replicas)} replica(s): nothing is drained or started (routes stay) until corrected specs "
                   f"are applied (meridian validate shows every problem; meridian apply the fixed files)")
        else:
            why = (f"the state store holds no specs (never applied here, or the store was lost) while agents report "
                   f"{len(replicas)} replica(s): nothing is drained or started (routes stay) until the specs are "
                   f"applied (meridian apply) or a backup is imported (meridian state import)")
        if not self._store_empty_logged:
            log.warning("event=store_empty replicas=%d clusters=%s detail=%r", len(replicas), ",".join(clusters), why)
            self._store_empty_logged = True
        return tuple(reconciler.Held(c, "every directive", why) for c in clusters)

    def _adoption_waits(self, snapshot: fleet_mod.FleetSnapshot, now: float) -> list[reconciler.Held]:
        """What this term still waits for before it acts, one entry per cluster (empty: nothing).

        During the grace: the complete report of every Cluster spec's agent. Until the first plan of
        the term, grace or not: the first complete report of every agent connected now, for at most
        ``REPORT_WAIT_INTERVALS`` heartbeats after its first Hello (an agent that connects and then
        says nothing is planned without, like one that never connects)."""
        waits: dict[str, reconciler.Held] = {}
        if now < self.adopt_until_s and not self._all_reported(snapshot):
            left_s = self.adopt_until_s - now
            for cid in sorted(self.specs.clusters):
                c = snapshot.clusters.get(cid)
                if c is None or not c.reported:
                    waits[cid] = reconciler.Held(cid, "act", f"adoption grace: waiting for this cluster's agent to "
                                                             f"report what runs ({left_s:.1f}s of grace left)")
            if not waits:
                waits[""] = reconciler.Held("", "act", f"adoption grace: no Cluster spec yet ({left_s:.1f}s left)")
        if self.plan is None:
            limit_s = REPORT_WAIT_INTERVALS * self.config.heartbeat_interval_s
            late: list[str] = []
            for c in sorted(snapshot.clusters.values(), key=lambda c: c.cluster_id):
                if not c.connected or c.reported or c.cluster_id in waits:
                    continue
                waited_s = now - c.first_connected_at_s
                if waited_s < limit_s:
                    waits[c.cluster_id] = reconciler.Held(
                        c.cluster_id, "first plan", f"waiting for its first complete report: connected {waited_s:.1f}s "
                                                    f"ago, planned without it after {limit_s:g}s")
                else:
                    late.append(c.cluster_id)
            if late and not waits:
                log.warning("event=planning_without clusters=%s reason='connected but no complete report within "
                            "%gs'", ",".join(late), limit_s)
        return list(waits.values())

    def _all_reported(self, snapshot: fleet_mod.FleetSnapshot) -> bool:
        expected = set(self.specs.clusters)
        return bool(expected) and all(
            (c := snapshot.clusters.get(cid)) is not None and c.reported for cid in expected)

    def _inputs(self, snapshot: fleet_mod.FleetSnapshot, decisions: Mapping[str, autoscaler.Decision],
                no_growth: Mapping[str, str], doomed: set[str]) -> tuple:
        pools = planner.pool_inputs(snapshot)
        wanted = tuple(sorted((n, tuple(sorted(d.replicas_by_region.items())), d.covered_regions)
                              for n, d in decisions.items()))
        return (self.specs.generation, pools, wanted, tuple(sorted(no_growth)), tuple(sorted(doomed)))

    def _plan_trigger(self, snapshot, decisions, no_growth, doomed, now: float) -> str:
        if self.plan is None:
            return "first plan of the term"
        old = self.plan.inputs
        new = self._inputs(snapshot, decisions, no_growth, doomed)
        names = ("specs changed", "pools changed", "autoscaler changed demand", "stock-out backoff changed",
                 "spot interruption")
        for what, a, b in zip(names, old, new, strict=True):
            if a != b:
                return what
        if self.plan.result.status in (problem.SolveStatus.ERROR, problem.SolveStatus.NO_SOLUTION):
            if now - self.plan.at_s >= min(self.config.plan_interval_s, 10.0):
                return "retry after a failed solve"
        if now - self.plan.at_s >= self.config.plan_interval_s:
            return "periodic"
        return ""

    async def _replan(self, trigger: str, snapshot, decisions, starts, draining, doomed, no_growth, now: float) -> None:
        current = planner.observed_placement(snapshot, starts, draining, doomed)
        held = planner.held_gpus_by_pool(snapshot, starts, draining, doomed)
        pools, excluded = planner.pool_offers(snapshot, self.specs, held_gpus=held, no_growth=no_growth)
        prob = planner.build_problem(self.specs, decisions, pools, excluded)
        warm = current
        if self.plan is not None and {k: v for k, v in self.plan.result.placement.replicas.items() if v} == \
                {k: v for k, v in current.replicas.items() if v}:
            warm = self.plan.result.placement  # has the per-region serving map: allows an incremental solve
        inputs = self._inputs(snapshot, decisions, no_growth, doomed)
        full = planner.full_solve_due(self._full_at, now, self.config.full_solve_interval_s,
                                      pools_before=self.plan.inputs[1] if self.plan is not None else (),
                                      pools_now=inputs[1])
        settings = planner.full_settings(self.solver_settings) if full else self.solver_settings
        try:
            result = await planner.solve_async(prob, time_limit_s=self.config.solve_time_limit_s, current=warm,
                                               settings=settings)
        except (ValueError, RuntimeError) as exc:
            self._metrics.plans.labels("error").inc()
            self._metrics.errors.labels("solver").inc()
            log.error("event=solve_error trigger=%r error=%r", trigger, str(exc))
            return
        self._metrics.plans.labels(result.status.value).inc()
        self._metrics.solve_seconds.observe(result.solve_time_s)
        if result.status is problem.SolveStatus.ERROR:
            log.error("event=solve_failed trigger=%r message=%r (keeping the previous plan)", trigger, result.message)
            if self.plan is not None:
                self.plan = dataclasses.replace(self.plan, at_s=now)
            return
        if full:
            self._full_at = now
        self.plan = PlanRecord(result, prob, current, dict(decisions), now, trigger, inputs)
        self._metrics.plan_cost_per_hour_usd.set(result.cost_per_hour_usd)
        self._export_unplaced(result)
        self._report_unmet(result)
        log.info("event=planned trigger=%r full=%s status=%s cost_per_hour_usd=%.2f solve_s=%.3f replicas=%d "
                 "unplaced=%d uncovered=%d", trigger, str(full).lower(), result.status.value, result.cost_per_hour_usd,
                 result.solve_time_s,
                 sum(result.placement.replicas.values()), len(result.unplaced), len(result.uncovered))

    # ------------------------------------------------------------ metrics

    def _export(self, snapshot: fleet_mod.FleetSnapshot, now: float) -> None:
        counts: collections.Counter = collections.Counter()
        for c, r in snapshot.replicas():
            pool = c.pools.get(r.pool_id)
            counts[(r.state.value, c.identity.cloud.value, c.identity.region, pool.gpu_type if pool else "")] += 1
        self._metrics.set_replicas(counts)
        clusters = snapshot.clusters.values()
        self._metrics.agents.labels("connected").set(sum(1 for c in clusters if c.connected))
        self._metrics.agents.labels("live").set(sum(1 for c in clusters if c.live))
        self._metrics.agents.labels("lost").set(sum(1 for c in clusters if c.lost))
        self._metrics.stocked_out_pools.set(len(self.events.no_growth(now)))

    def _report_unmet(self, result: problem.PlacementResult) -> None:
        """Every region whose SLA the plan does not meet, in the metric and, when it changes, in the
        log: uncovered regions (``event=sla_unmet``, and ``event=sla_met`` when one is covered again)
        and unplaced demand (``event=unplaced``), each with the constraint that binds."""
        unmet = {(u.deployment, u.client_region, u.constraint): u for u in result.uncovered}
        short = {(u.deployment, u.client_region, u.constraint): u for u in result.unplaced}
        self._metrics.set_unmet_sla(set(unmet) | set(short))
        for key, u in sorted(unmet.items()):
            if key not in self._unmet:
                log.warning("event=sla_unmet deployment=%s client_region=%s cause=%s served_from=%s detail=%r",
                            u.deployment, u.client_region, u.constraint, u.served_from or "-", u.reason)
        for key in sorted(set(self._unmet) - set(unmet)):
            log.info("event=sla_met deployment=%s client_region=%s was=%s", *key)
        for key, u in sorted(short.items()):
            if key not in self._short:
                log.warning("event=unplaced deployment=%s client_region=%s replicas=%g cause=%s detail=%r",
                            u.deployment, u.client_region, u.replicas, u.constraint, u.reason)
        self._unmet, self._short = unmet, short

    def _export_unplaced(self, result: problem.PlacementResult) -> None:
        replicas: dict[str, int] = {}
        rps: dict[tuple[str, str], float] = {}
        for u in result.unplaced:
            replicas[u.deployment] = replicas.get(u.deployment, 0) + math.ceil(u.replicas - 1e-9)
            dep = self.specs.deployments.get(u.deployment)
            cap = throughput.capacity_rps(dep.spec) if dep is not None else None
            if cap:
                rps[(u.deployment, u.client_region)] = rps.get((u.deployment, u.client_region), 0.0) + u.replicas * cap
        self._metrics.set_unplaced(replicas, rps)

    # ------------------------------------------------------------ run

    async def run(self) -> None:
        while not self._stopped:
            try:
                await self.tick()
            except base.FencedOut:
                log.warning("event=fenced_out where=tick: this node no longer holds the lease")
                self._on_fenced()
            except base.StateError as exc:
                self._metrics.errors.labels("state").inc()
                log.error("event=state_error where=tick error=%r", str(exc))
            except Exception:  # the loop must outlive any one bad round; logged and counted
                self._metrics.errors.labels("tick").inc()
                log.exception("event=tick_failed")
            await self._pause()

    async def _pause(self) -> None:
        if self._wake.is_set():
            self._wake.clear()
            await self._clock.sleep(0.05)  # coalesce a burst of wake-ups into one round
            return
        sleeper = asyncio.ensure_future(self._clock.sleep(self.config.tick_interval_s))
        waiter = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            waiter.cancel()
        self._wake.clear()

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()
