"""``meridian simulate``: a discrete-event simulation, on a simulated clock, that drives the real
autoscaler, placement solver, reconciler and routing policies over a day of traffic and compares
Meridian with baselines on the same trace and seed (docs/simulator.md).

Public face: ``scenario.load``, ``runner.run`` (a ``Comparison``), ``report.text``/``as_dict``,
``plot.write`` (needs matplotlib), ``policies.POLICIES``."""

from meridian.simulate import policies, report, runner, scenario
from meridian.simulate.runner import Comparison, run
from meridian.simulate.scenario import Scenario, ScenarioError, load

__all__ = ["Comparison", "Scenario", "ScenarioError", "load", "policies", "report", "run", "runner", "scenario"]
