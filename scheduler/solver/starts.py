"""Where CP-SAT starts and what it sees on a large fleet: the current placement as a solution
(warm start), the LP relaxation rounded and repaired into a feasible one, the restriction of a large
model to the arcs that matter, and a value for every variable from a solution (a complete hint)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from scheduler.solver import candidates as cand_mod
from scheduler.solver import evaluate, flows, formulation, greedy, problem


def from_current(c: cand_mod.Candidates, built: formulation.Built, current: problem.Placement,
                 index: Mapping[str, int], member_group: Mapping[str, int]) -> greedy.Solution:
    """The current placement in the model's terms (the pairs the model has)."""
    pair_of = {(c.pairs[p].d, c.pairs[p].g): p for p in built.x}
    sol = greedy.Solution()
    for (name, key), n in current.replicas.items():
        d, g = index.get(name), member_group.get(key)
        p = pair_of.get((d, g)) if d is not None and g is not None else None
        if p is not None and n > 0:
            sol.counts[p] = sol.counts.get(p, 0) + n
    return with_flows(c, sol, built.active)


def with_flows(c: cand_mod.Candidates, sol: greedy.Solution, active: list[int]) -> greedy.Solution:
    """``sol`` with its serving flows recomputed from its counts (max flow per deployment)."""
    by_d: dict[int, dict[int, int]] = {}
    for p, n in sol.counts.items():
        if n > 0:
            by_d.setdefault(c.pairs[p].d, {})[p] = n
    out = greedy.Solution(dict(sol.counts), {})
    for d in active:
        out.flows.update(flows.assign(c, d, by_d.get(d, {})))
    return out


def round_lp(c: cand_mod.Candidates, built: formulation.Built, values: list[float]) -> dict[int, int]:
    """Replicas per pair from the LP: floors, then one more replica on the pairs with the largest
    fractional parts until each deployment's fractional capacity is covered."""
    counts: dict[int, int] = {}
    frac: dict[int, list[tuple[float, int]]] = {}
    short: dict[int, float] = {}
    for p, v in built.x.items():
        x = values[v]
        whole = math.floor(x + 1e-6)
        if whole:
            counts[p] = whole
        if x - whole > 1e-6:
            d = c.pairs[p].d
            frac.setdefault(d, []).append((x - whole, p))
            short[d] = short.get(d, 0.0) + (x - whole) * formulation.coverage(c.pairs[p].units)
    for d, items in frac.items():
        need = short[d]
        for _, p in sorted(items, reverse=True):
            if need <= 1e-6:
                break
            counts[p] = counts.get(p, 0) + 1
            need -= formulation.coverage(c.pairs[p].units)
    return counts


def best_start(prob: problem.PlacementProblem, c: cand_mod.Candidates, settings: problem.SolverSettings,
               active: list[int], prefer: dict[int, int] | None,
               fixed: Mapping[int, list[tuple[int, int]]] | None = None) -> greedy.Solution:
    """A feasible start: the greedy repair of ``prefer`` (an LP rounding) in most-constrained-first
    order; without ``prefer``, the better (by objective) of that order and priority order.
    ``fixed``: replicas an incremental re-solve keeps (they hold their share of every limit)."""
    best, best_value = greedy.Solution(), math.inf
    for order_by in ("constrained",) if prefer else ("constrained", "priority"):
        sol = greedy.place(prob, c, active, prefer=prefer, order_by=order_by, fixed=fixed)
        placement = evaluate.split(c, sol, None)
        if placement is None:
            continue
        value = evaluate.breakdown(prob, c, settings, sol, placement, None, evaluate.covered(c, sol.flows),
                                   set(active)).objective
        if value < best_value:
            best, best_value = sol, value
    return best


