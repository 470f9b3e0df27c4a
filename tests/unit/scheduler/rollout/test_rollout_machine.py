"""The rollout state machine on an injected clock: canary steps, blue_green's switch, rollback on
error rate and TTFT, a newer apply mid-rollout, and a restart that resumes from the stored record."""

from __future__ import annotations

import dataclasses

import pytest
from rollout_helpers import BLUE_GREEN, T0, fleet, info, stable, window

from meridian.fleet import models as fm
from scheduler import rollout
from scheduler.rollout import view

V1, V2, V3 = info("v1"), info("v2"), info("v3")
STARTING = fm.ReplicaState.STARTING


def obs(now: float, replicas, planned: int = 10, windows=()) -> rollout.Observation:
    return rollout.Observation(now, planned, tuple(replicas), tuple(windows))


def begin(n_old: int = 10) -> rollout.RolloutState:
    return rollout.advance(stable(V1), V2, obs(T0, fleet(V1, n_old)))


def test_a_new_revision_starts_a_canary_at_its_first_step_share_rounded_up():
    """Applying a new revision over a fully rolled-out one starts a canary whose first step gives the
    new revision 10% of the plan's replicas rounded up (one of three), the old side the rest."""
    state = begin()
    assert state.phase is rollout.Phase.PROGRESSING and state.step == 0
    assert (state.revision, state.stable_revision) == (V2.revision, V1.revision)
    split = rollout.split_of(state, V1)
    assert split.new_percent == 10 and split.counts(10) == (1, 9) and split.counts(3) == (1, 2)
    assert split.counts(1) == (1, 0)
    assert state.counts == rollout.Counts(new_wanted=1, new_ready=0, old_wanted=9, old_present=10)


def test_canary_advances_only_after_step_duration_of_healthy_observation():
    """A step advances only once its new replicas have been READY for step_duration_s; a round that
    finds them short pauses the count (the gap before it does not count)."""
    state = begin()
    state = rollout.advance(state, V2, obs(T0 + 10, fleet(V1, 10, V2, 1, STARTING)))
    assert state.observed_s == 0 and state.healthy_at_s is None
    state = rollout.advance(state, V2, obs(T0 + 20, fleet(V1, 10, V2, 1)))  # ready: the count starts
    state = rollout.advance(state, V2, obs(T0 + 50, fleet(V1, 9, V2, 1)))
    assert state.observed_s == 30 and state.step == 0
    state = rollout.advance(state, V2, obs(T0 + 60, fleet(V1, 9, V2, 1, STARTING)))  # restarted: paused
    state = rollout.advance(state, V2, obs(T0 + 70, fleet(V1, 9, V2, 1)))
    state = rollout.advance(state, V2, obs(T0 + 95, fleet(V1, 9, V2, 1)))
    assert state.observed_s == 55 and state.step == 0
    state = rollout.advance(state, V2, obs(T0 + 100, fleet(V1, 9, V2, 1)))
    assert state.step == 1 and state.step_started_at_s == T0 + 100 and state.observed_s == 0
    assert rollout.split_of(state, V1).counts(10) == (5, 5)
    assert state.counts.new_wanted == 5


def test_canary_reaches_100_percent_and_completes_when_no_old_replica_is_left():
    """After the last partial step the old side drains; the rollout completes (the new revision is
    the stable one) only once no old replica is left."""
    state = dataclasses.replace(begin(), step=1)
    state = rollout.advance(state, V2, obs(T0 + 1, fleet(V1, 5, V2, 5)))
    state = rollout.advance(state, V2, obs(T0 + 61, fleet(V1, 5, V2, 5)))
    assert state.step == 2 and rollout.split_of(state, V1).counts(10) == (10, 0)
    state = rollout.advance(state, V2, obs(T0 + 70, fleet(V1, 2, V2, 10)))
    assert state.phase is rollout.Phase.PROGRESSING
    state = rollout.advance(state, V2, obs(T0 + 80, fleet(V1, 0, V2, 10)))
    assert state.phase is rollout.Phase.COMPLETE and state.stable_revision == V2.revision
    assert state.stable_spec == V2.spec_json and rollout.split_of(state, V1) is None


