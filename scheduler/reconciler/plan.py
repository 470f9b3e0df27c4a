"""``reconcile``: the placement plan and the fleet as reported -> the directives to send now.

Rules (all pure; the executor sends what this returns):
- The current placement is what agents report (plus starts already on their way), so a restarted
  scheduler adopts running replicas. A replica counts toward its (deployment, pool) target when it
  is STARTING or READY, of the deployment's current revision, not being drained and not doomed by a
  spot notice.
- Deficits start replicas where the pool has free GPUs; when it has not, the pool is resized (up to
  ``nodes_max``, never while in stock-out backoff) and the start waits for the nodes.
- Make-before-break: a READY replica is drained only while the deployment keeps at least its target
  of READY replicas without it; replicas that serve nothing (STARTING, FAILED) are drained freely.
  Order: doomed spot replicas, outdated revisions, then surplus (least loaded first). Nor is one
  drained that is the last READY replica within reach (``max_rtt_ms``) of a client region the plan
  covers while a replica of the deployment within reach of that region is on its way (``reach``):
  the region stays served within its SLA until the replacement is READY.
- A deployment under rollout (``inp.rollouts``, see ``types.RevisionSplit``) splits each pool's
  target between its new revision and its old side (``revisions.pool_targets``); each side starts
  its own deficits (old-side starts run the old spec) and retires its own surplus, the old side's
  other revisions first. The make-before-break count is the routed READY replicas of both sides
  against the plan's target; replicas out of traffic (``revisions.unrouted``: blue_green's idle side,
  a withdrawn revision) count for nothing and drain freely.
- A plan that does not fully place a deployment (``inp.unplaced``: demand left unplaced, or no plan
  found) never takes away the capacity serving it: the deployment keeps as many READY replicas as
  were live when the plan first failed to place it (``types.ServingFloor``), up to what its demand
  asks for (target + shortfall), and its STARTING replicas of that time are not drained while the
  READY ones fall short of that.
  Replicas the plan moves are still drained one for one as the new ones become READY; surplus
  beyond demand drains (the autoscaler's scale-down delay already applies to that demand). A
  deleted deployment (no spec) drains whatever the plan says.
- A spot interruption notice makes the replica not count, so its replacement starts in the same
  round (or, without free GPUs, its pool is resized in that round); such directives are *urgent*:
  they pass the rate limit (and use its tokens).
- Rate limit per cluster: a token bucket of ``directives_per_min`` with ``burst``; what does not fit
  waits for the next round (``held``).
- Idle nodes (beyond what replicas use, starts on their way take and the plan needs; running or
  still provisioning with no start waiting for them) are released after ``pool_scale_down_delay_s``
  of being idle, down to the pool's ``nodes_min`` and never below the nodes that host a replica
  (``nodes``: the agent refuses such a shrink); a start or resize under way in the pool postpones
  the resize, not the delay. Nodes a cloud's group re-orders after a spot reclaim (it keeps its
  target; the reconciler already grew the pool for the replacements) are given back at once, up
  to the nodes reclaimed in the pool lately (``nodes.reclaims``). A pool whose replicas stay
  spread over more nodes than they need is consolidated (``nodes.moves``): one node's replicas
  move to its fuller nodes, make-before-break,
  and the emptied node is given back at once."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping

from meridian.fleet import models as fm
from meridian.fleet import runtime
from scheduler.reconciler import nodes as nodes_mod
from scheduler.reconciler import ratelimit, reach, revisions
from scheduler.reconciler import types as t
from scheduler.solver import problem

_URGENT, _RESIZE_UP, _START, _DRAIN_IDLE, _DRAIN_READY, _RESIZE_DOWN = range(6)
_LIVE = (fm.ReplicaState.STARTING, fm.ReplicaState.READY)
_URGENT_KEY = "urgent:"


@dataclasses.dataclass
class _Candidate:
    order: int
    cluster_id: str
    action: fm.Action
    reason: str
    urgent: bool = False


def reconcile(inp: t.ReconcileInput, state: t.ReconcileState, settings: t.ReconcileSettings, *,
              id_prefix: str) -> t.ReconcileResult:
    """The directives to send at ``inp.now_s`` and the state for the next round."""
    now = inp.now_s
    held: list[t.Held] = []
    reported = {r.replica_id for r in inp.replicas}
    pending_starts: dict[tuple[str, str], list[fm.StartReplica]] = {}
    draining: set[str] = set()
    resizing: set[str] = set()
    for od in inp.open_directives:
        a = od.directive.action
        if isinstance(a, fm.StartReplica) and a.replica_id not in reported:
            pending_starts.setdefault((a.deployment, f"{od.cluster_id}/{a.pool_id}"), []).append(a)
        elif isinstance(a, fm.DrainReplica):
            draining.add(a.replica_id)
        elif isinstance(a, fm.ResizePool):
            resizing.add(f"{od.cluster_id}/{a.pool_id}")

    free = {key: p.pool.gpus_free for key, p in inp.pools.items()}
    for (_d, pool), starts in pending_starts.items():
        if pool in free:
            free[pool] -= sum(s.gpu_count for s in starts)
    wanted_gpus = {key: 0 for key in inp.pools}
    waiting: dict[str, int] = {}
    candidates: list[_Candidate] = []

    floors: dict[str, t.ServingFloor] = {}
    by_deployment: dict[str, list[t.ReplicaInfo]] = {}
    for r in inp.replicas:
        by_deployment.setdefault(r.report.deployment, []).append(r)
    targets: dict[str, dict[str, int]] = {}
    for (name, pool_key), n in inp.target.replicas.items():
        if n > 0 and pool_key in inp.pools:
            targets.setdefault(name, {})[pool_key] = n
    planned_gpus = {key: 0 for key in inp.pools}
    for name, want in targets.items():
        info = inp.deployments.get(name)
        for key, n in want.items():
            planned_gpus[key] += n * (info.gpus_on(inp.pools[key].pool.gpu_type) if info is not None else 0)
    under_way = resizing | {key for (_d, key), starts in pending_starts.items() if starts}
    under_way |= {r.pool_key for r in inp.replicas if r.replica_id in draining
                  or r.report.state in (fm.ReplicaState.STARTING, fm.ReplicaState.DRAINING)}
    occupied = nodes_mod.by_pool(inp.replicas)
    moving, emptying, spread_since, emptied = nodes_mod.moves(inp, state, settings, occupied_by_pool=occupied,
                                                     busy_pools=under_way, wanted_gpus=planned_gpus)
    for name in sorted(set(inp.deployments) | set(by_deployment) | set(targets)):
        _deployment(name, inp, by_deployment.get(name, []), targets.get(name, {}), pending_starts, draining, free,
                    wanted_gpus, waiting, candidates, held, settings, state.floors, floors, moving, emptying)

    notice_nodes, reclaimed = nodes_mod.reclaims(inp, state, settings)
    idle_since = dict(state.pool_idle_since)
    pending_gpus: dict[str, int] = {}
    for (_d, pool_key), starts in pending_starts.items():
        pending_gpus[pool_key] = pending_gpus.get(pool_key, 0) + sum(s.gpu_count for s in starts)
    for key, info in sorted(inp.pools.items()):
        _pool(key, info, inp, pending_gpus, resizing, wanted_gpus, waiting, idle_since, candidates, held, settings,
              occupied.get(key, {}), reclaimed, emptied.get(key))

    candidates.sort(key=lambda c: (c.order, c.cluster_id, _describe(c.action)))
    buckets = dict(state.buckets)
    serial = state.serial
    out: list[t.PlannedDirective] = []
    for c in candidates:
        bucket = ratelimit.refill(buckets.get(c.cluster_id), now, settings.directives_per_min, settings.burst)
        if not c.urgent and bucket[0] < 1.0:
            held.append(t.Held(c.cluster_id, _describe(c.action), "rate limited"))
            buckets[c.cluster_id] = bucket
            continue
        buckets[c.cluster_id] = (bucket[0] - 1.0, bucket[1])
        serial += 1
        directive_id = f"{id_prefix}-{serial}"
        action = c.action
        if isinstance(action, fm.StartReplica) and not action.replica_id:
            action = dataclasses.replace(action, replica_id=f"{action.deployment}-{id_prefix}-{serial}")
        out.append(t.PlannedDirective(c.cluster_id, fm.Directive(directive_id, action), c.reason, c.urgent))
    return t.ReconcileResult(tuple(out), tuple(held), t.ReconcileState(buckets, idle_since, serial, floors, emptying,
                                                                       spread_since, notice_nodes, reclaimed))


def _deployment(name: str, inp: t.ReconcileInput, mine: list[t.ReplicaInfo], target: dict[str, int],
                pending_starts: dict, draining: set[str], free: dict[str, int], wanted_gpus: dict[str, int],
                waiting: dict[str, int], candidates: list[_Candidate], held: list[t.Held],
                settings: t.ReconcileSettings, floors_in: Mapping[str, t.ServingFloor],
                floors_out: dict[str, t.ServingFloor], moving: Mapping[str, str],
                emptying: Mapping[str, str]) -> None:
    now = inp.now_s
    info = inp.deployments.get(name)
    if info is None:
        target = {}
    leaving = {r.replica_id for r in mine if r.replica_id in draining or r.report.state is fm.ReplicaState.DRAINING}
    active = [r for r in mine if r.replica_id not in leaving and r.report.state in _LIVE]
    doomed = [r for r in active if r.doomed_at_s is not None]
    split = inp.rollouts.get(name) if info is not None else None
    hidden = revisions.unrouted(split, info, [r.report for r in active])

    counted: dict[str, dict[str, list[t.ReplicaInfo]]] = {revisions.NEW: {}, revisions.OLD: {}}
    retiring: list[tuple[int, t.ReplicaInfo, str]] = []
    for r in active:
        side = _side(split, info, r.report.revision)
        if r.doomed_at_s is not None:
            retiring.append((0, r, "spot interruption notice"))
        elif info is None:
            retiring.append((2, r, "deployment deleted"))
        elif side == revisions.WITHDRAWN:
            retiring.append((0, r, f"rolled back: revision {info.revision} withdrawn"))
        elif side == revisions.OUTDATED:
            retiring.append((1, r, f"outdated revision {r.report.revision} (now {_serving(split, info)})"))
        elif r.pool_key not in target:
            retiring.append((2, r, "not in the plan for this pool"))
        elif r.replica_id in moving:
            retiring.append((2, r, moving[r.replica_id]))
        else:
            counted[side].setdefault(r.pool_key, []).append(r)

    sides: list[tuple[str, t.DeploymentInfo, dict[str, int]]] = []
    if info is not None and split is None:
        sides = [(revisions.NEW, info, target)]
    elif info is not None and split is not None:
        present = {key: len(counted[revisions.NEW].get(key, []))
                   + _pending(pending_starts.get((name, key), []), split, info, revisions.NEW) for key in target}
        new_want, old_want = revisions.pool_targets(target, split, present)
        sides = [(revisions.NEW, info, new_want), (revisions.OLD, split.old, old_want)]

    # Starts for deficits; replacements of doomed replicas go first and are urgent.
    urgent_left = len(doomed)
    no_room: set[str] = set()  # pools where a start waits for GPUs the pool cannot grow to give
    guard = reach.Guard(name, inp, [r for r in active if r.report.state is fm.ReplicaState.READY
                                    and r.doomed_at_s is None and r.replica_id not in hidden])
    guard.coming.update(r.pool_key for r in active if r.report.state is fm.ReplicaState.STARTING
                        and r.doomed_at_s is None and r.replica_id not in hidden)
    guard.coming.update(key for (d, key), starts in pending_starts.items() if d == name and starts)
    for side, side_info, wants in sides:
        for pool_key, want in sorted(wants.items()):
            pool = inp.pools[pool_key]
            pending = _pending(pending_starts.get((name, pool_key), []), split, info, side)
            have = counted[side].get(pool_key, [])
            deficit = want - len(have) - pending
            gpus = side_info.gpus_on(pool.pool.gpu_type)
            wanted_gpus[pool_key] += want * gpus
            of_revision = f" of revision {side_info.revision}" if split is not None else ""
            for _ in range(max(0, deficit)):
                urgent = urgent_left > 0
                urgent_left -= 1 if urgent else 0
                if free[pool_key] < gpus:
                    if _cannot_grow(pool_key, inp):
                        no_room.add(pool_key)
                    else:
                        guard.coming.add(pool_key)  # on its way once the pool has grown
                    waiting[pool_key] = waiting.get(pool_key, 0) + gpus
                    if urgent:
                        waiting[_URGENT_KEY + pool_key] = 1  # the resize serves a spot replacement
                    held.append(t.Held(pool.cluster_id, f"start {name} on {pool_key}",
                                       f"waiting for {gpus} free GPU(s) in the pool"))
                    continue
                free[pool_key] -= gpus
                action = fm.StartReplica(
                    replica_id="", deployment=name, revision=side_info.revision,
                    runtime=runtime.runtime_spec(side_info.doc, pool.pool.gpu_type), pool_id=pool.pool.pool_id,
                    gpu_count=gpus, deployment_spec_json=side_info.spec_json,
                    avoid_nodes=(emptying[pool_key],) if pool_key in emptying else ())
                why = ("replace a replica under spot interruption" if urgent
                       else f"plan wants {want}{of_revision} on {pool_key}")
                candidates.append(_Candidate(_URGENT if urgent else _START, pool.cluster_id, action, why, urgent))
                guard.coming.add(pool_key)
            if side == revisions.OLD:  # the old side's other revisions give way first
                surplus = sorted(have, key=lambda r: (r.report.revision == split.old.revision, _drain_rank(r)))
                why = f"rollout: revision {info.revision} takes the place of an old-revision replica on {pool_key}"
            else:
                surplus = sorted(have, key=_drain_rank)
                why = f"plan wants {want}{of_revision} on {pool_key}"
            for r in surplus[: max(0, -deficit)]:
                retiring.append((1 if side == revisions.OLD else 2, r, why))

    # Drains: FAILED always; not-serving replicas freely; READY ones only while the deployment keeps
    # its target of READY replicas without them (make-before-break), and, while the plan does not
    # place it fully, its serving floor.
    for r in mine:
        if r.report.state is fm.ReplicaState.FAILED and r.replica_id not in leaving:
            candidates.append(_Candidate(_DRAIN_IDLE, r.cluster_id, fm.DrainReplica(r.replica_id, 0),
                                         f"replica failed: {r.report.message[:200]}"))
    desired = sum(target.values())
    # A spot replica past its deadline is drained anyway and serves nothing more: it does not let
    # another READY replica go.
    # Replicas out of traffic (a rollout's idle side) do not let another READY replica go either.
    ready = sum(1 for r in active if r.report.state is fm.ReplicaState.READY and not _gone(r, now)
                and r.replica_id not in hidden)
    floor = _floor(name, info, inp, active, floors_in)
    need = desired
    if floor is not None:
        short = inp.unplaced[name]
        need = max(desired, floor.count if short.replicas is None else min(floor.count, desired + short.replicas))
    may_drain_ready = max(0, ready - need)
    # No room to surge: a replacement waits for GPUs in a pool that cannot grow, while a replica it
    # replaces holds them. Make-before-break would wait forever (a rollout on a full fleet), so one
    # such replica goes first (Kubernetes' maxUnavailable 1): only while nothing of this deployment is
    # starting or leaving, and never its last READY routed replica.
    make_room = (bool(no_room) and may_drain_ready <= 0 and ready > 1 and not leaving
                 and not any(pending_starts.get((name, key)) for key in inp.pools))
    for _rank, r, why in sorted(retiring, key=lambda x: (x[0], _drain_rank(x[1]))):
        gone_now = _gone(r, now)
        deadline = settings.drain_deadline_s
        if r.doomed_at_s is not None:
            deadline = max(0, min(deadline, int(r.doomed_at_s - now)))
        kept = floor is not None and r.replica_id in floor.replica_ids
        if r.report.state is fm.ReplicaState.READY and not gone_now and r.replica_id not in hidden:
            if may_drain_ready <= 0 and make_room and r.pool_key in no_room and not kept:
                make_room = False
                why = f"{why}; no room to start its replacement first (the pool cannot grow): it goes first"
                guard.drained(r)
                candidates.append(_Candidate(_DRAIN_READY, r.cluster_id, fm.DrainReplica(r.replica_id, deadline), why))
                continue
            if may_drain_ready <= 0:
                if floor is not None and need > desired:
                    reason = (f"keeping {min(ready, need)} ready replica(s) of {name}: the plan could not place it "
                              f"({inp.unplaced[name].reason})")
                else:
                    reason = (f"make-before-break: {name} has {ready} ready, needs {desired}; waiting for "
                              "replacements to be ready")
                held.append(t.Held(r.cluster_id, f"drain {r.replica_id}", reason))
                continue
            blocked = guard.blocks(r) if r.doomed_at_s is None else None
            if blocked:
                held.append(t.Held(r.cluster_id, f"drain {r.replica_id}", blocked))
                continue
            may_drain_ready -= 1
            guard.drained(r)
            order = _DRAIN_READY
            if kept:  # drained by us with a READY replica in its place: the floor stays where it is
                floor = t.ServingFloor(floor.replica_ids - {r.replica_id}, floor.drained + 1)
        elif kept and ready < need:  # on its way to serve demand the READY ones do not cover
            held.append(t.Held(r.cluster_id, f"drain {r.replica_id}",
                               f"keeping {name}'s starting replica: the plan could not place it "
                               f"({inp.unplaced[name].reason})"))
            continue
        else:
            order = _DRAIN_IDLE
        candidates.append(_Candidate(order, r.cluster_id, fm.DrainReplica(r.replica_id, deadline), why))
    if floor is not None:
        floors_out[name] = floor


def _cannot_grow(pool_key: str, inp: t.ReconcileInput) -> bool:
    """The pool can give no more GPUs: at nodes_max (counting nodes on their way) or barred from
    growing (a stock-out backoff)."""
    p = inp.pools[pool_key].pool
    return pool_key in inp.no_growth or p.nodes_current + p.nodes_pending >= max(p.nodes_max, p.nodes_min)


def _side(split: t.RevisionSplit | None, info: t.DeploymentInfo | None, revision: str) -> str:
    if info is None:
        return revisions.OUTDATED
    if split is None:
        return revisions.NEW if revision == info.revision else revisions.OUTDATED
    return revisions.side_of(split, info, revision)


def _serving(split: t.RevisionSplit | None, info: t.DeploymentInfo) -> str:
    """The revision replicas should run (the old one once a rollout rolled back)."""
    return split.old.revision if split is not None and split.withdrawn else info.revision


def _pending(starts: list[fm.StartReplica], split: t.RevisionSplit | None, info: t.DeploymentInfo | None,
             side: str) -> int:
    """Open starts of one side (every open start of the deployment when it is not under rollout)."""
    if split is None or info is None:
        return len(starts)
    return sum(1 for s in starts if (s.revision == info.revision) == (side == revisions.NEW))


def _floor(name: str, info: t.DeploymentInfo | None, inp: t.ReconcileInput, active: list[t.ReplicaInfo],
           floors_in: Mapping[str, t.ServingFloor]) -> t.ServingFloor | None:
    """The serving floor of ``name`` this round: None while the plan places it fully (or it is
    deleted); else the floor kept since the plan first failed to place it, less the replicas that
    are no longer live (a spot replica past its deadline is not), or, on the first such round, every
    live replica."""
    if info is None or name not in inp.unplaced:
        return None
    live = frozenset(r.replica_id for r in active if not _gone(r, inp.now_s))
    prev = floors_in.get(name)
    if prev is None:
        return t.ServingFloor(live)
    return t.ServingFloor(prev.replica_ids & live, prev.drained)


def _pool(key: str, info: t.PoolInfo, inp: t.ReconcileInput, pending_gpus: dict[str, int], resizing: set[str],
          wanted_gpus: dict[str, int], waiting: dict[str, int], idle_since: dict[str, float],
          candidates: list[_Candidate], held: list[t.Held], settings: t.ReconcileSettings,
          occupied: Mapping[str, int] | None, reclaimed: dict[str, tuple[int, float]],
          emptied: str | None = None) -> None:
    """``occupied``: node id -> GPUs held there (``nodes.by_pool``; None when a node is unknown);
    ``reclaimed``: ``nodes.reclaims``' second part, less what this round gives back; ``emptied``: the
    node a consolidation has just emptied in the pool (``nodes.moves``), released at once."""
    p = info.pool
    gpn = p.gpus_per_node
    if gpn <= 0:
        return
    in_use = max(0, p.nodes_current * gpn - p.gpus_free)
    pending = pending_gpus.get(key, 0)
    have_nodes = p.nodes_current + p.nodes_pending
    # Never below the nodes that host a replica: the agent refuses that.
    busy_nodes = len(occupied) if occupied is not None else 0
    need = waiting.get(key, 0)
    if need:
        idle_since.pop(key, None)
        nodes = max(nodes_mod.needed_nodes(p, in_use + pending + need), busy_nodes)
        if nodes < have_nodes and key not in resizing and _backfill(key, info, have_nodes, nodes, reclaimed,
                                                                    candidates):
            return
        if key in inp.no_growth:
            held.append(t.Held(info.cluster_id, f"grow {key}", inp.no_growth[key]))
        elif key in resizing or p.nodes_pending > 0:
            held.append(t.Held(info.cluster_id, f"grow {key}", "a resize is already under way"))
        elif nodes > have_nodes:
            urgent = _URGENT_KEY + key in waiting
            candidates.append(_Candidate(_URGENT if urgent else _RESIZE_UP, info.cluster_id,
                                         fm.ResizePool(p.pool_id, nodes),
                                         f"{need} GPU(s) wanted beyond the {p.gpus_free} free", urgent))
        else:
            held.append(t.Held(info.cluster_id, f"grow {key}", f"pool is at nodes_max ({p.nodes_max})"))
        return
    steady = max(in_use + pending, wanted_gpus.get(key, 0))
    nodes = max(nodes_mod.needed_nodes(p, steady), busy_nodes)
    if have_nodes <= nodes:
        idle_since.pop(key, None)
        return
    # Nodes beyond what replicas use, starts on their way take and the plan wants, running or still
    # being provisioned (no start waits for them: an ASG's backfill, an order the plan no longer
    # needs): idle from when first seen, billed until given back. A start or resize under way
    # postpones the directive, not the clock.
    since = idle_since.setdefault(key, inp.now_s)
    waited = inp.now_s - since >= settings.pool_scale_down_delay_s
    if not waited and not reclaimed.get(key, (0, 0.0))[0] and emptied is None:
        return
    if pending or key in resizing:
        held.append(t.Held(info.cluster_id, f"shrink {key}", "a start or resize is under way in the pool"))
        return
    # Before the delay only nodes known to be surplus go: a cloud's backfill after a reclaim, and the
    # node a consolidation emptied (its replicas' spread already waited the delay).
    if not waited:
        if not _backfill(key, info, have_nodes, nodes, reclaimed, candidates) and emptied is not None:
            candidates.append(_Candidate(_RESIZE_DOWN, info.cluster_id, fm.ResizePool(p.pool_id, have_nodes - 1),
                                         f"node {emptied} emptied by consolidation"))
        return
    idle_since.pop(key, None)
    candidates.append(_Candidate(_RESIZE_DOWN, info.cluster_id, fm.ResizePool(p.pool_id, nodes),
                                 f"{have_nodes - nodes} idle node(s) for {settings.pool_scale_down_delay_s:g}s"
                                 + (f" ({p.nodes_pending} still provisioning)" if p.nodes_pending else "")))


def _backfill(key: str, info: t.PoolInfo, have_nodes: int, nodes: int, reclaimed: dict[str, tuple[int, float]],
              candidates: list[_Candidate]) -> bool:
    """Give back at once the nodes beyond ``nodes``, up to those reclaimed in the pool lately (a
    cloud's group re-orders a reclaimed spot node the plan already replaced): True when it does."""
    count, at = reclaimed.get(key, (0, 0.0))
    drop = min(count, have_nodes - nodes)
    if drop <= 0:
        return False
    reclaimed[key] = (count - drop, at)
    candidates.append(_Candidate(_RESIZE_DOWN, info.cluster_id, fm.ResizePool(info.pool.pool_id, have_nodes - drop),
                                 f"{drop} node(s) beyond the plan's need, ordered by the cloud after "
                                 f"{count} spot reclaim(s)"))
    return True


def _gone(r: t.ReplicaInfo, now_s: float) -> bool:
    """A replica under a spot notice whose deadline has come: its node is being reclaimed."""
    return r.doomed_at_s is not None and r.doomed_at_s <= now_s


def _drain_rank(r: t.ReplicaInfo) -> tuple:
    """Drain order among equals: not-ready first, newest first, then least loaded."""
    return (r.report.state is fm.ReplicaState.READY, -r.report.started_at, r.report.load.outstanding, r.replica_id)


def _describe(action: fm.Action) -> str:
    if isinstance(action, fm.StartReplica):
        return f"start {action.deployment} on {action.pool_id}"
    if isinstance(action, fm.DrainReplica):
        return f"drain {action.replica_id}"
    return f"resize {action.pool_id} to {action.target_nodes}"


# Limits the user sets on spending: a plan held back by one of them serves less on purpose, so the
# replicas beyond it are not kept (a missing cluster never shows as one of these: it shows as
# capacity, isolation, placement, gpu_type, memory, ttft, tpot or max_rtt).
USER_LIMITS = frozenset({"team_quota", "budget"})


def unplaced_deployments(result: problem.PlacementResult,
                         deployments: Iterable[str]) -> dict[str, t.Shortfall]:
    """``ReconcileInput.unplaced`` from a solver result: the deployments it does not fully place, with
    why in words and the unplaced replicas. Every one of ``deployments`` (shortfall unknown) when the
    solve found no plan (its placement is only the current one kept); else those with unplaced demand
    or an uncovered region (one replica each), with the constraints that stop them, except what is held
    back only by a user's spending limit (``USER_LIMITS``)."""
    if result.status not in (problem.SolveStatus.OPTIMAL, problem.SolveStatus.FEASIBLE):
        why = f"the solve found no plan ({result.status.value}{': ' + result.message if result.message else ''})"
        return {name: t.Shortfall(why[:400]) for name in deployments}
    parts: dict[str, list[str]] = {}
    replicas: dict[str, float] = {}
    for u in result.unplaced:
        if u.replicas > 0 and u.constraint not in USER_LIMITS:
            detail = u.reason.split(" unplaced: ", 1)[-1]
            parts.setdefault(u.deployment, []).append(f"{u.replicas:g} for {u.client_region}: {detail}")
            replicas[u.deployment] = replicas.get(u.deployment, 0.0) + u.replicas
    for c in result.uncovered:
        # A covered region the plan cannot reach needs one replica more than it places.
        if not c.served_from and c.constraint not in USER_LIMITS:
            parts.setdefault(c.deployment, []).append(f"coverage of {c.client_region}: {c.reason}")
            replicas[c.deployment] = replicas.get(c.deployment, 0.0) + 1
    return {name: t.Shortfall("; ".join(p)[:400], math.ceil(replicas[name] - 1e-6))
            for name, p in sorted(parts.items())}


def open_replica_ids(directives: Iterable[t.OpenDirective]) -> set[str]:
    """Replica ids that open start directives will create."""
    return {od.directive.action.replica_id for od in directives if isinstance(od.directive.action, fm.StartReplica)}
