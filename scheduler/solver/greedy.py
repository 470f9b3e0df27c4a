"""The greedy cheapest-first baseline (what a per-request scheduler would do), for the benchmark and
as a fallback: deployments by priority, each region's demand filled from the arc with the lowest
price per unit of capacity that still fits every limit; then isolation is met by adding the cheapest
replica in another cloud or region, or the deployment is left out. Never violates a hard limit."""

from __future__ import annotations

from scheduler.solver import candidates as cand_mod
from scheduler.solver import formulation, ledger, problem


def place(prob: problem.PlacementProblem, c: cand_mod.Candidates, active: list[int] | None = None,
          prefer: dict[int, int] | None = None, order_by: str = "priority") -> dict[int, int]:
    """Arc counts chosen greedily for the deployments in ``active`` (default: all with arcs).

    ``prefer``: counts to take first where they fit (an LP rounding or the current placement),
    which makes this a repair step that turns a near-feasible point into a feasible one.
    ``order_by``: "priority" (higher classes first: the baseline) or "constrained" (deployments
    with isolation and the fewest candidate pools first: a better start for the optimiser)."""
    book = ledger.Ledger(prob, c)
    counts: dict[int, int] = {}
    chosen = active if active is not None else [d for d in range(len(c.views)) if c.arcs_by_d[d]]
    if order_by == "constrained":
        order = sorted(chosen, key=lambda d: (-_isolation_need(c, d), len({c.arcs[a].g for a in c.arcs_by_d[d]}),
                                              -c.views[d].demand.priority, d))
    else:
        order = sorted(chosen, key=lambda d: (-c.views[d].demand.priority, -c.views[d].demand.demand_replicas, d))
    for d in order:
        view = c.views[d]
        mine: dict[int, int] = {}
        for region, wanted in sorted(view.demand.replicas_by_region.items(), key=lambda it: (-it[1], it[0])):
            need = wanted * formulation.SCALE
            arcs = [a for a in c.arcs_by_d[d] if c.arcs[a].region == region]
            preferred = sorted((a for a in arcs if prefer and prefer.get(a, 0) > 0),
                               key=lambda a: (_is_spot(c, a), unit_price(c, a), a))
            for a in preferred:
                for _ in range(prefer.get(a, 0) if prefer else 0):
                    if need <= 0 or book.blocker(a) is not None:
                        break
                    book.add(a)
                    mine[a] = mine.get(a, 0) + 1
                    need -= formulation.coverage(c.arcs[a].units)
            # Two passes: spot is capped by a share of all replicas, so it may fit only after
            # on-demand replicas are in.
            ranked = sorted(arcs, key=lambda a: (unit_price(c, a), a))
            for _ in range(2):
                for a in ranked:
                    cov = formulation.coverage(c.arcs[a].units)
                    while need > 0 and book.blocker(a) is None:
                        book.add(a)
                        mine[a] = mine.get(a, 0) + 1
                        need -= cov
                    if need <= 0:
                        break
                if need <= 0:
                    break
        if not _isolate(c, d, book, mine):
            _undo(book, mine)
            mine = {}
        for a, n in mine.items():
            counts[a] = counts.get(a, 0) + n
    return counts


def _isolation_need(c: cand_mod.Candidates, d: int) -> int:
    p = c.views[d].demand.spec.placement
    return max(p.min_distinct_clouds, p.min_distinct_regions)


def _is_spot(c: cand_mod.Candidates, a: int) -> bool:
    return c.groups[c.arcs[a].g].offer.tier.value == "spot"


def unit_price(c: cand_mod.Candidates, a: int) -> float:
    """USD/h per reference replica of capacity on arc ``a`` (price of the GPUs taken + scores)."""
    arc = c.arcs[a]
    offer = c.groups[arc.g].offer
    return (offer.price_per_gpu_hour_usd * arc.gpus_packed + arc.score_usd) / arc.units


def _isolate(c: cand_mod.Candidates, d: int, book: ledger.Ledger, mine: dict[int, int]) -> bool:
    placement = c.views[d].demand.spec.placement
    if not mine:
        return True
    for attr, need in (("cloud", placement.min_distinct_clouds), ("region", placement.min_distinct_regions)):
        used = {getattr(c.groups[c.arcs[a].g].offer, attr) for a, n in mine.items() if n > 0}
        for a in sorted(c.arcs_by_d[d], key=lambda a: (unit_price(c, a), a)):
            if len(used) >= need:
                break
            place_of = getattr(c.groups[c.arcs[a].g].offer, attr)
            if place_of not in used and book.blocker(a) is None:
                book.add(a)
                mine[a] = mine.get(a, 0) + 1
                used.add(place_of)
        if len(used) < need:
            return False
    return True


def _undo(book: ledger.Ledger, mine: dict[int, int]) -> None:
    for a, n in mine.items():
        book.add(a, -n)
