"""Backoff delays and the directive journal (what survives an agent restart)."""

from __future__ import annotations

import json
import random

import pytest

from meridian.fleet import models

from agents import backoff, state


def test_backoff_grows_to_its_ceiling_with_jitter():
    """Successive delays stay within [min_fraction x ceiling, ceiling], the ceiling doubling up to max_s."""
    b = backoff.Backoff(initial_s=0.5, max_s=8.0, rng=random.Random(1))
    ceilings = []
    for _ in range(8):
        ceiling = b.ceiling_s()
        delay = b.next_delay_s()
        assert 0.1 * ceiling <= delay <= ceiling
        ceilings.append(ceiling)
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]


def test_backoff_reset_and_determinism():
    """Equal seeds give equal delays, and reset() starts again from initial_s."""
    a = backoff.Backoff(rng=random.Random(7))
    b = backoff.Backoff(rng=random.Random(7))
    assert [a.next_delay_s() for _ in range(5)] == [b.next_delay_s() for _ in range(5)]
    a.reset()
    assert a.ceiling_s() == a.initial_s


@pytest.mark.parametrize("kwargs, field", [({"initial_s": 0}, "initial_s"), ({"max_s": 0.1}, "max_s"),
                                           ({"multiplier": 0.5}, "multiplier"), ({"min_fraction": 2}, "min_fraction")])
def test_backoff_rejects_bad_settings(kwargs, field):
    """A bad setting is refused with its name in the message."""
    with pytest.raises(ValueError, match=field):
        backoff.Backoff(**kwargs)


def test_journal_persists_outcomes_and_fencing_token(tmp_path):
    """A reloaded journal still knows every directive's latest outcome and the highest fencing token."""
    path = tmp_path / "directives.json"
    j = state.DirectiveJournal(path)
    j.record("d1", models.DirectiveOutcome.ACCEPTED, "", 1.0)
    j.record("d1", models.DirectiveOutcome.SUCCEEDED, "ready", 2.0)
    j.record("d2", models.DirectiveOutcome.REFUSED, "unknown pool", 3.0)
    assert j.observe_fencing_token(5)
    again = state.DirectiveJournal(path)
    assert again.get("d1").outcome == models.DirectiveOutcome.SUCCEEDED
    assert again.get("d2").reason == "unknown pool"
    assert again.recent(10) == ["d1", "d2"]
    assert again.fencing_token == 5
    assert not again.observe_fencing_token(4)
    assert again.observe_fencing_token(5)


def test_journal_is_bounded_oldest_first(tmp_path):
    """Past its capacity the journal forgets the oldest directives; recent() returns the newest."""
    j = state.DirectiveJournal(tmp_path / "j.json", capacity=3)
    for i in range(5):
        j.record(f"d{i}", models.DirectiveOutcome.SUCCEEDED)
    assert "d0" not in j and "d1" not in j and len(j) == 3
    assert j.recent(2) == ["d3", "d4"]


def test_corrupt_journal_starts_empty(tmp_path):
    """An unreadable journal file does not stop the agent: it starts with an empty journal."""
    path = tmp_path / "directives.json"
    path.write_text("{not json")
    j = state.DirectiveJournal(path)
    assert len(j) == 0
    j.record("d1", models.DirectiveOutcome.SUCCEEDED)
    assert json.loads(path.read_text())["directives"][0]["id"] == "d1"
