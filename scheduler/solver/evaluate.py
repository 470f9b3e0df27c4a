"""Turning a group-level solution into pool-level replicas, and pricing any placement honestly.

The split back assigns each group's replicas to its member pools: first where the deployment runs
now (no churn), then first fit, so nodes fill before new ones start. Cost is recomputed on member
pools (each pool's nodes: max(nodes_min, ceil(GPUs used / GPUs per node))), so the reported cost
is what the plan would bill, not the model's aggregate figure."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from scheduler.solver import candidates as cand_mod
from scheduler.solver import formulation, problem


@dataclasses.dataclass(frozen=True)
class Breakdown:
    cost_usd: float
    score_usd: float
    churn_usd: float
    unplaced_usd: float

    @property
    def objective(self) -> float:
        return self.cost_usd + self.score_usd + self.churn_usd + self.unplaced_usd


def split(c: cand_mod.Candidates, counts: Mapping[int, int],
          current: problem.Placement | None) -> problem.Placement | None:
    """Arc counts -> member-pool placement with serving; None when a group's replicas do not fit
    its members (fragmentation), so the caller can solve without merging."""
    replicas: dict[tuple[str, str], int] = {}
    serving: dict[tuple[str, str, str], int] = {}
    by_group: dict[int, list[tuple[int, int]]] = {}
    for a, n in counts.items():
        if n > 0:
            by_group.setdefault(c.arcs[a].g, []).append((a, n))
    for g, items in sorted(by_group.items()):
        group = c.groups[g]
        if len(group.members) == 1:
            key = group.members[0].key
            for a, n in items:
                arc = c.arcs[a]
                name = c.views[arc.d].name
                replicas[(name, key)] = replicas.get((name, key), 0) + n
                serving[(name, arc.region, key)] = serving.get((name, arc.region, key), 0) + n
            continue
        free = {m.key: m.gpus_capacity for m in group.members}
        order = [m.key for m in group.members]
        # Largest replicas first (first-fit decreasing), each deployment's current pools first.
        for a, n in sorted(items, key=lambda it: (-c.arcs[it[0]].gpus_packed, it[0])):
            arc = c.arcs[a]
            name = c.views[arc.d].name
            here = current.of(name) if current is not None else {}
            prefs = sorted(order, key=lambda k: (0 if here.get(k, 0) > replicas.get((name, k), 0) else 1,
                                                 order.index(k)))
            left = n
            for key in prefs:
                if left == 0:
                    break
                if here.get(key, 0) > replicas.get((name, key), 0):
                    room = min(left, here[key] - replicas.get((name, key), 0), free[key] // arc.gpus_packed)
                else:
                    room = min(left, free[key] // arc.gpus_packed)
                if room <= 0:
                    continue
                free[key] -= room * arc.gpus_packed
                replicas[(name, key)] = replicas.get((name, key), 0) + room
                serving[(name, arc.region, key)] = serving.get((name, arc.region, key), 0) + room
                left -= room
            if left:
                for key in order:
                    room = min(left, free[key] // arc.gpus_packed)
                    if room > 0:
                        free[key] -= room * arc.gpus_packed
                        replicas[(name, key)] = replicas.get((name, key), 0) + room
                        serving[(name, arc.region, key)] = serving.get((name, arc.region, key), 0) + room
                        left -= room
                if left:
                    return None
    return problem.Placement(replicas, serving)


def pool_nodes(prob: problem.PlacementProblem, placement: problem.Placement) -> dict[str, int]:
    """Nodes each (non-excluded) pool runs under ``placement``."""
    specs = {d.name: d.spec for d in prob.deployments}
    packed: dict[str, int] = {}
    offers = {p.key: p for p in prob.pools}
    for (d, key), n in placement.replicas.items():
        offer = offers.get(key)
        if offer is None or n <= 0 or d not in specs:
            continue
        gpus = specs[d].resources.gpus_for(offer.gpu_type)
        packed[key] = packed.get(key, 0) + n * cand_mod.packed_gpus(gpus, offer.gpus_per_node)
    out = {}
    for p in prob.pools:
        if p.key in prob.excluded_pools:
            continue
        out[p.key] = max(p.pool.nodes_min, math.ceil(packed.get(p.key, 0) / p.gpus_per_node))
    return out


def cost_per_hour(prob: problem.PlacementProblem, placement: problem.Placement) -> float:
    offers = {p.key: p for p in prob.pools}
    return sum(offers[k].price_per_node_hour_usd * n for k, n in pool_nodes(prob, placement).items())


def breakdown(prob: problem.PlacementProblem, c: cand_mod.Candidates, settings: problem.SolverSettings,
              counts: Mapping[int, int], placement: problem.Placement,
              current: problem.Placement | None, covered_scaled: Mapping[tuple[int, str], int],
              scope: set[int]) -> Breakdown:
    """The objective's parts for a solution: member-level cost, arc scores, member-level churn and
    the penalty of demand left unserved (by ``covered_scaled``) among demand some candidate can serve,
    for the deployments the model decided (``scope``)."""
    score = sum(c.arcs[a].score_usd * n for a, n in counts.items())
    churn = 0.0
    if current is not None and settings.churn_usd_per_replica > 0:
        keys = set(current.replicas) | set(placement.replicas)
        churn = settings.churn_usd_per_replica * sum(
            abs(placement.replicas.get(k, 0) - current.replicas.get(k, 0)) for k in keys)
    unplaced = 0.0
    for d in sorted(scope):
        view = c.views[d]
        weight = settings.unplaced_usd_per_replica * formulation.priority_weight(view.demand.priority)
        reachable = {c.arcs[a].region for a in c.arcs_by_d[d]}
        for region, wanted in view.demand.replicas_by_region.items():
            # Demand no candidate can serve is unplaced whatever the plan: not part of the objective.
            if wanted > 0 and region in reachable:
                short = max(0, wanted * formulation.SCALE - covered_scaled.get((d, region), 0))
                unplaced += weight * short / formulation.SCALE
    return Breakdown(cost_per_hour(prob, placement), score, churn, unplaced)


def covered(c: cand_mod.Candidates, counts: Mapping[int, int]) -> dict[tuple[int, str], int]:
    """Scaled demand each (deployment, region) gets from arc counts (capped at its demand)."""
    out: dict[tuple[int, str], int] = {}
    for a, n in counts.items():
        if n > 0:
            arc = c.arcs[a]
            out[(arc.d, arc.region)] = out.get((arc.d, arc.region), 0) + n * formulation.coverage(arc.units)
    for (d, region), v in list(out.items()):
        out[(d, region)] = min(v, c.views[d].demand.replicas_by_region.get(region, 0) * formulation.SCALE)
    return out
