"""Which replicas serve which client region: a maximum flow from a deployment's replicas (each
pair's capacity) to its regions' demand, over the arcs the latency filter allowed.

The model decides replica counts under Hall's condition (for every set of regions, the replicas
that can reach them hold their demand), which guarantees such a flow exists; this module finds
one: nearest arcs first, greedily, then augmenting paths (Edmonds-Karp) on a graph of a few pools
and a handful of regions."""

from __future__ import annotations

import collections
from collections.abc import Mapping

from scheduler.solver import candidates as cand_mod
from scheduler.solver import formulation

SOURCE, SINK = ("s",), ("t",)


def assign(c: cand_mod.Candidates, d: int, counts: Mapping[int, int]) -> dict[int, int]:
    """Arc -> capacity (hundredths of a reference replica) serving deployment ``d``'s demand from
    its replicas ``counts`` (pair -> replicas): as much demand as the replicas can serve."""
    arcs = sorted((a for a in c.arcs_by_d[d] if counts.get(c.arcs[a].p, 0) > 0), key=lambda a: (c.arcs[a].rtt_ms, a))
    if not arcs:
        return {}
    supply = {p: counts[p] * formulation.coverage(c.pairs[p].units) for p in {c.arcs[a].p for a in arcs}}
    demand = {r: w * formulation.SCALE for r, w in c.views[d].demand.replicas_by_region.items() if w > 0}
    # Residual capacities of S -> pair -> region -> T; pair -> region arcs are unbounded.
    cap: dict[tuple, dict[tuple, int]] = collections.defaultdict(dict)
    unbounded = sum(supply.values()) + 1
    for p, s in supply.items():
        cap[SOURCE][("p", p)] = s
        cap[("p", p)][SOURCE] = 0
    for r, w in demand.items():
        cap[("r", r)][SINK] = w
        cap[SINK][("r", r)] = 0
    arc_of: dict[tuple[int, str], int] = {}
    for a in arcs:
        arc = c.arcs[a]
        cap[("p", arc.p)][("r", arc.region)] = unbounded
        cap[("r", arc.region)][("p", arc.p)] = 0
        arc_of[(arc.p, arc.region)] = a
    for a in arcs:  # nearest first
        arc = c.arcs[a]
        take = min(cap[SOURCE][("p", arc.p)], cap[("r", arc.region)][SINK])
        if take > 0:
            _push(cap, [SOURCE, ("p", arc.p), ("r", arc.region), SINK], take)
    while True:
        path = _bfs(cap)
        if path is None:
            break
        amount = min(cap[u][v] for u, v in zip(path, path[1:], strict=False))
        _push(cap, path, amount)
    out = {}
    for (p, region), a in arc_of.items():
        sent = unbounded - cap[("p", p)][("r", region)]
        if sent > 0:
            out[a] = sent
    return out


def _push(cap: dict[tuple, dict[tuple, int]], path: list[tuple], amount: int) -> None:
    for u, v in zip(path, path[1:], strict=False):
        cap[u][v] -= amount
        cap[v][u] = cap[v].get(u, 0) + amount


def _bfs(cap: dict[tuple, dict[tuple, int]]) -> list[tuple] | None:
    parent: dict[tuple, tuple | None] = {SOURCE: None}
    queue = collections.deque([SOURCE])
    while queue:
        u = queue.popleft()
        for v, room in cap[u].items():
            if room > 0 and v not in parent:
                parent[v] = u
                if v == SINK:
                    path = [v]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return path[::-1]
                queue.append(v)
    return None
