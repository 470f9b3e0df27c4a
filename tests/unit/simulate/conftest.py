"""Small scenarios over the example specs, sized so that one policy's run takes a second or two."""

from __future__ import annotations

import pytest

from meridian.simulate import defaults, scenario


def small(**overrides) -> scenario.Scenario:
    """Two hours of the example fleet at a third of the default traffic, no faults unless given."""
    data = {
        "name": "small",
        "specs": list(defaults.DEFAULT_SPECS),
        "hours": 2.0,
        "start_utc_hour": 14.0,
        "seed": 3,
        "warmup_min": 20.0,
        "traffic": [
            {"deployment": "chat-8b", "peak_rps": {"na-east": 1.5, "eu-west": 1.0, "ap-south": 0.5}},
            {"deployment": "reasoning-70b", "peak_rps": {"na-east": 0.6, "eu-west": 0.4}},
            {"deployment": "embed", "peak_rps": {"na-east": 8.0, "eu-west": 6.0}},
        ],
        "fidelity": {"samples_per_stream": 4},
    }
    data.update(overrides)
    return scenario.parse(data, defaults.examples_dir(), "small")


@pytest.fixture
def make_scenario():
    """``make_scenario(**overrides)``: a small scenario (see ``small``)."""
    return small
