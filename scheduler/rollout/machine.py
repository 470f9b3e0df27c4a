"""The rollout state machine (pure): a deployment's last ``RolloutState`` and what this round
observes -> its next state; ``split_of`` turns a state into the reconciler's ``RevisionSplit``.

Rules (``obs.now_s`` is the injected clock; N is the plan's replicas for the deployment):
- A change of the applied spec's replica revision starts a rollout from what serves now: the old
  side is every replica of another revision (it starts, when it must, from ``stable_spec``, the last
  spec fully rolled out). Nothing to replace (no replica of another revision STARTING or READY), or a
  return to the stable revision, completes at once; so does a first record (there is no older spec
  to roll from).
- canary: step i gives the new revision ``steps_percent[i]`` of N (rounded up, at least one), the old
  side the rest. A step advances once its new replicas have been READY (all of its share) for
  ``step_duration_s`` of observation (a round that finds them short pauses the count, and the
  interval before it does not count) and the step's signals pass. At 100% the old side drains; the
  rollout completes when no old replica is left.
- blue_green: step 0 runs N new replicas beside the old N, out of traffic; once all N are READY for
  ``step_duration_s`` and the signals pass, step 1 switches traffic and the old set drains; complete
  when it is gone. ``steps_percent`` does not apply.
- Rollback: the new revision's error rate over the step (router-reported errors / requests) above
  ``rollback.error_rate``, or the worst p99 TTFT its READY replicas reported during the step above
  ``rollback.ttft_p99_ms`` (when set), or no progress: a step not done ``step_duration_s`` +
  ``progress_deadline_s`` after it began (new replicas crashing, or no GPUs for them; at the last
  step only while new replicas are short, not while old ones drain). Judged at the end of each step's observation, and at any round
  once the step has counted ``EARLY_VERDICT_MIN_REQUESTS`` requests (so a few early errors do not
  decide). A breach moves to ROLLED_BACK with the reason: the new revision is withdrawn and the
  stable one restored to N, until a newer apply.
- The spec's ``steps_percent``, ``step_duration_s`` and thresholds are read every round (changing
  them does not change the revision); the strategy is the one the rollout started with."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from meridian import spec
from meridian.fleet import models as fm
from meridian.spec import deployment as deployment_spec
from scheduler.reconciler import types as rt
from scheduler.rollout import state as st
from scheduler.solver import problem
from scheduler.state import records

EARLY_VERDICT_MIN_REQUESTS = 50
_LIVE = (fm.ReplicaState.STARTING, fm.ReplicaState.READY)


@dataclasses.dataclass(frozen=True)
class Observation:
    """One round's view of a deployment: ``planned_replicas`` (N, the plan's target on live pools),
    ``replicas``: its reported replicas not being drained, ``windows``: router traffic windows of its
    served model that name a revision (``records.TrafficLog.revision_windows``)."""

    now_s: float
    planned_replicas: int
    replicas: tuple[fm.ReplicaReport, ...] = ()
    windows: tuple[records.RevisionTraffic, ...] = ()

    def __post_init__(self) -> None:
        if self.planned_replicas < 0:
            raise ValueError(f"planned_replicas must be >= 0, got {self.planned_replicas}")


def advance(prev: st.RolloutState | None, info: rt.DeploymentInfo, obs: Observation) -> st.RolloutState:
    """The deployment's rollout state after this round."""
    rev = info.revision
    rollout = info.doc.spec.rollout
    if prev is None:
        others = [r for r in obs.replicas if r.revision != rev and r.state in _LIVE]
        why = ("no record of the spec its other replicas run: they are replaced without a rollout" if others
               else "first revision")
        return _complete(info, obs.now_s, obs.now_s, why)
    if prev.revision != rev:
        if rev == prev.stable_revision:
            return _complete(info, obs.now_s, obs.now_s, f"back to the stable revision {rev}")
        if not any(r.revision != rev and r.state in _LIVE for r in obs.replicas):
            return _complete(info, obs.now_s, obs.now_s, "no replica of another revision to replace")
        begun = st.RolloutState(
            deployment=info.name, phase=st.Phase.PROGRESSING, strategy=rollout.strategy, revision=rev,
            stable_revision=prev.stable_revision, stable_spec=prev.stable_spec, started_at_s=obs.now_s,
            step_started_at_s=obs.now_s, reason=f"rolling {prev.stable_revision} -> {rev}")
        return _step(begun, rollout, obs, info)
    if prev.phase is st.Phase.COMPLETE:
        # The stable spec follows changes that keep the revision (scaling, SLA, rollout settings).
        return prev if prev.stable_spec == info.spec_json else dataclasses.replace(prev, stable_spec=info.spec_json)
    if prev.phase is st.Phase.ROLLED_BACK:
        counts = _counts(prev, _shape(prev, rollout), obs)
        return prev if counts == prev.counts else dataclasses.replace(prev, counts=counts)
    return _step(prev, rollout, obs, info)


