"""The control loop's side of rollouts (the executor of ``scheduler.rollout``'s decisions): keeps each
deployment's ``RolloutState`` between rounds, loads the records when a term starts, advances them
every round from the fleet view, the plan and the routers' per-revision traffic, stores what changed
(fenced: only the leader moves a rollout), exports the metrics, and hands the reconciler its splits
and the routing table its replicas out of traffic.

Records are written when something that matters changed (phase, step, revision, replica counts,
counted traffic) and otherwise, while the healthy-observation clock runs, at most every
``PERSIST_EVERY_S``; after a restart a step therefore re-observes at most that long."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping

from meridian import spec
from meridian.fleet import models as fm
from scheduler import metrics as metrics_mod
from scheduler import reconciler, rollout
from scheduler.control import fleet as fleet_mod
from scheduler.control import journal as journal_mod
from scheduler.reconciler import revisions
from scheduler.solver import problem
from scheduler.state import base, records

log = logging.getLogger("meridian.scheduler.rollouts")
PERSIST_EVERY_S = 10.0


class RolloutDriver:
    def __init__(self, *, log_store: records.RolloutLog, traffic: records.TrafficLog,
                 metrics: metrics_mod.SchedulerMetrics, journal: journal_mod.Journal | None = None):
        self._log = log_store
        self._journal = journal if journal is not None else journal_mod.Journal()
        self._traffic = traffic
        self._metrics = metrics
        self.states: dict[str, rollout.RolloutState] = {}
        self._saved: dict[str, tuple[str, str, float]] = {}  # name -> (material JSON, JSON, saved at)
        self._stable: dict[str, reconciler.DeploymentInfo | None] = {}  # stable_spec text -> its info

    async def load(self) -> int:
        """Take over the stored records (a new term resumes every rollout where it was)."""
        self.states, self._saved = {}, {}
        for name, text in sorted((await self._log.all()).items()):
            try:
                state = rollout.RolloutState.from_json(text)
            except ValueError as exc:
                self._metrics.errors.labels("rollout_record").inc()
                log.error("event=rollout_record_unreadable deployment=%s error=%r (starting afresh)", name, str(exc))
                continue
            self.states[name] = state
            self._saved[name] = (_material(state), text, float("-inf"))
        self._export()
        return len(self.states)

    def clear(self) -> None:
        self.states, self._saved = {}, {}

    # ------------------------------------------------------------ decisions applied

    def splits(self, infos: Mapping[str, reconciler.DeploymentInfo]) -> dict[str, reconciler.RevisionSplit]:
        """The reconciler's split of every deployment under rollout (none once complete)."""
        out = {}
        for name, state in self.states.items():
            info = infos.get(name)
            if info is None or state.phase is rollout.Phase.COMPLETE or state.revision != info.revision:
                continue
            old = self._stable_info(state)
            split = rollout.split_of(state, old) if old is not None else None
            if split is not None:
                out[name] = split
        return out

    def unrouted(self, infos: Mapping[str, reconciler.DeploymentInfo], snapshot: fleet_mod.FleetSnapshot,
                 draining: Collection[str]) -> set[str]:
        """Replicas the routing table leaves out: a rollout's side that takes no traffic now."""
        splits = self.splits(infos)
        if not splits:
            return set()
        mine = _by_deployment(r for _, r in snapshot.replicas() if r.replica_id not in draining)
        out: set[str] = set()
        for name, split in splits.items():
            out |= revisions.unrouted(split, infos[name], mine.get(name, ()))
        return out

    async def advance(self, infos: Mapping[str, reconciler.DeploymentInfo], snapshot: fleet_mod.FleetSnapshot,
                      placement: problem.Placement, draining: Collection[str], now_s: float,
                      fence: int) -> dict[str, reconciler.RevisionSplit]:
        """One round: every deployment's next state (``rollout.advance``), stored; returns the splits."""
        served = {name: info.doc.spec.model.served_name for name, info in infos.items()}
        windows = await self._traffic.revision_windows(set(served.values()))
        planned = rollout.planned_replicas(placement, (problem.pool_key(c.cluster_id, p.pool_id)
                                                       for c in snapshot.live() for p in c.pools.values()))
        mine = _by_deployment(r for _, r in snapshot.replicas()
                              if r.replica_id not in draining and r.state is not fm.ReplicaState.DRAINING)
        states: dict[str, rollout.RolloutState] = {}
        for name, info in sorted(infos.items()):
            obs = rollout.Observation(now_s, planned.get(name, 0), mine.get(name, ()),
                                      tuple(w for w in windows if w.model == served[name]))
            prev = self.states.get(name)
            states[name] = rollout.advance(prev, info, obs)
            self._transition(prev, states[name], now_s)
        removed = set(self.states) - set(states)
        self.states = states
        await self._persist(removed, now_s, fence)
        self._export(removed)
        return self.splits(infos)

    def status(self) -> list[dict]:
        return [rollout.view.view(s) for _, s in sorted(self.states.items())]

    # ------------------------------------------------------------ internals

    def _stable_info(self, state: rollout.RolloutState) -> reconciler.DeploymentInfo | None:
        if state.stable_spec not in self._stable:
            try:
                self._stable[state.stable_spec] = rollout.stable_info(state)
            except (spec.SpecError, ValueError) as exc:
                # Without the old spec the old side cannot be started or restored: the deployment
                # falls back to replacing other revisions as soon as replacements are ready.
                self._metrics.errors.labels("rollout_stable_spec").inc()
                log.error("event=rollout_stable_spec_invalid deployment=%s revision=%s error=%r",
                          state.deployment, state.stable_revision, str(exc)[:500])
                self._stable[state.stable_spec] = None
            if len(self._stable) > 256:  # specs seen over a long term: keep only the newest
                self._stable.pop(next(iter(self._stable)))
        return self._stable[state.stable_spec]

    def _transition(self, prev: rollout.RolloutState | None, state: rollout.RolloutState, now_s: float) -> None:
        name = state.deployment
        if prev is None or prev.revision != state.revision:
            if state.in_progress:
                log.info("event=rollout_started deployment=%s strategy=%s from=%s to=%s", name, state.strategy,
                         state.stable_revision, state.revision)
                self._journal.record(now_s, "rollout_started", subject=name,
                                     message=f"{state.strategy} from {state.stable_revision} to {state.revision}")
            elif prev is not None:
                log.info("event=rollout_skipped deployment=%s revision=%s reason=%r", name, state.revision,
                         state.reason)
            return
        if prev.phase is state.phase and prev.step == state.step:
            return
        if state.phase is rollout.Phase.ROLLED_BACK:
            self._metrics.rollbacks.labels(name, state.rollback_reason).inc()
            log.warning("event=rollout_rolled_back deployment=%s revision=%s restored=%s reason=%r", name,
                        state.revision, state.stable_revision, state.reason)
            self._journal.record(now_s, "rollout_rolled_back", subject=name,
                                 message=f"revision {state.revision} rolled back to {state.stable_revision}: "
                                         f"{state.reason}")
        elif state.phase is rollout.Phase.COMPLETE:
            log.info("event=rollout_complete deployment=%s revision=%s", name, state.revision)
            self._journal.record(now_s, "rollout_complete", subject=name, message=f"revision {state.revision}")
        else:
            log.info("event=rollout_step deployment=%s revision=%s step=%d new_percent=%d", name, state.revision,
                     state.step + 1, rollout.machine.new_percent(state))
            self._journal.record(now_s, "rollout_step", subject=name,
                                 message=f"revision {state.revision}: step {state.step + 1}, "
                                         f"{rollout.machine.new_percent(state)}% new")

    async def _persist(self, removed: Iterable[str], now_s: float, fence: int) -> None:
        changed: dict[str, str] = {}
        for name, state in self.states.items():
            text, material = state.to_json(), _material(state)
            saved = self._saved.get(name)
            if saved is None or saved[0] != material or (saved[1] != text and now_s - saved[2] >= PERSIST_EVERY_S):
                changed[name] = text
        removed = [n for n in removed if n in self._saved]
        if not changed and not removed:
            return
        try:
            await self._log.save(changed, removed, fence)
        except base.FencedOut:
            raise
        except base.StateError as exc:  # kept in memory; the next round writes again
            self._metrics.errors.labels("rollout_store").inc()
            log.error("event=rollout_store_error error=%r", str(exc))
            return
        for name, text in changed.items():
            self._saved[name] = (_material(self.states[name]), text, now_s)
        for name in removed:
            self._saved.pop(name, None)

    def _export(self, removed: Iterable[str] = ()) -> None:
        for name in removed:
            for gauge in (self._metrics.rollout_step, self._metrics.rollout_new_percent):
                try:
                    gauge.remove(name)
                except KeyError:
                    log.debug("event=rollout_gauge_absent deployment=%s", name)
        for name, state in self.states.items():
            self._metrics.rollout_step.labels(name).set(state.step + 1 if state.in_progress else 0)
            self._metrics.rollout_new_percent.labels(name).set(rollout.machine.new_percent(state))


def _material(state: rollout.RolloutState) -> str:
    """The record without its observation clock: what must be stored at once when it changes."""
    return dataclasses.replace(state, observed_s=0.0, healthy_at_s=None).to_json()


def _by_deployment(replicas: Iterable[fm.ReplicaReport]) -> dict[str, tuple[fm.ReplicaReport, ...]]:
    out: dict[str, list[fm.ReplicaReport]] = {}
    for r in replicas:
        out.setdefault(r.deployment, []).append(r)
    return {name: tuple(reps) for name, reps in out.items()}
