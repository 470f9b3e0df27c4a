"""The greedy cheapest-first baseline (what a per-request scheduler would do), for the benchmark and
as the optimiser's starting point: deployments in turn; first coverage of the covered regions that
have no demand (the cheapest one replica within reach of each); then each region's demand served first
from spare capacity of replicas already placed, then by new replicas on the pool with the lowest
price per unit of capacity that still fits every limit; then a replica within reach of any covered
region still without one, where a limit allows (the model, not this start, keeps the rule that
coverage comes before more capacity); then isolation is met by adding the cheapest replica in
another cloud or region, or the deployment is left out. Never violates a hard limit."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from scheduler.solver import candidates as cand_mod
from scheduler.solver import formulation, ledger, problem


@dataclasses.dataclass
class Solution:
    """Replicas per pair and capacity per arc (hundredths of a reference replica)."""

    counts: dict[int, int] = dataclasses.field(default_factory=dict)
    flows: dict[int, int] = dataclasses.field(default_factory=dict)


def place(prob: problem.PlacementProblem, c: cand_mod.Candidates, active: list[int] | None = None,
          prefer: dict[int, int] | None = None, order_by: str = "priority",
          fixed: Mapping[int, list[tuple[int, int]]] | None = None) -> Solution:
    """A feasible solution for the deployments in ``active`` (default: all with arcs).

    ``prefer``: replicas per pair to take first where they fit (an LP rounding or the current
    placement): a repair step that turns a near-feasible point into a feasible one.
    ``order_by``: "priority" (higher classes first: the baseline) or "constrained" (deployments
    with isolation and the fewest candidate pools first: a better start for the optimiser).
    ``fixed``: deployment -> [(group, replicas)] an incremental re-solve keeps; they hold their
    share of every limit before anything is placed, so the result is feasible next to them."""
    book = ledger.Ledger(prob, c)
    for d, entries in (fixed or {}).items():
        for g, n in entries:
            book.hold(d, g, n)
    out = Solution()
    chosen = active if active is not None else [d for d in range(len(c.views)) if c.arcs_by_d[d] or c.cover[d]]
    if order_by == "constrained":
        order = sorted(chosen, key=lambda d: (-_isolation_need(c, d), len(c.pairs_by_d[d]),
                                              -c.views[d].demand.priority, d))
    else:
        order = sorted(chosen, key=lambda d: (-c.views[d].demand.priority, -c.views[d].demand.demand_replicas, d))
    for d in order:
        mine = _place_one(c, d, book, prefer or {})
        if not _isolate(c, d, book, mine):
            for p, n in mine.counts.items():
                book.add(p, -n)
            continue
        out.counts.update(mine.counts)
        out.flows.update(mine.flows)
    return out


def _place_one(c: cand_mod.Candidates, d: int, book: ledger.Ledger, prefer: dict[int, int]) -> Solution:
    view = c.views[d]
    mine = Solution()
    spare: dict[int, int] = {}
    demand = view.demand.replicas_by_region
    # Regions that only need coverage first (demand serves the others), then whatever demand left
    # uncovered (blocked, or held by a limit).
    _cover(c, d, book, mine, spare, prefer, [r for r in sorted(c.cover[d]) if demand.get(r, 0) <= 0])
    for region, wanted in sorted(view.demand.replicas_by_region.items(), key=lambda it: (-it[1], it[0])):
        need = wanted * formulation.SCALE
        arcs = [a for a in c.arcs_by_d[d] if c.arcs[a].region == region]
        if not arcs or need <= 0:
            continue
        for a in sorted(arcs, key=lambda a: (c.arcs[a].score_usd, a)):
            take = min(need, spare.get(c.arcs[a].p, 0))
            if take > 0:
                mine.flows[a] = mine.flows.get(a, 0) + take
                spare[c.arcs[a].p] -= take
                need -= take
        preferred = sorted((a for a in arcs if prefer.get(c.arcs[a].p, 0) > mine.counts.get(c.arcs[a].p, 0)),
                           key=lambda a: (_is_spot(c, a), unit_price(c, a), a))
        # Two passes over the ranked arcs: spot is capped by a share of all replicas, so it may
        # fit only after on-demand replicas are in.
        ranked = sorted(arcs, key=lambda a: (_marginal_price(c, book, a), a))
        for a, limited in [(a, True) for a in preferred] + [(a, False) for a in ranked + ranked]:
            p = c.arcs[a].p
            cov = formulation.coverage(c.pairs[p].units)
            while need > 0 and (not limited or prefer.get(p, 0) > mine.counts.get(p, 0)) and book.blocker(p) is None:
                book.add(p)
                mine.counts[p] = mine.counts.get(p, 0) + 1
                take = min(need, cov)
                mine.flows[a] = mine.flows.get(a, 0) + take
                spare[p] = spare.get(p, 0) + cov - take
                need -= take
            if need <= 0:
                break
    _cover(c, d, book, mine, spare, prefer, sorted(c.cover[d], key=lambda r: (-demand.get(r, 0), r)))
    return mine


def _cover(c: cand_mod.Candidates, d: int, book: ledger.Ledger, mine: Solution, spare: dict[int, int],
           prefer: Mapping[int, int], regions: list[str]) -> None:
    """One replica within reach of each of ``regions`` no replica of ``mine`` reaches yet: the one
    preferred, else the cheapest one replica there (coverage needs one, not capacity)."""
    for region in regions:
        near = c.cover[d][region]
        if any(mine.counts.get(p, 0) > 0 for p in near):
            continue
        ranked = sorted(near, key=lambda p: (prefer.get(p, 0) <= mine.counts.get(p, 0), replica_price(c, p, book), p))
        p = next((p for p in ranked if book.blocker(p) is None), None)
        if p is not None:
            book.add(p)
            mine.counts[p] = mine.counts.get(p, 0) + 1
            spare[p] = spare.get(p, 0) + formulation.coverage(c.pairs[p].units)


def _marginal_price(c: cand_mod.Candidates, book: ledger.Ledger, a: int) -> float:
    """Like unit_price, but room on nodes already running (or paid: nodes_min) costs nothing:
    filling open nodes before starting new ones is what node-granular billing rewards."""
    arc = c.arcs[a]
    pair = c.pairs[arc.p]
    group = c.groups[arc.g]
    if book.packed[arc.g] + pair.gpus_packed <= book.nodes(arc.g) * group.offer.gpus_per_node:
        return arc.score_usd / pair.units
    return unit_price(c, a)


def replica_price(c: cand_mod.Candidates, p: int, book: ledger.Ledger | None = None) -> float:
    """USD/h one more replica of pair ``p`` adds: its GPUs' price (nothing where it fits on nodes
    already running or paid for, given ``book``), as coverage weighs it: one replica is enough."""
    pair = c.pairs[p]
    group = c.groups[pair.g]
    if book is not None and book.packed[pair.g] + pair.gpus_packed <= book.nodes(pair.g) * group.offer.gpus_per_node:
        return 0.0
    return group.offer.price_per_gpu_hour_usd * pair.gpus_packed


def unit_price(c: cand_mod.Candidates, a: int) -> float:
    """USD/h per reference replica of capacity on arc ``a`` (price of the GPUs taken + scores)."""
    arc = c.arcs[a]
    pair = c.pairs[arc.p]
    offer = c.groups[arc.g].offer
    return (offer.price_per_gpu_hour_usd * pair.gpus_packed + arc.score_usd) / pair.units


def pair_price(c: cand_mod.Candidates, p: int) -> float:
    """USD/h per reference replica of capacity on pair ``p`` (price of the GPUs taken)."""
    pair = c.pairs[p]
    return c.groups[pair.g].offer.price_per_gpu_hour_usd * pair.gpus_packed / pair.units


def _isolation_need(c: cand_mod.Candidates, d: int) -> int:
    p = c.views[d].demand.spec.placement
    return max(p.min_distinct_clouds, p.min_distinct_regions)


def _is_spot(c: cand_mod.Candidates, a: int) -> bool:
    return c.groups[c.arcs[a].g].offer.tier.value == "spot"


def _isolate(c: cand_mod.Candidates, d: int, book: ledger.Ledger, mine: Solution) -> bool:
    placement = c.views[d].demand.spec.placement
    if not mine.counts:
        return True
    for attr, need in (("cloud", placement.min_distinct_clouds), ("region", placement.min_distinct_regions)):
        used = {getattr(c.groups[c.pairs[p].g].offer, attr) for p, n in mine.counts.items() if n > 0}
        for a in sorted(c.arcs_by_d[d], key=lambda a: (unit_price(c, a), a)):
            if len(used) >= need:
                break
            p = c.arcs[a].p
            place_of = getattr(c.groups[c.pairs[p].g].offer, attr)
            if place_of not in used and book.blocker(p) is None:
                book.add(p)
                mine.counts[p] = mine.counts.get(p, 0) + 1
                used.add(place_of)
        if len(used) < need:
            return False
    return True