def split_of(state: st.RolloutState | None, old: rt.DeploymentInfo) -> rt.RevisionSplit | None:
    """The reconciler's split for ``state`` (None once complete: one revision serves); ``old`` is the
    stable spec's DeploymentInfo (``stable_info``)."""
    if state is None or state.phase is st.Phase.COMPLETE:
        return None
    percent, keep_old, old_unrouted, withdrawn = _shape(state, None)
    return rt.RevisionSplit(old, percent, keep_old=keep_old, old_unrouted=old_unrouted, withdrawn=withdrawn)


def stable_info(state: st.RolloutState) -> rt.DeploymentInfo:
    """The stable spec as a DeploymentInfo; raises ``meridian.spec.SpecError`` when this version no
    longer accepts it (e.g. the catalog dropped its GPU type)."""
    loaded = spec.load_texts([(f"rollout:{state.deployment}", state.stable_spec)])
    docs = loaded.of_kind("ModelDeployment")
    if len(docs) != 1:
        raise ValueError(f"rollout record of {state.deployment}: stable_spec holds {len(docs)} ModelDeployments")
    return rt.DeploymentInfo.of(docs[0])


def planned_replicas(placement: problem.Placement, pool_keys: Iterable[str]) -> dict[str, int]:
    """N per deployment: the plan's replicas on the pools live now (the reconciler's own targets)."""
    live = set(pool_keys)
    out: dict[str, int] = {}
    for (name, key), n in placement.replicas.items():
        if n > 0 and key in live:
            out[name] = out.get(name, 0) + n
    return out


def last_step(state: st.RolloutState) -> int:
    return 1 if state.strategy == "blue_green" else len(state.steps_percent) - 1


def new_percent(state: st.RolloutState) -> int:
    """The new revision's share of N now (100 once complete, 0 once rolled back)."""
    if state.phase is st.Phase.COMPLETE:
        return 100
    return _shape(state, None)[0]


# ------------------------------------------------------------------ steps


def _shape(state: st.RolloutState, rollout: deployment_spec.Rollout | None) -> tuple[int, bool, bool, bool]:
    """(new_percent, keep_old, old_unrouted, withdrawn) of the state's current step."""
    if state.phase is st.Phase.ROLLED_BACK:
        return 0, False, False, True
    if state.strategy == "blue_green":
        return (100, True, False, False) if state.step == 0 else (100, False, True, False)
    steps = rollout.steps_percent if rollout is not None else state.steps_percent
    return steps[min(state.step, len(steps) - 1)], False, False, False


def _counts(state: st.RolloutState, shape: tuple[int, bool, bool, bool], obs: Observation) -> st.Counts:
    percent, keep_old, _unrouted, _withdrawn = shape
    new_wanted, old_wanted = rt.split_counts(obs.planned_replicas, percent, keep_old)
    return st.Counts(
        new_wanted=new_wanted,
        new_ready=sum(1 for r in obs.replicas if r.revision == state.revision and r.state is fm.ReplicaState.READY),
        old_wanted=old_wanted,
        old_present=sum(1 for r in obs.replicas if r.revision != state.revision and r.state in _LIVE))


def _step(state: st.RolloutState, rollout: deployment_spec.Rollout, obs: Observation,
          info: rt.DeploymentInfo) -> st.RolloutState:
    now = obs.now_s
    steps = tuple(rollout.steps_percent)
    state = dataclasses.replace(state, steps_percent=steps, step_duration_s=rollout.step_duration_s)
    state = dataclasses.replace(state, step=min(state.step, last_step(state)))
    counts = _counts(state, _shape(state, rollout), obs)
    signals = _tally(state.signals, obs, state.revision, state.step_started_at_s)
    state = dataclasses.replace(state, counts=counts, signals=signals)
    breach = _breach(signals, rollout.rollback, final=False)
    if breach is not None:
        return _rolled_back(state, breach, obs)
    if obs.planned_replicas == 0 and not any(r.state in _LIVE for r in obs.replicas):
        return _complete(info, state.started_at_s, now, "nothing serves: the next replicas start at the new revision")
    healthy = counts.new_ready >= counts.new_wanted
    if state.step == last_step(state):
        if counts.old_present == 0:
            return _complete(info, state.started_at_s, now, f"rolled {state.stable_revision} -> {state.revision}")
        # Old replicas draining slowly next to a healthy new set are not the new revision's fault.
        late = _late(state, rollout, counts, now) if not healthy else None
        return _rolled_back(state, late, obs) if late is not None else state
    observed_s = state.observed_s
    if healthy and state.healthy_at_s is not None:
        observed_s += max(0.0, now - state.healthy_at_s)
    state = dataclasses.replace(state, observed_s=observed_s, healthy_at_s=now if healthy else None)
    if not healthy or observed_s < rollout.step_duration_s:
        late = _late(state, rollout, counts, now)
        return _rolled_back(state, late, obs) if late is not None else state
    breach = _breach(signals, rollout.rollback, final=True)
    if breach is not None:
        return _rolled_back(state, breach, obs)
    moved = dataclasses.replace(state, step=state.step + 1, step_started_at_s=now, observed_s=0.0, healthy_at_s=None,
                                signals=st.StepSignals(counted=signals.counted))
    return dataclasses.replace(moved, counts=_counts(moved, _shape(moved, rollout), obs))