def test_error_rate_breach_rolls_back_with_the_reason():
    """Once the step has enough requests, an error rate above rollback.error_rate rolls back at once:
    the new revision is withdrawn and the old one gets every replica."""
    state = begin()
    state = rollout.advance(state, V2, obs(T0 + 10, fleet(V1, 10, V2, 1), windows=[window(V2, T0 + 10, 40, 1)]))
    assert state.phase is rollout.Phase.PROGRESSING and state.signals.requests == 40
    state = rollout.advance(state, V2, obs(T0 + 20, fleet(V1, 10, V2, 1), windows=[window(V2, T0 + 20, 40, 6)]))
    assert state.phase is rollout.Phase.ROLLED_BACK and state.rollback_reason == "error_rate"
    assert "error rate 0.0875 > 0.05 (7 errors in 80 requests)" in state.reason
    split = rollout.split_of(state, V1)
    assert split.withdrawn and split.counts(10) == (0, 10)
    shown = view.view(state)
    assert shown["rolled_back"] and shown["rollback_reason"] == "error_rate" and shown["old_replicas"]["wanted"] == 10


def test_thin_signals_are_judged_only_at_the_end_of_the_step():
    """Below the early-verdict request count a high error rate does not roll back mid-step; at the
    end of the step's observation the whole step's rate decides."""
    state = begin()
    state = rollout.advance(state, V2, obs(T0 + 10, fleet(V1, 10, V2, 1), windows=[window(V2, T0 + 10, 10, 1)]))
    state = rollout.advance(state, V2, obs(T0 + 40, fleet(V1, 9, V2, 1)))
    assert state.phase is rollout.Phase.PROGRESSING
    state = rollout.advance(state, V2, obs(T0 + 70, fleet(V1, 9, V2, 1)))
    assert state.phase is rollout.Phase.ROLLED_BACK and "1 errors in 10 requests" in state.reason


def test_a_clean_step_with_few_requests_advances():
    """A step whose few requests stay under the error rate advances at the end of its observation."""
    state = begin()
    state = rollout.advance(state, V2, obs(T0 + 10, fleet(V1, 10, V2, 1), windows=[window(V2, T0 + 10, 30, 1)]))
    state = rollout.advance(state, V2, obs(T0 + 70, fleet(V1, 9, V2, 1)))
    assert state.phase is rollout.Phase.PROGRESSING and state.step == 1 and state.signals.requests == 0


def test_a_window_is_counted_once_and_windows_before_the_step_not_at_all():
    """The same stored window read in two rounds counts once; a window received before the step
    began does not count; another router's window counts on its own."""
    state = begin()
    old = window(V2, T0 - 5, 500, 500)
    w1 = window(V2, T0 + 10, 20, 0)
    state = rollout.advance(state, V2, obs(T0 + 11, fleet(V1, 10, V2, 1), windows=[old, w1]))
    state = rollout.advance(state, V2, obs(T0 + 12, fleet(V1, 10, V2, 1), windows=[old, w1]))
    assert (state.signals.requests, state.signals.errors) == (20, 0)
    w2 = window(V2, T0 + 12, 7, 0, router="r2")
    state = rollout.advance(state, V2, obs(T0 + 13, fleet(V1, 10, V2, 1), windows=[w1, w2]))
    assert state.signals.requests == 27


def test_ttft_breach_rolls_back():
    """A READY new replica reporting a p99 TTFT above rollback.ttft_p99_ms rolls the step back at
    the step's verdict."""
    state = begin()
    state = rollout.advance(state, V2, obs(T0 + 10, fleet(V1, 10, V2, 1, ttft_p99_ms=1500)))
    assert state.phase is rollout.Phase.PROGRESSING and state.signals.ttft_p99_ms == 1500
    state = rollout.advance(state, V2, obs(T0 + 70, fleet(V1, 9, V2, 1, ttft_p99_ms=300)))
    assert state.phase is rollout.Phase.ROLLED_BACK and state.rollback_reason == "ttft"
    assert "TTFT p99 1500.0 ms > 800 ms" in state.reason


def test_ttft_breach_rolls_back_early_with_enough_requests():
    """With enough requests in the step, a TTFT breach rolls back before the step's end."""
    state = begin()
    state = rollout.advance(state, V2, obs(T0 + 10, fleet(V1, 10, V2, 1, ttft_p99_ms=900),
                                           windows=[window(V2, T0 + 10, 60, 0)]))
    assert state.phase is rollout.Phase.ROLLED_BACK and state.rollback_reason == "ttft"


