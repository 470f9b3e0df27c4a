"""Turning a group-level solution into pool-level replicas, and pricing any placement honestly.

The split back assigns each group's replicas to its member pools: first where the deployment runs
now (no churn), then onto nodes already paid for or running, then first fit, so nodes fill before
new ones start and the members run no more nodes than the model counted for the group. Cost is recomputed on member
pools (each pool's nodes: max(nodes_min, ceil(GPUs used / GPUs per node))), so the reported cost
is what the plan would bill, not the model's aggregate figure."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from meridian import catalog, cost, fleet
from scheduler.solver import candidates as cand_mod
from scheduler.solver import formulation, greedy, problem


@dataclasses.dataclass(frozen=True)
class Breakdown:
    cost_usd: float
    score_usd: float
    churn_usd: float
    unplaced_usd: float
    uncovered_usd: float = 0.0
    unhedged_usd: float = 0.0

    @property
    def objective(self) -> float:
        return (self.cost_usd + self.score_usd + self.churn_usd + self.unplaced_usd + self.uncovered_usd
                + self.unhedged_usd)


def split(c: cand_mod.Candidates, sol: greedy.Solution, current: problem.Placement | None,
          held: Mapping[str, int] | None = None, overfill: bool = False) -> problem.Placement | None:
    """Pair counts and arc flows -> member-pool placement with its serving map (reference
    replicas of each region's demand per pool, shared over a group's members by their replicas);
    None when a group's replicas do not fit its members (fragmentation), so the caller can solve
    without merging.

    ``held``: member pool key -> GPUs already taken there by replicas the model did not decide
    (those an incremental re-solve keeps); new replicas fit around them. The model counts a
    group's nodes as if its members were one pool, so the split fills nodes already paid for
    (nodes_min) or running before it opens one, and drops the preference for where a deployment
    runs now when keeping it would run more nodes than the model counted.

    ``overfill``: a replica that fits no member goes to the member with the most GPUs left, beyond
    its capacity, instead of failing the split: for a caller with no time to re-solve, whose last
    check (``validate.repair``) then drops what does not fit and reports it unplaced."""
    held = held or {}
    by_group: dict[int, list[tuple[int, int]]] = {}
    for p, n in sol.counts.items():
        if n > 0:
            by_group.setdefault(c.pairs[p].g, []).append((p, n))
    now: dict[str, dict[str, int]] = {}
    for (name, key), n in (current.replicas.items() if current is not None else ()):
        if n > 0:
            now.setdefault(name, {})[key] = n
    share: dict[int, dict[str, int]] = {}  # pair -> member key -> replicas
    for g, items in sorted(by_group.items()):
        group = c.groups[g]
        if len(group.members) == 1:
            for p, n in items:
                share[p] = {group.members[0].key: n}
            continue
        got = _split_group(c, group, items, now, held, overfill)
        if got is not None and now and _member_nodes(group, got[1]) > _group_nodes(group, got[1]):
            plain = _split_group(c, group, items, {}, held, overfill)
            if plain is not None and _member_nodes(group, plain[1]) < _member_nodes(group, got[1]):
                got = plain
        if got is None:
            return None
        share.update(got[0])
    replicas: dict[tuple[str, str], int] = {}
    for p, members in share.items():
        name = c.views[c.pairs[p].d].name
        for key, n in members.items():
            replicas[(name, key)] = replicas.get((name, key), 0) + n
    serving: dict[tuple[str, str, str], float] = {}
    for a, flow in sol.flows.items():
        if flow <= 0:
            continue
        arc = c.arcs[a]
        members = share.get(arc.p, {})
        total = sum(members.values())
        name = c.views[arc.d].name
        for key, n in members.items():
            k = (name, arc.region, key)
            serving[k] = serving.get(k, 0.0) + flow / formulation.SCALE * n / total
    return problem.Placement(replicas, serving)


def _split_group(c: cand_mod.Candidates, group: cand_mod.Group, items: list[tuple[int, int]],
                 now: Mapping[str, Mapping[str, int]], held: Mapping[str, int], overfill: bool = False
                 ) -> tuple[dict[int, dict[str, int]], dict[str, int]] | None:
    """One group's replicas over its members, largest replicas first (first-fit decreasing): a
    deployment's current members first (``now``: no churn), then room on nodes already running or
    paid for, then a new node on the first member with room. Returns (pair -> member -> replicas,
    member -> GPUs used), or None when they do not fit (``overfill``: see ``split``)."""
    gpn = group.offer.gpus_per_node
    order = [m.key for m in group.members]
    free = {m.key: m.gpus_capacity - held.get(m.key, 0) for m in group.members}
    used = {m.key: held.get(m.key, 0) for m in group.members}
    paid = {m.key: m.pool.nodes_min * gpn for m in group.members}

    def open_room(key: str) -> int:
        return max(paid[key], math.ceil(used[key] / gpn) * gpn) - used[key]

    share: dict[int, dict[str, int]] = {}
    for p, n in sorted(items, key=lambda it: (-c.pairs[it[0]].gpus_packed, it[0])):
        size = c.pairs[p].gpus_packed
        here = now.get(c.views[c.pairs[p].d].name, {})
        got: dict[str, int] = {}
        left = n
        while left:
            key = next((k for k in order if here.get(k, 0) > got.get(k, 0) and free[k] >= size), None)
            if key is not None:
                take = min(left, here[key] - got.get(key, 0), free[key] // size)
            else:
                key = next((k for k in order if free[k] >= size and open_room(k) >= size), None)
                if key is not None:
                    take = min(left, free[key] // size, open_room(key) // size)
                else:
                    key = next((k for k in order if free[k] >= size), None)
                    if key is None and not overfill:
                        return None
                    if key is None:
                        key = max(order, key=lambda k: (free[k], k))
                        take = 1
                    else:
                        take = min(left, free[key] // size, max(1, gpn // size))
            free[key] -= take * size
            used[key] += take * size
            got[key] = got.get(key, 0) + take
            left -= take
        share[p] = got
    return share, used


def _member_nodes(group: cand_mod.Group, used: Mapping[str, int]) -> int:
    gpn = group.offer.gpus_per_node
    return sum(max(m.pool.nodes_min, math.ceil(used.get(m.key, 0) / gpn)) for m in group.members)


def _group_nodes(group: cand_mod.Group, used: Mapping[str, int]) -> int:
    """Nodes the model counts for the group: its members as one pool."""
    return max(group.nodes_min, math.ceil(sum(used.values()) / group.offer.gpus_per_node))


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
    """What the plan's nodes bill per hour, as ``meridian.cost`` bills them: each pool's nodes at its
    offer's price, a reserved pool's nodes beyond its commitment (nodes already running there) on
    demand."""
    offers = {p.key: p for p in prob.pools}
    return sum(node_price(prob, offers[k]).usd_per_hour(n) for k, n in pool_nodes(prob, placement).items())


def node_price(prob: problem.PlacementProblem, offer: problem.PoolOffer) -> cost.Price:
    """How the offer's nodes bill: its price; for a reserved pool under a commitment, that price up to
    the committed nodes and the on-demand price (policy override or catalog) beyond them."""
    if offer.tier is not fleet.Tier.RESERVED:
        return cost.Price(offer.price_per_node_hour_usd)
    committed = cost.commitment(offer.cloud, offer.region, offer.pool.instance_type, prob.policy)
    if committed is None:
        return cost.Price(offer.price_per_node_hour_usd)
    listed = catalog.instances.default().lookup(offer.cloud, offer.pool.instance_type, offer.region)
    beyond = offer.price_per_node_hour_usd if listed is None else cost.price_per_node_hour(
        offer.cloud, offer.region, offer.pool.instance_type, "on_demand", listed, prob.policy)
    return cost.Price(offer.price_per_node_hour_usd, committed.nodes, beyond)


def breakdown(prob: problem.PlacementProblem, c: cand_mod.Candidates, settings: problem.SolverSettings,
              sol: greedy.Solution, placement: problem.Placement,
              current: problem.Placement | None, covered_scaled: Mapping[tuple[int, str], int],
              scope: set[int]) -> Breakdown:
    """The objective's parts for a solution, the model's objective function evaluated on the plan
    (``formulation``'s docstring): member-level cost, scores per replica
    (``formulation.replica_score``, as the model weighs them), member-level churn, the penalty of
    demand left unserved (by ``covered_scaled``) among demand some candidate can serve, the
    priority protection's, that of covered regions some candidate could reach but no replica
    does, and that of hedged regions one preemption would uncover, for the deployments the model
    decided (``scope``). On a plan whose groups are single pools it equals the model's objective at
    that plan; merged groups can only cost more here (a split that opens a node the group count did
    not), and so do reserved nodes beyond a commitment, which bill on demand here (``node_price``)
    and at the offer's price in the model."""
    score = sum(n * (formulation.replica_score(c, p) + settings.replica_usd_per_hour)
                for p, n in sol.counts.items() if n > 0)
    churn = 0.0
    if current is not None and settings.churn_usd_per_replica > 0:
        keys = set(current.replicas) | set(placement.replicas)
        churn = settings.churn_usd_per_replica * sum(
            abs(placement.replicas.get(k, 0) - current.replicas.get(k, 0)) for k in keys)
    protect = formulation.protect_weights(prob) if current is not None else {}
    current_g = _groups_of(c, current) if protect else {}
    unplaced = 0.0
    for d in sorted(scope):
        view = c.views[d]
        weight = settings.unplaced_usd_per_replica * formulation.priority_weight(view.demand.priority)
        reachable = {c.arcs[a].region for a in c.arcs_by_d[d]}
        served = 0
        for region, wanted in view.demand.replicas_by_region.items():
            # Demand no candidate can serve is unplaced whatever the plan: not part of the objective.
            if wanted > 0 and region in reachable:
                got = min(wanted * formulation.SCALE, covered_scaled.get((d, region), 0))
                served += got
                unplaced += weight * (wanted * formulation.SCALE - got) / formulation.SCALE
        if d in protect:
            keep = formulation.protect_keep(c, d, current_g)
            unplaced += (settings.unplaced_usd_per_replica * protect[d] / formulation.SCALE) * max(0, keep - served)
    uncovered = sum(formulation.coverage_weight(c.views[d].demand, settings) * len(c.uncovered(d, sol.counts))
                    for d in sorted(scope))
    unhedged = sum(formulation.hedge_weight(c.views[d].demand, settings) * len(c.unhedged(d, sol.counts))
                   for d in sorted(scope))
    return Breakdown(cost_per_hour(prob, placement), score, churn, unplaced, uncovered, unhedged)


def _groups_of(c: cand_mod.Candidates, placement: problem.Placement) -> dict[tuple[int, int], int]:
    """(deployment, group) -> replicas of a member-level placement."""
    index = {v.name: d for d, v in enumerate(c.views)}
    member_group = {m.key: g.index for g in c.groups for m in g.members}
    out: dict[tuple[int, int], int] = {}
    for (name, key), n in placement.replicas.items():
        d, g = index.get(name), member_group.get(key)
        if d is not None and g is not None and n > 0:
            out[(d, g)] = out.get((d, g), 0) + n
    return out


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
