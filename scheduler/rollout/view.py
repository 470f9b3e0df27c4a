"""What the status surfaces show of a rollout (the admin API's ``/v1/status`` and a deployment's
``GET /v1/specs/ModelDeployment/NAME``, hence ``meridian get deployment NAME``), from the stored
record alone so a standby answers the same as the leader."""

from __future__ import annotations

from scheduler.rollout import machine
from scheduler.rollout import state as st


def view(state: st.RolloutState) -> dict:
    """The rollout as JSON-ready data: strategy, phase, step (1-based) of how many, the new revision's
    share, replica counts of each side, since when (Unix seconds), the step's signals, and why it
    ended (``rollback_reason``: error_rate, ttft or progress_deadline when rolled back)."""
    c, sig = state.counts, state.signals
    return {
        "deployment": state.deployment,
        "strategy": state.strategy,
        "phase": state.phase.value,
        "revision": state.revision,
        "stable_revision": state.stable_revision,
        "step": state.step + 1,
        "steps": machine.last_step(state) + 1,
        "steps_percent": list(state.steps_percent) if state.strategy == "canary" else [],
        "new_percent": machine.new_percent(state),
        "started_at": state.started_at_s,
        "step_started_at": state.step_started_at_s,
        "ended_at": state.ended_at_s,
        "observed_s": round(state.observed_s, 1),
        "step_duration_s": state.step_duration_s,
        "new_replicas": {"wanted": c.new_wanted, "ready": c.new_ready},
        "old_replicas": {"wanted": c.old_wanted, "present": c.old_present},
        "requests": sig.requests,
        "errors": sig.errors,
        "error_rate": None if sig.error_rate is None else round(sig.error_rate, 5),
        "ttft_p99_ms": round(sig.ttft_p99_ms, 1),
        "rolled_back": state.phase is st.Phase.ROLLED_BACK,
        "rollback_reason": state.rollback_reason or None,
        "reason": state.reason,
    }