def test_blue_green_switches_only_when_the_full_new_set_is_ready():
    """blue_green runs a full new set beside the old one, out of traffic; it switches only once all
    N new replicas have been READY for step_duration_s, and then the old side gets nothing."""
    v1, v2 = info("v1", BLUE_GREEN), info("v2", BLUE_GREEN)
    state = rollout.advance(stable(v1), v2, obs(T0, fleet(v1, 4), planned=4))
    split = rollout.split_of(state, v1)
    assert state.strategy == "blue_green" and split.keep_old and split.counts(4) == (4, 4)
    state = rollout.advance(state, v2, obs(T0 + 10, fleet(v1, 4, v2, 3) + fleet(v2, 0, v2, 0), planned=4))
    state = rollout.advance(state, v2, obs(T0 + 100, fleet(v1, 4, v2, 3), planned=4))
    assert state.step == 0 and state.observed_s == 0  # three of four ready: not healthy
    state = rollout.advance(state, v2, obs(T0 + 110, fleet(v1, 4, v2, 4), planned=4))
    state = rollout.advance(state, v2, obs(T0 + 169, fleet(v1, 4, v2, 4), planned=4))
    assert state.step == 0
    state = rollout.advance(state, v2, obs(T0 + 170, fleet(v1, 4, v2, 4), planned=4))
    split = rollout.split_of(state, v1)
    assert state.step == 1 and split.old_unrouted and not split.keep_old and split.counts(4) == (4, 0)
    state = rollout.advance(state, v2, obs(T0 + 180, fleet(v1, 0, v2, 4), planned=4))
    assert state.phase is rollout.Phase.COMPLETE


def test_newer_apply_mid_rollout_starts_from_the_current_serving_mix():
    """A third revision applied mid-rollout starts a new rollout whose old side is what serves now
    (v1 and v2 replicas, none restarted) and whose stable spec stays the last one fully rolled out."""
    state = dataclasses.replace(begin(), step=1)
    mix = fleet(V1, 5, V2, 5)
    state = rollout.advance(state, V3, obs(T0 + 100, mix))
    assert state.phase is rollout.Phase.PROGRESSING and state.step == 0 and state.revision == V3.revision
    assert state.stable_revision == V1.revision and state.stable_spec == V1.spec_json
    assert state.counts == rollout.Counts(new_wanted=1, new_ready=0, old_wanted=9, old_present=10)
    assert rollout.split_of(state, rollout.stable_info(state)).old.revision == V1.revision


def test_returning_to_the_stable_revision_completes_at_once():
    """Re-applying the stable spec mid-rollout (or after a rollback) completes at once: the other
    revision's replicas are then replaced like any outdated replica."""
    state = rollout.advance(begin(), V1, obs(T0 + 5, fleet(V1, 9, V2, 1)))
    assert state.phase is rollout.Phase.COMPLETE and state.revision == V1.revision


def test_rolled_back_holds_until_a_newer_apply():
    """A rolled-back rollout stays rolled back (the stable revision serves) while the spec keeps the
    bad revision, and a newer revision starts a rollout from the stable one."""
    state = rollout.advance(begin(), V2, obs(T0 + 10, fleet(V1, 10, V2, 1), windows=[window(V2, T0 + 10, 100, 50)]))
    assert state.phase is rollout.Phase.ROLLED_BACK
    later = rollout.advance(state, V2, obs(T0 + 5000, fleet(V1, 10)))
    assert later.phase is rollout.Phase.ROLLED_BACK and later.reason == state.reason
    fresh = rollout.advance(later, V3, obs(T0 + 5010, fleet(V1, 10)))
    assert fresh.phase is rollout.Phase.PROGRESSING and fresh.stable_revision == V1.revision


def test_nothing_to_replace_completes_at_once():
    """A new revision with no replica of another revision running (a fresh or idle deployment)
    completes at once; a first record with foreign replicas also completes (no older spec known)."""
    assert rollout.advance(stable(V1), V2, obs(T0, ())).phase is rollout.Phase.COMPLETE
    first = rollout.advance(None, V2, obs(T0, fleet(V1, 3)))
    assert first.phase is rollout.Phase.COMPLETE and "without a rollout" in first.reason


