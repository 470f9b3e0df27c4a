"""The autoscaler's cap, through the planner that gives it its context: decisions count replicas of
the reference GPU type, max_replicas counts replicas, so the cap is what max_replicas replicas of
the largest allowed type can be."""

from __future__ import annotations

import math

import pytest

from meridian import spec
from meridian.simulate import defaults
from scheduler.control import fleet as fleet_mod
from scheduler.control import planner
from scheduler.solver import throughput
from scheduler.state import records

EXAMPLES = [defaults.examples_dir() / p for p in defaults.DEFAULT_SPECS]


@pytest.fixture(scope="module")
def examples() -> planner.SpecView:
    return planner.SpecView.of(spec.load_files(EXAMPLES), 1)


def test_the_cap_counts_max_replicas_of_the_largest_type_in_reference_replicas(examples):
    """chat-8b counts in L4s and may run on H100s: its 40 replicas can be 40 H100s' worth of L4s;
    a model whose reference is already its largest type keeps max_replicas."""
    chat = examples.deployments["chat-8b"].spec
    assert throughput.reference_gpu_type(chat) == "L4"
    h100 = throughput.units_by_type(chat, "L4")["H100"]
    assert h100 > 10
    assert planner.max_reference_replicas(chat) == math.floor(chat.scaling.max_replicas * h100)
    reasoning = examples.deployments["reasoning-70b"].spec
    units = throughput.units_by_type(reasoning, throughput.reference_gpu_type(reasoning))
    assert planner.max_reference_replicas(reasoning) == math.floor(reasoning.scaling.max_replicas * max(units.values()))


def test_a_spike_beyond_max_replicas_reference_replicas_still_scales_up(examples):
    """A surge of 200 requests/s of chat-8b from na-east (hundreds of L4s' worth) asks for more than
    max_replicas reference replicas at once; before, the decision stopped at 40 L4s' worth, which
    the solver placed as one H100 replica that then queued every request of three regions."""
    chat = examples.deployments["chat-8b"].spec
    demand = [records.Demand(chat.model.served_name, "na-east", 200.0, 0.0, 2000, 900.0, 600.0, 250.0, 1000.0)]
    snapshot = fleet_mod.FleetSnapshot({}, 1, 1000.0)
    decision = planner.Autoscaler().decide(examples, snapshot, demand, 1000.0)["chat-8b"]
    assert decision.replicas > chat.scaling.max_replicas
    assert decision.replicas <= planner.max_reference_replicas(chat)
    assert decision.replicas_by_region["na-east"] >= decision.replicas - len(chat.sla.client_regions)
