"""The version skew rule (meridian.compat): same major, at most one minor apart, a clear reason otherwise."""

from __future__ import annotations

import pytest

from meridian import compat


@pytest.mark.parametrize("peer", ["meridian-agent/0.2.0", "meridian-agent/0.1.0", "0.1.7", "meridian-agent/0.3.0",
                                  "0.2.0.dev1", "router/0.2.1+local"])
def test_one_minor_either_way_is_accepted(peer):
    """Peers of the same major version within one minor of a 0.2.0 scheduler are accepted."""
    assert compat.refusal(peer, peer="agent", own_version="0.2.0") is None


@pytest.mark.parametrize("peer, words", [
    ("meridian-agent/0.0.9", "2 minor versions older than this scheduler (0.2.0); at most 1 apart is supported: "
                             "upgrade the agent to 0.1 or later"),
    ("0.4.0", "2 minor versions newer than this scheduler (0.2.0); at most 1 apart is supported: upgrade the "
              "scheduler to 0.3 or later first"),
    ("1.2.0", "another major version than this scheduler (0.2.0)"),
    ("", "names no version"),
    ("fake", "names no version"),
])
def test_outside_the_rule_is_refused_with_what_to_do(peer, words):
    """Two minors apart, another major or no version: refused, saying both versions and the fix."""
    reason = compat.refusal(peer, peer="agent", own_version="0.2.0")
    assert reason is not None and words in reason


def test_parse():
    """Versions parse with a name prefix and a pre-release suffix."""
    assert compat.parse("meridian-agent/0.2.3") == compat.Version(0, 2, 3)
    assert compat.parse("1.4") == compat.Version(1, 4, 0)
    assert compat.parse("0.2.0rc1") == compat.Version(0, 2, 0)
    assert compat.parse("x/y") is None