def test_restart_mid_rollout_resumes_from_the_stored_record():
    """A record stored mid-step and read back (a scheduler restart) carries on exactly where it was:
    same step, same observed time and counted traffic."""
    state = begin()
    state = rollout.advance(state, V2, obs(T0 + 10, fleet(V1, 10, V2, 1), windows=[window(V2, T0 + 10, 20, 0)]))
    state = rollout.advance(state, V2, obs(T0 + 40, fleet(V1, 9, V2, 1), windows=[window(V2, T0 + 10, 20, 0)]))
    restored = rollout.RolloutState.from_json(state.to_json())
    assert restored == state
    after = obs(T0 + 70, fleet(V1, 9, V2, 1), windows=[window(V2, T0 + 10, 20, 0)])
    assert rollout.advance(restored, V2, after) == rollout.advance(state, V2, after)
    assert rollout.advance(restored, V2, after).step == 1


def test_an_unreadable_record_is_a_clear_error():
    """A stored record this version cannot read raises ValueError naming the problem."""
    with pytest.raises(ValueError, match="unreadable rollout record.*sideways"):
        rollout.RolloutState.from_json('{"phase": "sideways"}')


def test_a_step_whose_new_replicas_never_become_ready_rolls_back_after_the_progress_deadline():
    """New replicas that keep crashing (never READY) hold the canary's first step only until
    step_duration_s + progress_deadline_s after it began; then the rollout rolls back, saying why."""
    state = begin()
    state = rollout.advance(state, V2, obs(T0 + 10, fleet(V1, 10, V2, 1, STARTING)))
    state = rollout.advance(state, V2, obs(T0 + 60 + 900, fleet(V1, 10, V2, 1, STARTING)))
    assert state.phase is rollout.Phase.PROGRESSING
    state = rollout.advance(state, V2, obs(T0 + 60 + 901, fleet(V1, 10, V2, 1, STARTING)))
    assert state.phase is rollout.Phase.ROLLED_BACK and state.rollback_reason == "progress_deadline"
    assert state.reason == ("step 1: not done 961 s after it began (step_duration_s 60 + progress_deadline_s 900): "
                            "0/1 new replicas READY")
    assert rollout.split_of(state, V1).counts(10) == (0, 10)


def test_a_slow_step_that_gets_healthy_before_its_deadline_advances():
    """New replicas that take most of the deadline to become READY still let the step advance once
    they have been healthy for step_duration_s, within the deadline."""
    state = begin()
    state = rollout.advance(state, V2, obs(T0 + 800, fleet(V1, 10, V2, 1, STARTING)))
    state = rollout.advance(state, V2, obs(T0 + 850, fleet(V1, 10, V2, 1)))
    state = rollout.advance(state, V2, obs(T0 + 910, fleet(V1, 9, V2, 1)))
    assert state.phase is rollout.Phase.PROGRESSING and state.step == 1


def test_at_the_last_step_only_short_new_replicas_count_as_no_progress():
    """At 100% a rollout whose old replicas drain slowly next to a READY new set waits past the
    deadline; one whose new replicas are short rolls back."""
    at_last = dataclasses.replace(begin(), step=2, step_started_at_s=T0)
    waiting = rollout.advance(at_last, V2, obs(T0 + 2000, fleet(V1, 3, V2, 10)))
    assert waiting.phase is rollout.Phase.PROGRESSING
    short = rollout.advance(at_last, V2, obs(T0 + 2000, fleet(V1, 3, V2, 10, STARTING)))
    assert short.phase is rollout.Phase.ROLLED_BACK and short.rollback_reason == "progress_deadline"


def test_no_progress_deadline_waits_for_ever():
    """With progress_deadline_s null a step whose new replicas never become READY keeps waiting."""
    forever = info("v2", "{strategy: canary, steps_percent: [10, 100], step_duration_s: 60, progress_deadline_s: null}")
    state = rollout.advance(stable(V1), forever, obs(T0, fleet(V1, 10)))
    state = rollout.advance(state, forever, obs(T0 + 86_400, fleet(V1, 10, forever, 1, STARTING)))
    assert state.phase is rollout.Phase.PROGRESSING