def restrict(c: cand_mod.Candidates, built: formulation.Built, lp_values: list[float], start: greedy.Solution,
             per_region: int) -> set[int]:
    """Pairs CP-SAT keeps on a large instance: every pair the LP optimum uses (so the restricted LP
    is as good as the full one), the start's pairs, the ``per_region`` cheapest per capacity for
    each (deployment, region), the ``per_region`` cheapest per replica within each covered region's
    reach, every pair on nodes paid anyway (reserved, ``nodes_min``: their list price is not what a
    replica there costs; the best plans use them, measured at 200 x 200 and 500 x 300), and the
    cheapest per cloud and per region for deployments that need isolation."""
    keep = {p for p, v in built.x.items() if lp_values[v] > 1e-6}
    keep |= {p for p, n in start.counts.items() if n > 0 and p in built.x}
    by_key: dict[tuple[int, str], list[int]] = {}
    for p in built.x:
        for a in c.arcs_by_p[p]:
            by_key.setdefault((c.arcs[a].d, c.arcs[a].region), []).append(a)
    for arcs in by_key.values():
        keep.update(c.arcs[a].p for a in sorted(arcs, key=lambda a: (greedy.unit_price(c, a), a))[:per_region])
    for d in {c.pairs[p].d for p in built.x}:
        # Coverage: the cheapest replicas within each covered region's reach (one replica is enough there).
        for near in c.cover[d].values():
            keep.update(sorted((p for p in near if p in built.x), key=lambda p: (greedy.replica_price(c, p), p))[:per_region])
    # Nodes paid anyway (reserved, nodes_min): a replica there costs nothing more while they have
    # room, whatever their list price says, so their pairs are always kept.
    keep.update(p for p in built.x if c.groups[c.pairs[p].g].nodes_min > 0)
    for d in built.iso:
        cheapest: dict[tuple[str, str], int] = {}
        for p in sorted((p for p in c.pairs_by_d[d] if p in built.x), key=lambda p: (greedy.pair_price(c, p), p)):
            offer = c.groups[c.pairs[p].g].offer
            for key in (("cloud", offer.cloud), ("region", offer.region)):
                cheapest.setdefault(key, p)
        keep.update(cheapest.values())
    return keep


def complete(c: cand_mod.Candidates, built: formulation.Built, sol: greedy.Solution) -> dict[int, int]:
    """A value for every variable, consistent with ``sol``, so CP-SAT starts from a full point."""
    m = built.model
    hint: dict[int, int] = {}
    cov: dict[tuple[int, str], int] = {}
    packed: dict[int, int] = dict(built.fixed_packed)
    placed: dict[int, set[tuple[str, str]]] = {}
    for p, v in built.x.items():
        n = min(sol.counts.get(p, 0), m.ub[v])
        hint[v] = n
        pair = c.pairs[p]
        packed[pair.g] = packed.get(pair.g, 0) + n * pair.gpus_packed
        if n:
            offer = c.groups[pair.g].offer
            placed.setdefault(pair.d, set()).update({("cloud", offer.cloud), ("region", offer.region)})
    capped = greedy.Solution({p: hint[v] for p, v in built.x.items()}, {})
    for a, f in with_flows(c, capped, built.active).flows.items():
        arc = c.arcs[a]
        cov[(arc.d, arc.region)] = cov.get((arc.d, arc.region), 0) + f
        if a in built.f:
            hint[built.f[a]] = min(f, m.ub[built.f[a]])
    for a, v in built.f.items():
        hint.setdefault(v, 0)
    for key, u in built.u.items():
        hint[u] = max(0, built.wanted[key] - cov.get(key, 0))
    for (d, region), v in built.miss.items():
        hint[v] = 0 if any(hint.get(built.x[p], 0) > 0 for p in c.cover[d].get(region, ()) if p in built.x) else 1
    for p, v in built.used.items():
        hint[v] = min(1, hint[built.x[p]])
    for (d, region), v in built.unhedged.items():
        have = sum(c.hedge_count(p, hint[built.x[p]]) for p in c.cover[d].get(region, ()) if p in built.x)
        hint[v] = 0 if have >= cand_mod.HEDGE_NEED else 1
    for g, v in built.nodes.items():
        group = c.groups[g]
        hint[v] = max(group.nodes_min, math.ceil(packed.get(g, 0) / group.offer.gpus_per_node))
    for d, (z, by_cloud, by_region) in built.iso.items():
        mine = placed.get(d, set())
        hint[z] = 1 if mine else 0
        for cloud, y in by_cloud.items():
            hint[y] = 1 if ("cloud", cloud) in mine else 0
        for region, y in by_region.items():
            hint[y] = 1 if ("region", region) in mine else 0
    for p, (v, n0) in built.churn.items():
        hint[v] = abs(hint[built.x[p]] - n0)
    for d, (s, keep) in built.protect.items():
        total = sum(cov.get((d, r), 0) for r in c.views[d].demand.replicas_by_region)
        hint[s] = max(0, keep - total)
    return hint
