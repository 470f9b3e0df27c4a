"""The scheduler's control round on the simulated clock, from the scheduler's own pieces.

It does what ``scheduler.control.loop.ControlLoop.tick`` does, minus its I/O (state store,
directive log, gRPC transport, route publishing): agent messages update the real ``FleetView`` and
``EventTracker`` as ``scheduler.control.intake`` does; the real ``planner.Autoscaler`` decides per
deployment; the pool offers, the observed placement and the placement problem come from
``scheduler.control.planner``; a placer (the real solver, or a baseline rule) plans on the same
triggers as the loop (inputs changed, or every ``plan_interval_s``); and the real, pure
``reconciler.reconcile`` turns the plan into directives. Directives take effect at once in the
simulated clusters, so no directive is ever open between rounds."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping

from meridian import spec
from meridian.fleet import models as fm
from meridian.simulate import placement as placement_mod
from scheduler import config as config_mod
from scheduler import reconciler
from scheduler.control import events as events_mod
from scheduler.control import fleet as fleet_mod
from scheduler.control import planner
from scheduler.solver import problem
from scheduler.state import records

log = logging.getLogger("meridian.simulate.control")


@dataclasses.dataclass
class _Plan:
    outcome: placement_mod.PlanOutcome
    inputs: tuple
    at_s: float


@dataclasses.dataclass
class ControlStats:
    plans: int = 0
    plan_s: float = 0.0
    directives: int = 0
    refused: int = 0
    triggers: dict[str, int] = dataclasses.field(default_factory=dict)
    plan_cost_per_hour_usd: float = 0.0
    unplaced_replicas: float = 0.0


class SimScheduler:
    def __init__(self, specset: spec.SpecSet, placer: placement_mod.Placer,
                 config: config_mod.SchedulerConfig | None = None):
        self.config = config or config_mod.SchedulerConfig(scheduler_id="simulator")
        self.specs = planner.SpecView.of(specset, 1)
        self.infos = {n: reconciler.DeploymentInfo.of(d) for n, d in self.specs.deployments.items()}
        self.fleet = fleet_mod.FleetView(self.config.lost_after_s)
        self.events = events_mod.EventTracker(base_s=self.config.stock_out_backoff_s,
                                              max_s=self.config.stock_out_backoff_max_s)
        self.autoscaler = planner.Autoscaler()
        self.settings = reconciler.ReconcileSettings(
            drain_deadline_s=self.config.drain_deadline_s, directives_per_min=self.config.cluster_directives_per_min,
            burst=self.config.cluster_directive_burst, pool_scale_down_delay_s=self.config.pool_scale_down_delay_s)
        self.rstate = reconciler.ReconcileState()
        self._reach = reconciler.reach.ReachCache()
        self.placer = placer
        self.plan: _Plan | None = None
        self._full_at: float | None = None  # when the last full solve was planned
        self.stats = ControlStats()
        self.snapshot: fleet_mod.FleetSnapshot | None = None

    # ------------------------------------------------------------ agent messages (as intake does)

    def intake(self, identity: fm.ClusterIdentity, pools: list[fm.GpuPool], reports: list[fm.ReplicaReport],
               events: Iterable[fm.Event], now: float) -> bool:
        """One agent's report; True when it calls for a round now (the loop's wake-ups: an agent
        (re)connected, a pool stocked out, a spot notice or another event that asks for a plan)."""
        cid = identity.cluster_id
        wake = False
        known = self.fleet.snapshot(now).clusters.get(cid)
        if known is None or known.lost:
            self.fleet.connect(identity, now)
            wake = True
        old = self.fleet.pools_of(cid)
        for pool in pools:
            key = problem.pool_key(cid, pool.pool_id)
            prev = old.get(pool.pool_id)
            if pool.provisioning_state is fm.ProvisioningState.STOCKED_OUT and (
                    prev is None or prev.provisioning_state is not fm.ProvisioningState.STOCKED_OUT):
                self.events.stock_out(key, now, "pool reported stocked out")
                wake = True
            elif prev is not None and pool.nodes_current > prev.nodes_current:
                self.events.pool_grew(key)
        self.fleet.inventory(cid, pools, True, now)
        self.fleet.report(cid, reports, True, now)
        for event in events:
            wake = self.on_event(cid, event, now) or wake
        return wake

    def on_event(self, cluster_id: str, event: fm.Event, now: float) -> bool:
        self.fleet.seen(cluster_id, now)
        return self.events.on_event(cluster_id, event, now)

    # ------------------------------------------------------------ one round

    def watch(self, now: float) -> bool:
        """Between rounds: liveness and the fleet view only (routes follow every report); True when
        an agent was just found lost (the loop wakes for that)."""
        lost = self.fleet.sweep(now)
        self.snapshot = self.fleet.snapshot(now)
        return bool(lost)

    def tick(self, now: float, demand: list[records.Demand],
             preempted_zones: Mapping[str, float]) -> reconciler.ReconcileResult:
        self.fleet.sweep(now)
        snapshot = self.fleet.snapshot(now)
        self.snapshot = snapshot
        self.events.prune({r.replica_id for _, r in snapshot.replicas()})
        doomed = frozenset(self.events.doomed)
        decisions = self.autoscaler.decide(self.specs, snapshot, demand, now, doomed=doomed)
        no_growth = self.events.no_growth(now)
        inputs = self._inputs(snapshot, decisions, no_growth, doomed)
        trigger = self._trigger(inputs, now)
        if trigger:
            self._replan(trigger, snapshot, decisions, doomed, no_growth, preempted_zones, inputs, now)
        if self.plan is None:
            return reconciler.ReconcileResult((), (), self.rstate)
        inp = reconciler.ReconcileInput(
            now_s=now, target=self.plan.outcome.placement, deployments=self.infos,
            pools={problem.pool_key(c.cluster_id, p.pool_id): reconciler.PoolInfo(c.cluster_id, p)
                   for c in snapshot.live() for p in c.pools.values()},
            replicas=tuple(reconciler.ReplicaInfo(c.cluster_id, r, self.events.doomed_at(r.replica_id))
                           for c, r in snapshot.replicas()),
            open_directives=(), no_growth=no_growth,
            reach=self._reach.of(self.infos, snapshot.pool_regions(), self.specs.latency_map))
        result = reconciler.reconcile(inp, self.rstate, self.settings, id_prefix="sim")
        self.rstate = result.state
        self.stats.directives += len(result.directives)
        return result

    def _inputs(self, snapshot: fleet_mod.FleetSnapshot, decisions: Mapping, no_growth: Mapping[str, str],
                doomed: frozenset[str]) -> tuple:
        """What a plan depends on (the loop's own trigger inputs)."""
        pools = planner.pool_inputs(snapshot)
        wanted = tuple(sorted((n, tuple(sorted(d.replicas_by_region.items()))) for n, d in decisions.items()))
        return (self.specs.generation, pools, wanted, tuple(sorted(no_growth)), tuple(sorted(doomed)))

    def _trigger(self, inputs: tuple, now: float) -> str:
        if self.plan is None:
            return "first plan"
        if self.placer.every_round:
            return "every round"
        names = ("specs changed", "pools changed", "autoscaler changed demand", "stock-out backoff changed",
                 "spot interruption")
        for what, a, b in zip(names, self.plan.inputs, inputs, strict=True):
            if a != b:
                return what
        if now - self.plan.at_s >= self.config.plan_interval_s:
            return "periodic"
        return ""

    def _replan(self, trigger: str, snapshot: fleet_mod.FleetSnapshot, decisions: Mapping, doomed: frozenset[str],
                no_growth: Mapping[str, str], preempted_zones: Mapping[str, float], inputs: tuple,
                now: float) -> None:
        current = planner.observed_placement(snapshot, (), (), doomed)
        held = planner.held_gpus_by_pool(snapshot, (), (), doomed)
        offers, excluded = planner.pool_offers(snapshot, self.specs, held_gpus=held, no_growth=no_growth)
        warm = current
        if self.plan is not None and {k: v for k, v in self.plan.outcome.placement.replicas.items() if v} == \
                {k: v for k, v in current.replicas.items() if v}:
            warm = self.plan.outcome.placement
        full = planner.full_solve_due(self._full_at, now, self.config.full_solve_interval_s,
                                      pools_before=self.plan.inputs[1] if self.plan is not None else (),
                                      pools_now=inputs[1])
        view = placement_mod.PlanView(now, self.specs, decisions, snapshot, tuple(offers), excluded, current, warm,
                                      doomed, preempted_zones, full)
        outcome = self.placer.place(view)
        if full:
            self._full_at = now
        self.stats.plans += 1
        self.stats.plan_s += outcome.solve_s
        self.stats.triggers[trigger] = self.stats.triggers.get(trigger, 0) + 1
        self.stats.plan_cost_per_hour_usd = outcome.cost_per_hour_usd
        self.stats.unplaced_replicas = outcome.unplaced_replicas
        self.plan = _Plan(outcome, inputs, now)
        log.debug("event=planned trigger=%r cost_per_hour_usd=%.2f replicas=%d", trigger, outcome.cost_per_hour_usd,
                  sum(outcome.placement.replicas.values()))
