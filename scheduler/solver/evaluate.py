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
from scheduler.solver import formulation, greedy, problem


@dataclasses.dataclass(frozen=True)
class Breakdown:
    cost_usd: float
    score_usd: float
    churn_usd: float
    unplaced_usd: float

    @property
    def objective(self) -> float:
        return self.cost_usd + self.score_usd + self.churn_usd + self.unplaced_usd


def split(c: cand_mod.Candidates, sol: greedy.Solution,
          current: problem.Placement | None) -> problem.Placement | None:
    """Pair counts and arc flows -> member-pool placement with its serving map (reference
    replicas of each region's demand per pool, shared over a group's members by their replicas);
    None when a group's replicas do not fit its members (fragmentation), so the caller can solve
    without merging."""
    replicas: dict[tuple[str, str], int] = {}
    by_group: dict[int, list[tuple[int, int]]] = {}
    for p, n in sol.counts.items():
        if n > 0:
            by_group.setdefault(c.pairs[p].g, []).append((p, n))
    share: dict[int, dict[str, int]] = {}  # pair -> member key -> replicas
    for g, items in sorted(by_group.items()):
        group = c.groups[g]
        if len(group.members) == 1:
            for p, n in items:
                share[p] = {group.members[0].key: n}
            continue
        free = {m.key: m.gpus_capacity for m in group.members}
        order = [m.key for m in group.members]
        # Largest replicas first (first-fit decreasing), each deployment's current pools first.
        for p, n in sorted(items, key=lambda it: (-c.pairs[it[0]].gpus_packed, it[0])):
            pair = c.pairs[p]
            name = c.views[pair.d].name
            here = current.of(name) if current is not None else {}
            got: dict[str, int] = {}
            left = n
            for key in sorted(order, key=lambda k: (0 if here.get(k, 0) else 1, order.index(k))):
                cap = free[key] // pair.gpus_packed
                room = min(left, cap, here[key]) if here.get(key, 0) else min(left, cap)
                if room > 0:
                    free[key] -= room * pair.gpus_packed
                    got[key] = got.get(key, 0) + room
                    left -= room
            for key in order:
                room = min(left, free[key] // pair.gpus_packed)
                if room > 0:
                    free[key] -= room * pair.gpus_packed
                    got[key] = got.get(key, 0) + room
                    left -= room
            if left:
                return None
            share[p] = got
    for p, got in share.items():
        name = c.views[c.pairs[p].d].name
        for key, n in got.items():
            replicas[(name, key)] = replicas.get((name, key), 0) + n
    serving: dict[tuple[str, str, str], float] = {}
    for a, flow in sol.flows.items():
        if flow <= 0:
            continue
        arc = c.arcs[a]
        got = share.get(arc.p, {})
        total = sum(got.values())
        name = c.views[arc.d].name
        for key, n in got.items():
            k = (name, arc.region, key)
            serving[k] = serving.get(k, 0.0) + flow / formulation.SCALE * n / total
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
              sol: greedy.Solution, placement: problem.Placement,
              current: problem.Placement | None, covered_scaled: Mapping[tuple[int, str], int],
              scope: set[int]) -> Breakdown:
    """The objective's parts for a solution: member-level cost, arc scores, member-level churn and
    the penalty of demand left unserved (by ``covered_scaled``) among demand some candidate can serve,
    for the deployments the model decided (``scope``)."""
    score = sum(c.arcs[a].score_usd * f / formulation.coverage(c.pairs[c.arcs[a].p].units)
                for a, f in sol.flows.items()) + settings.replica_usd_per_hour * sum(sol.counts.values())
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


def covered(c: cand_mod.Candidates, flows: Mapping[int, int]) -> dict[tuple[int, str], int]:
    """Scaled demand each (deployment, region) gets from arc flows (capped at its demand)."""
    out: dict[tuple[int, str], int] = {}
    for a, f in flows.items():
        if f > 0:
            arc = c.arcs[a]
            out[(arc.d, arc.region)] = out.get((arc.d, arc.region), 0) + f
    for (d, region), v in list(out.items()):
        out[(d, region)] = min(v, c.views[d].demand.replicas_by_region.get(region, 0) * formulation.SCALE)
    return out
