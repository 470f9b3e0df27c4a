"""Rollouts of a deployment's new replica revision (the spec's ``rollout`` section), as data:
``machine.advance`` (pure, injected clock) moves a ``RolloutState`` one round on from what the
round observes; ``machine.split_of`` gives the reconciler the ``RevisionSplit`` it carries out; the
control loop persists the states (``records.RolloutLog``) and applies them."""

from scheduler.rollout import machine, state, view
from scheduler.rollout.machine import (
    EARLY_VERDICT_MIN_REQUESTS,
    Observation,
    advance,
    planned_replicas,
    split_of,
    stable_info,
)
from scheduler.rollout.state import Counts, Phase, RolloutState, StepSignals

__all__ = [
    "EARLY_VERDICT_MIN_REQUESTS", "Counts", "Observation", "Phase", "RolloutState", "StepSignals", "advance",
    "machine", "planned_replicas", "split_of", "stable_info", "state", "view",
]
