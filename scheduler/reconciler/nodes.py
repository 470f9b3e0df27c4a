"""A pool's nodes as its replicas' reports place them (``ReplicaReport.node_id``).

Two rules use them:
- A shrink never goes below the nodes that host a replica (STARTING, READY or DRAINING): the
  agent would refuse it (``agents.directives.shrink_refusal``), and a pool whose replicas are spread
  over more nodes than their GPUs need would be asked to shrink, refused, and asked again.
- Consolidation: when a pool's replicas have stayed spread over more nodes than their GPUs (and
  the plan's) need for ``pool_scale_down_delay_s``, the replicas of one node move to the pool's
  other busy nodes, make-before-break: they stop counting toward the plan, so replacements start in
  the same pool (the agent's allocator is best fit: they land on the fullest node with room), and
  each drains once its replacement is READY. The node is then released at once, not after another
  ``pool_scale_down_delay_s`` idle (the spread waited that long already), unless the plan wants it
  back by then.
  The node chosen is the one with the fewest GPUs held whose replicas all fit, largest first, into
  the other busy nodes' free GPUs; the replacements' starts name it in ``StartReplica.avoid_nodes``
  (with two nodes equally free, best fit could pick it again). One move per pool at a time; a pool
  that must grow, a start,
  drain or resize under way (other than the move's own), or a replica whose node is unknown, puts
  it off. A half-empty 8-GPU node otherwise bills its idle GPUs for as long as one replica stays.

A third rule reads spot reclaims (``reclaims``): a cloud's group (an ASG, a MIG, a node pool) keeps
its target when a spot node is reclaimed and orders a node in its place, while the reconciler, on
the notice, already resized the pool for the doomed replicas' replacements. Nodes beyond the plan's
need, up to the number reclaimed in the pool within ``pool_scale_down_delay_s``, are given back at
once instead of after that delay: nothing asked for them, so no demand can come back to them.

Pure functions of the reconciler's input; the move in progress and the nodes under notice are
carried in ``ReconcileState``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from meridian.fleet import models as fm
from scheduler.reconciler import types as t

_HOLDING = (fm.ReplicaState.STARTING, fm.ReplicaState.READY, fm.ReplicaState.DRAINING)


def by_pool(replicas: Iterable[t.ReplicaInfo]) -> dict[str, dict[str, int] | None]:
    """Pool key -> (node id -> GPUs held there by the pool's replicas that hold GPUs), for every pool
    with such a replica, in one pass; None for a pool where one of them does not say which node it
    is on (an agent that does not report it)."""
    out: dict[str, dict[str, int] | None] = {}
    for r in replicas:
        if r.report.state not in _HOLDING:
            continue
        key = r.pool_key
        nodes = out.setdefault(key, {})
        if nodes is None:
            continue
        if not r.report.node_id:
            out[key] = None
            continue
        nodes[r.report.node_id] = nodes.get(r.report.node_id, 0) + r.report.gpu_count
    return out


def pick(occupied: Mapping[str, int], gpus_per_node: int, replicas: Iterable[t.ReplicaInfo],
         pool_key: str) -> str | None:
    """The node to empty: the least used one whose replicas all fit into the other busy nodes'
    free GPUs (largest first, each on the fullest node with room, as the agent places them)."""
    on: dict[str, list[int]] = {}
    for r in replicas:
        if r.pool_key == pool_key and r.report.state in _HOLDING:
            on.setdefault(r.report.node_id, []).append(r.report.gpu_count)
    for node in sorted(occupied, key=lambda n: (occupied[n], n)):
        free = sorted(gpus_per_node - used for other, used in occupied.items() if other != node)
        fits = True
        for need in sorted(on.get(node, []), reverse=True):
            room = [i for i, f in enumerate(free) if f >= need]
            if not room:
                fits = False
                break
            i = min(room, key=lambda j: free[j])
            free[i] -= need
        if fits:
            return node
    return None


def needed_nodes(pool: fm.GpuPool, gpus: int) -> int:
    """Nodes ``gpus`` GPUs need, within the pool's bounds."""
    return min(max(pool.nodes_max, pool.nodes_min), max(pool.nodes_min, math.ceil(gpus / pool.gpus_per_node)))


def moves(inp: t.ReconcileInput, state: t.ReconcileState, settings: t.ReconcileSettings, *,
          occupied_by_pool: Mapping[str, dict[str, int] | None], busy_pools: set[str],
          wanted_gpus: Mapping[str, int]) -> tuple[dict[str, str], dict[str, str], dict[str, float], dict[str, str]]:
    """(replica id -> why it moves, pool key -> node being emptied, pool key -> since when the pool
    is spread, pool key -> node emptied: its release is due) for this round. ``occupied_by_pool``:
    ``by_pool`` of the replicas; ``busy_pools``: pools with a start, drain or resize under way;
    ``wanted_gpus``: the GPUs the plan wants in each pool. An emptied node stays in ``emptying``
    while its pool is busy (the release waits for that), and is forgotten once offered for release."""
    moving: dict[str, str] = {}
    emptying: dict[str, str] = {}
    since_out: dict[str, float] = {}
    emptied: dict[str, str] = {}
    on_pool: dict[str, list[t.ReplicaInfo]] = {}
    for r in inp.replicas:
        on_pool.setdefault(r.pool_key, []).append(r)
    for key, occupied in sorted(occupied_by_pool.items()):
        info = inp.pools.get(key)
        if info is None or not occupied or info.pool.gpus_per_node <= 0:
            continue
        p = info.pool
        here = on_pool.get(key, [])
        node = state.emptying.get(key)
        in_use = sum(occupied.values())
        spread = len(occupied) > needed_nodes(p, max(in_use, wanted_gpus.get(key, 0)))
        if node is None:
            if not spread:
                continue
            since = since_out[key] = state.spread_since.get(key, inp.now_s)
            if inp.now_s - since < settings.pool_scale_down_delay_s or key in busy_pools:
                continue
            node = pick(occupied, p.gpus_per_node, here, key)
            if node is None:
                continue
            since_out.pop(key, None)
        others = len(occupied) - (node in occupied)  # the pool's busy nodes but this one
        if wanted_gpus.get(key, 0) > others * p.gpus_per_node:
            continue  # the plan needs the node after all: the move, or the release, is given up
        if node not in occupied:
            # Emptied: released at once (the spread already waited pool_scale_down_delay_s), when
            # nothing else is under way in the pool; until then the move stays on record (and
            # starts keep off the node).
            if key in busy_pools:
                emptying[key] = node
            else:
                emptied[key] = node
            continue
        on_node = [r for r in here if r.report.node_id == node]
        if any(r.report.state is fm.ReplicaState.STARTING for r in on_node):
            continue  # a replica started there (no room elsewhere after all): the move is given up
        emptying[key] = node
        for r in on_node:
            if r.report.state is fm.ReplicaState.READY and r.doomed_at_s is None:
                moving[r.replica_id] = (f"consolidation: node {node} of {key} holds {occupied[node]} of "
                                        f"{p.gpus_per_node} GPUs; its replicas move to the pool's fuller nodes "
                                        "so it can be released")
    return moving, emptying, since_out, emptied


def reclaims(inp: t.ReconcileInput, state: t.ReconcileState, settings: t.ReconcileSettings
             ) -> tuple[dict[tuple[str, str], float], dict[str, tuple[int, float]]]:
    """((pool key, node id) -> notice deadline of the nodes under a spot notice, pool key -> (nodes
    reclaimed there within ``pool_scale_down_delay_s``, when the last went)) for this round. A node
    under notice is reclaimed once its deadline has passed and no reported replica is on it any
    more; a noticed node still hosting replicas ``pool_scale_down_delay_s`` past its deadline is
    forgotten (its agent stopped reporting nodes, or the cloud let it be)."""
    now = inp.now_s
    notice = dict(state.notice_nodes)
    hosting: set[tuple[str, str]] = set()
    for r in inp.replicas:
        if not r.report.node_id:
            continue
        where = (r.pool_key, r.report.node_id)
        if r.report.state in _HOLDING:
            hosting.add(where)
        if r.doomed_at_s is not None:
            notice[where] = r.doomed_at_s
    reclaimed = {key: v for key, v in state.reclaimed.items()
                 if v[0] > 0 and now - v[1] < settings.pool_scale_down_delay_s}
    for where, deadline in sorted(notice.items()):
        if deadline > now:
            continue
        if where in hosting:
            if now - deadline >= settings.pool_scale_down_delay_s:
                del notice[where]
            continue
        del notice[where]
        key = where[0]
        if key in inp.pools:
            reclaimed[key] = (reclaimed.get(key, (0, now))[0] + 1, now)
    return notice, reclaimed
