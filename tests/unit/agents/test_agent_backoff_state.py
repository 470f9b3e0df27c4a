"""The directive journal (what survives an agent restart), and the reconnect backoff's cap against
the scheduler's adoption grace (the backoff itself is tested with the kernel's:
tests/unit/meridian/test_backoff.py)."""

from __future__ import annotations

import json
import random

from meridian import backoff as backoff_mod
from meridian.fleet import models
from scheduler import config as scheduler_config

import agents
from agents import state


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


def test_an_agent_retries_within_the_adoption_grace_of_a_restarted_scheduler():
    """With the defaults, an agent whose attempts failed while the scheduler was down tries again
    at most reconnect_max_s after its last failure, whatever the draw: once the new leader is up, the
    agent is back with at least half of the leader's adoption grace left for its Hello and first
    report, so its cluster is not planned without (and its replicas re-placed) after a restart."""
    options = agents.AgentOptions()
    grace = scheduler_config.SchedulerConfig.model_fields["adopt_grace_s"].default
    retry = backoff_mod.Backoff(options.reconnect_initial_s, options.reconnect_max_s, rng=random.Random(3))
    longest = max(retry.next_delay_s() for _ in range(200))  # a long outage: every attempt fails
    assert longest <= options.reconnect_max_s
    assert options.reconnect_max_s <= grace / 2
