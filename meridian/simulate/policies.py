"""The systems the simulator compares on one trace, by name.

Every one runs the same autoscaler (``scheduler.autoscaler``, per deployment) and the same
reconciler, clusters and traffic; they differ in where replicas go and how requests are routed:

- ``meridian``: the placement solver with spot where the specs allow it, ``latency`` routing;
- ``od-cheapest-region``: on-demand (and the already-paid reserved node) in the single region where
  that serves the mean demand cheapest, isolation and latency rules lifted (one region cannot meet
  them), ``latency`` routing among that region's replicas;
- ``od-multi-region``: on-demand and reserved pools in every region, with every rule of the specs,
  placed by the same solver (Meridian without spot), ``latency`` routing;
- ``skyserve``: SkyServe-like SpotHedge placement (spot spread over zones, one extra spot replica,
  on-demand fallback, client latency ignored) and ``least_request`` routing;
- ``round-robin``: Meridian's placement with ``round_robin`` routing over every healthy replica, as
  a region-unaware global load balancer does (no ``max_rtt_ms`` reach)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from meridian.simulate import placement
from scheduler.control import planner
from scheduler.solver import problem

# The production defaults but one CP-SAT worker: the run is then deterministic for a seed (a
# portfolio of workers is not), and the simulator runs policies side by side on the cores instead.
SOLVER_SETTINGS = problem.SolverSettings(num_search_workers=1, small_model_workers=1)
NON_SPOT = ("on_demand", "reserved")


@dataclasses.dataclass
class PlacerContext:
    """What a policy may know when it is set up: the specs and the trace's mean demand (rps per
    deployment and client region); ``notes`` collects choices worth reporting."""

    specs: planner.SpecView
    mean_rps: Mapping[str, Mapping[str, float]]
    notes: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class PolicyDef:
    name: str
    label: str
    routing: str
    placement: str
    make_placer: Callable[[PlacerContext], placement.Placer]
    # Whether its router keeps clients within the deployment's max_rtt_ms (Meridian's router
    # does; SkyServe's load balancer has no notion of it).
    honours_max_rtt: bool = True


def _meridian(ctx: PlacerContext) -> placement.Placer:
    return placement.SolverPlacer(settings=SOLVER_SETTINGS, name="solver")


def _od_multi(ctx: PlacerContext) -> placement.Placer:
    return placement.SolverPlacer(tiers=NON_SPOT, settings=SOLVER_SETTINGS, name="solver, no spot")


def _od_one_region(ctx: PlacerContext) -> placement.Placer:
    region, cost = placement.cheapest_region(ctx.specs, ctx.mean_rps, SOLVER_SETTINGS)
    ctx.notes.append(f"cheapest single region for the mean demand: {region} (${cost:.2f}/h planned)")
    return placement.SolverPlacer(tiers=NON_SPOT, regions=(region,), relax=True, settings=SOLVER_SETTINGS,
                                  name=f"solver, on-demand in {region} only")


def _skyserve(ctx: PlacerContext) -> placement.Placer:
    return placement.SpotHedgePlacer(extra_replicas=1, name="spothedge")


POLICIES: dict[str, PolicyDef] = {p.name: p for p in (
    PolicyDef("meridian", "Meridian", "latency", "solver, spot where allowed", _meridian),
    PolicyDef("od-cheapest-region", "On-demand, cheapest region", "latency", "solver, on-demand, one region",
              _od_one_region),
    PolicyDef("od-multi-region", "On-demand, all regions", "latency", "solver, on-demand only", _od_multi),
    PolicyDef("skyserve", "SkyServe-like (SpotHedge)", "least_request", "spot spread + on-demand fallback",
              _skyserve, honours_max_rtt=False),
    # Round robin as a plain global load balancer does it (sglang-router's round_robin, DNS): over every
    # healthy replica, with no notion of where the client is; keeping clients within max_rtt_ms is part
    # of Meridian's latency awareness, which this baseline is there to measure.
    PolicyDef("round-robin", "Meridian + round robin", "round_robin", "solver, spot where allowed", _meridian,
              honours_max_rtt=False),
)}
DEFAULT = tuple(POLICIES)
ON_DEMAND_ONLY = ("od-cheapest-region", "od-multi-region")


def get(name: str) -> PolicyDef:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