def _tally(signals: st.StepSignals, obs: Observation, revision: str, since_s: float) -> st.StepSignals:
    """Add the windows of ``revision`` received since the step began and not counted yet, and the
    worst p99 TTFT its READY replicas report now."""
    counted = {key: at for key, at in signals.counted.items() if any(w.key == key for w in obs.windows)}
    requests, errors = signals.requests, signals.errors
    for w in obs.windows:
        if w.revision != revision or w.at_s <= max(counted.get(w.key, -math.inf), since_s):
            continue
        requests += w.requests
        errors += w.errors
        counted[w.key] = w.at_s
    ttft = max([signals.ttft_p99_ms] + [r.load.ttft.p99_ms for r in obs.replicas
                                        if r.revision == revision and r.state is fm.ReplicaState.READY])
    return st.StepSignals(requests, errors, ttft, counted)


def _breach(signals: st.StepSignals, limits: deployment_spec.RollbackThresholds,
            final: bool) -> tuple[str, str] | None:
    """(reason, words) when the step's signals break a threshold; None when they pass or are too
    thin to judge before the step's end."""
    if not final and signals.requests < EARLY_VERDICT_MIN_REQUESTS:
        return None
    rate = signals.error_rate
    if rate is not None and rate > limits.error_rate:
        return "error_rate", (f"error rate {rate:.4f} > {limits.error_rate:g} ({signals.errors} errors in "
                              f"{signals.requests} requests)")
    if limits.ttft_p99_ms is not None and signals.ttft_p99_ms > limits.ttft_p99_ms:
        return "ttft", f"TTFT p99 {signals.ttft_p99_ms:.1f} ms > {limits.ttft_p99_ms:g} ms"
    return None


def _late(state: st.RolloutState, rollout: deployment_spec.Rollout, counts: st.Counts,
          now: float) -> tuple[str, str] | None:
    """("progress_deadline", words) once the step is past step_duration_s + progress_deadline_s
    since it began without being done."""
    deadline = rollout.progress_deadline_s
    elapsed = now - state.step_started_at_s
    if deadline is None or elapsed <= rollout.step_duration_s + deadline:
        return None
    return "progress_deadline", (f"not done {elapsed:.0f} s after it began (step_duration_s "
                                 f"{rollout.step_duration_s:g} + progress_deadline_s {deadline:g}): "
                                 f"{counts.new_ready}/{counts.new_wanted} new replicas READY")


def _rolled_back(state: st.RolloutState, breach: tuple[str, str], obs: Observation) -> st.RolloutState:
    kind, words = breach
    rolled = dataclasses.replace(state, phase=st.Phase.ROLLED_BACK, rollback_reason=kind, ended_at_s=obs.now_s,
                                 healthy_at_s=None, reason=f"step {state.step + 1}: {words}")
    return dataclasses.replace(rolled, counts=_counts(rolled, _shape(rolled, None), obs))


def _complete(info: rt.DeploymentInfo, started_at_s: float, now: float, why: str) -> st.RolloutState:
    rollout = info.doc.spec.rollout
    return st.RolloutState(
        deployment=info.name, phase=st.Phase.COMPLETE, strategy=rollout.strategy, revision=info.revision,
        stable_revision=info.revision, stable_spec=info.spec_json, started_at_s=started_at_s,
        steps_percent=tuple(rollout.steps_percent), step_duration_s=rollout.step_duration_s,
        step=len(rollout.steps_percent) - 1 if rollout.strategy == "canary" else 1, step_started_at_s=now,
        reason=why, ended_at_s=now)
