"""Carrying out the scheduler's directives: idempotently, refusing what cannot be done.

``plan_*`` are pure: the cluster as the agent sees it in, a decision out (go ahead with a
placement, already done, or refused with a reason). ``DirectiveExecutor`` performs them.
A refusal happens before anything is reserved, spawned or asked of the cloud, so a directive is
never half-done. Each directive id is journalled before it is acted on: a resent id is
acknowledged DUPLICATE and not redone, across agent restarts too.

Acknowledgements: a directive that needs time (a replica starting, a drain, a pool resize) is
acknowledged ACCEPTED at once and SUCCEEDED or FAILED when it ends; REFUSED and DUPLICATE are final."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Mapping

import runtime_adapter

from meridian.fleet import models
from meridian.spec import cluster as cluster_spec

from agents import allocation, backends, outbox as outbox_mod, state
from agents import metrics as metrics_mod
from agents.providers import base as provider_base
from agents.providers.errors import CloudError

log = logging.getLogger(__name__)

REPLICA_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclasses.dataclass(frozen=True)
class View:
    """The cluster as the agent sees it when a directive arrives. ``node_sets``: per pool, the nodes
    that can take a replica (the backend's node list where it has one; default: the pool's running
    nodes); ``cloud_ids``: node name -> the cloud's machine id, for the nodes a shrink must keep."""

    pools: Mapping[str, provider_base.PoolStatus]  # latest discovery; empty before the first one
    declared: Mapping[str, cluster_spec.PoolDecl]
    holdings: tuple[allocation.Holding, ...] = ()
    replicas: Mapping[str, tuple[str, str, models.ReplicaState]] = dataclasses.field(default_factory=dict)
    noticed_nodes: frozenset[str] = frozenset()  # nodes under an interruption notice
    node_sets: Mapping[str, allocation.NodeSet] = dataclasses.field(default_factory=dict)
    cloud_ids: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Refuse:
    reason: str


@dataclasses.dataclass(frozen=True)
class AlreadyDone:
    reason: str


@dataclasses.dataclass(frozen=True)
class StartPlan:
    node_id: str
    gpu_ids: tuple[int, ...]
    gpu_type: str


@dataclasses.dataclass(frozen=True)
class ResizePlan:
    keep_nodes: frozenset[str]


def action_name(action: models.Action) -> str:
    return {models.StartReplica: "start_replica", models.DrainReplica: "drain_replica",
            models.ResizePool: "resize_pool"}.get(type(action), type(action).__name__)


def _pool_ref(view: View, pool_id: str) -> Refuse | provider_base.PoolStatus:
    if pool_id not in view.declared:
        return Refuse(f"unknown pool {pool_id!r}; this cluster's pools: {', '.join(sorted(view.declared)) or 'none'}")
    status = view.pools.get(pool_id)
    if status is None:
        return Refuse(f"pool {pool_id!r} has not been discovered yet (the cloud has not answered); retry later")
    return status


def plan_start(a: models.StartReplica, view: View) -> StartPlan | AlreadyDone | Refuse:
    if not REPLICA_ID.match(a.replica_id or ""):
        return Refuse(f"replica_id {a.replica_id!r} must be 1-128 characters of letters, digits, '.', '_' or '-'")
    if not a.deployment:
        return Refuse("deployment is empty")
    existing = view.replicas.get(a.replica_id)
    if existing is not None and existing[2] in backends.LIVE_STATES:
        if (existing[0], existing[1]) == (a.deployment, a.revision):
            return AlreadyDone(f"replica {a.replica_id} already runs {a.deployment}@{a.revision}")
        return Refuse(f"replica_id {a.replica_id!r} is in use by {existing[0]}@{existing[1]}")
    if a.gpu_count < 1:
        return Refuse(f"gpu_count must be >= 1, got {a.gpu_count}")
    if a.runtime.tp_size < 1 or a.gpu_count % a.runtime.tp_size:
        return Refuse(f"runtime.tp_size {a.runtime.tp_size} must divide gpu_count {a.gpu_count}")
    if not a.runtime.model_path:
        return Refuse("runtime.model_path is empty")
    if a.deployment_spec_json:
        try:
            if not isinstance(json.loads(a.deployment_spec_json), dict):
                return Refuse("deployment_spec_json must be a JSON object")
        except ValueError as exc:
            return Refuse(f"deployment_spec_json is not valid JSON: {exc}")
    status = _pool_ref(view, a.pool_id)
    if isinstance(status, Refuse):
        return status
    nodes = view.node_sets.get(a.pool_id) or allocation.NodeSet(a.pool_id, status.pool.gpus_per_node, status.nodes,
                                                                instance_type=status.pool.instance_type)
    choice = allocation.choose_gpus(nodes, view.holdings, a.gpu_count,
                                    avoid_nodes=view.noticed_nodes | frozenset(a.avoid_nodes))
    if isinstance(choice, str):
        return Refuse(choice)
    return StartPlan(node_id=choice[0], gpu_ids=choice[1], gpu_type=status.pool.gpu_type)


def plan_drain(a: models.DrainReplica, view: View) -> AlreadyDone | Refuse | None:
    """None: go ahead and drain."""
    existing = view.replicas.get(a.replica_id)
    if existing is None:
        return Refuse(f"unknown replica {a.replica_id!r}")
    if existing[2] in (models.ReplicaState.STOPPED, models.ReplicaState.FAILED):
        return AlreadyDone(f"replica {a.replica_id} is already {existing[2].value}")
    return None


def plan_resize(a: models.ResizePool, view: View) -> ResizePlan | Refuse:
    status = _pool_ref(view, a.pool_id)
    if isinstance(status, Refuse):
        return status
    decl = view.declared[a.pool_id]
    lo, hi = max(decl.min_nodes, status.pool.nodes_min), min(decl.max_nodes, status.pool.nodes_max)
    if not lo <= a.target_nodes <= hi:
        return Refuse(f"target_nodes {a.target_nodes} is outside pool {a.pool_id}'s bounds [{lo}, {hi}]")
    busy = sorted({h.node_id for h in view.holdings if h.pool_id == a.pool_id})
    refusal = shrink_refusal(a.pool_id, a.target_nodes, len(busy))
    if refusal is not None:
        return Refuse(refusal)
    return ResizePlan(keep_nodes=frozenset(view.cloud_ids.get(n, n) for n in busy))


def shrink_refusal(pool_id: str, target_nodes: int, busy_nodes: int) -> str | None:
    """Why a resize to ``target_nodes`` must be refused: it would take a node that hosts a replica
    (the cloud picks which nodes go once the pool is below its busy ones); None when it may go."""
    if target_nodes < busy_nodes:
        return (f"{busy_nodes} node(s) of pool {pool_id} host replicas; drain them before shrinking "
                f"to {target_nodes}")
    return None


class DirectiveExecutor:
    """Acts on directives. ``view`` gives the current cluster view; ``on_cloud_error(error,
    directive_id)`` reports a classified cloud error (events, status, metrics) and is the agent's;
    ``on_change`` asks the agent to refresh inventory and reports now."""

    def __init__(self, *, journal: state.DirectiveJournal, replicas: backends.ReplicaBackend,
                 provider: provider_base.Provider, view: Callable[[], View], outbox: outbox_mod.Outbox,
                 metrics: metrics_mod.AgentMetrics, on_cloud_error: Callable[[CloudError, str], None],
                 on_change: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.time,
                 ready_timeout_s: float = 3600.0):
        self._journal = journal
        self._replicas = replicas
        self._provider = provider
        self._view = view
        self._outbox = outbox
        self._metrics = metrics
        self._on_cloud_error = on_cloud_error
        self._on_change = on_change
        self._clock = clock
        self._ready_timeout_s = ready_timeout_s
        self._tasks: set[asyncio.Task] = set()
        self._pool_locks: dict[str, asyncio.Lock] = {}

    def _ack(self, d: models.Directive, outcome: models.DirectiveOutcome, reason: str = "", *,
             journal: bool = True) -> None:
        if journal:
            self._journal.record(d.directive_id, outcome, reason, self._clock())
        self._outbox.put_ack(models.DirectiveAck(d.directive_id, outcome, reason))
        self._metrics.directive(action_name(d.action), outcome)
        bad = outcome in (models.DirectiveOutcome.REFUSED, models.DirectiveOutcome.FAILED)
        level = logging.WARNING if bad else logging.INFO
        log.log(level, "directive id=%s action=%s outcome=%s reason=%r", d.directive_id, action_name(d.action),
                outcome.value, reason)

    def _spawn(self, coro, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def handle(self, d: models.Directive) -> None:
        """Validate and act on one directive, or acknowledge it as a duplicate or refused."""
        seen = self._journal.get(d.directive_id)
        if seen is not None:
            note = f"already handled: {seen.outcome.value}" + (f" ({seen.reason})" if seen.reason else "")
            self._ack(d, models.DirectiveOutcome.DUPLICATE, note, journal=False)
            return
        if not d.directive_id:
            self._ack(d, models.DirectiveOutcome.REFUSED, "directive_id is empty", journal=False)
            return
        if not self._journal.observe_fencing_token(d.fencing_token):
            self._ack(d, models.DirectiveOutcome.REFUSED,
                      f"stale fencing token {d.fencing_token} < {self._journal.fencing_token}: "
                      "the sender is no longer the leader")
            return
        a = d.action
        try:
            if isinstance(a, models.StartReplica):
                await self._start(d, a)
            elif isinstance(a, models.DrainReplica):
                self._drain(d, a)
            elif isinstance(a, models.ResizePool):
                self._resize(d, a)
            else:
                self._ack(d, models.DirectiveOutcome.REFUSED, f"unsupported action {type(a).__name__}")
        except Exception as exc:  # an unexpected failure must still be acknowledged
            log.exception("directive failed id=%s", d.directive_id)
            self._ack(d, models.DirectiveOutcome.FAILED, f"{type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ start

    async def _start(self, d: models.Directive, a: models.StartReplica) -> None:
        plan = plan_start(a, self._view())
        if isinstance(plan, Refuse):
            self._ack(d, models.DirectiveOutcome.REFUSED, plan.reason)
            return
        if isinstance(plan, AlreadyDone):
            self._ack(d, models.DirectiveOutcome.SUCCEEDED, plan.reason)
            return
        if self._replicas.get(a.replica_id) is not None:
            self._replicas.forget(a.replica_id)  # an ended replica of the same id
        try:
            prepared = self._replicas.prepare(a, directive_id=d.directive_id, node_id=plan.node_id,
                                              gpu_ids=plan.gpu_ids, gpu_type=plan.gpu_type)
        except backends.Refused as exc:
            self._ack(d, models.DirectiveOutcome.REFUSED, str(exc))
            return
        except runtime_adapter.LaunchError as exc:
            self._ack(d, models.DirectiveOutcome.REFUSED, f"malformed runtime spec: {exc}")
            return
        self._journal.record(d.directive_id, models.DirectiveOutcome.ACCEPTED, "", self._clock())
        try:
            where = await self._replicas.launch(prepared)
        except (OSError, ValueError, RuntimeError) as exc:
            self._ack(d, models.DirectiveOutcome.FAILED, f"could not start the engine: {exc}")
            return
        self._ack(d, models.DirectiveOutcome.ACCEPTED, where)
        self._on_change()
        self._spawn(self._await_ready(d, a.replica_id), f"ready-{a.replica_id}")

    async def _await_ready(self, d: models.Directive, replica_id: str) -> None:
        try:
            await self._replicas.wait_ready(replica_id, self._ready_timeout_s)
        except (runtime_adapter.ReplicaFailed, TimeoutError, KeyError) as exc:
            self._ack(d, models.DirectiveOutcome.FAILED, str(exc).split("\n")[0][:500])
        else:
            self._ack(d, models.DirectiveOutcome.SUCCEEDED, "ready")
        self._on_change()

    # ------------------------------------------------------------------ drain

    def _drain(self, d: models.Directive, a: models.DrainReplica) -> None:
        decision = plan_drain(a, self._view())
        if isinstance(decision, Refuse):
            self._ack(d, models.DirectiveOutcome.REFUSED, decision.reason)
            return
        if isinstance(decision, AlreadyDone):
            self._ack(d, models.DirectiveOutcome.SUCCEEDED, decision.reason)
            return
        self._journal.record(d.directive_id, models.DirectiveOutcome.ACCEPTED, "", self._clock())
        self._ack(d, models.DirectiveOutcome.ACCEPTED, f"draining within {a.deadline_s}s")
        self._spawn(self._run_drain(d, a), f"drain-{a.replica_id}")

    async def _run_drain(self, d: models.Directive, a: models.DrainReplica) -> None:
        try:
            result = await self._replicas.drain(a.replica_id, float(a.deadline_s))
        except Exception as exc:
            log.exception("drain failed replica=%s", a.replica_id)
            self._ack(d, models.DirectiveOutcome.FAILED, f"{type(exc).__name__}: {exc}")
        else:
            note = (f"stopped; {result.outstanding_at_term} request(s) outstanding at the deadline"
                    if result.deadline_hit else "stopped after in-flight requests finished")
            self._ack(d, models.DirectiveOutcome.SUCCEEDED, note + ("; SIGKILL needed" if result.killed else ""))
        self._on_change()

    # ------------------------------------------------------------------ resize

    def _resize(self, d: models.Directive, a: models.ResizePool) -> None:
        plan = plan_resize(a, self._view())
        if isinstance(plan, Refuse):
            self._ack(d, models.DirectiveOutcome.REFUSED, plan.reason)
            return
        self._journal.record(d.directive_id, models.DirectiveOutcome.ACCEPTED, "", self._clock())
        self._ack(d, models.DirectiveOutcome.ACCEPTED, f"resizing {a.pool_id} to {a.target_nodes} node(s)")
        self._spawn(self._run_resize(d, a, plan), f"resize-{a.pool_id}")

    async def _run_resize(self, d: models.Directive, a: models.ResizePool, plan: ResizePlan) -> None:
        lock = self._pool_locks.setdefault(a.pool_id, asyncio.Lock())
        async with lock:
            try:
                await self._provider.resize(a.pool_id, a.target_nodes, keep_nodes=plan.keep_nodes)
            except CloudError as exc:
                err = exc.with_pool(exc.pool_id or a.pool_id, exc.operation or "resize")
                self._on_cloud_error(err, d.directive_id)
                self._ack(d, models.DirectiveOutcome.FAILED, str(err))
            else:
                self._ack(d, models.DirectiveOutcome.SUCCEEDED, f"{a.pool_id} target is {a.target_nodes} node(s)")
        self._on_change()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


__all__ = ["AlreadyDone", "DirectiveExecutor", "Refuse", "ResizePlan", "StartPlan", "View", "shrink_refusal",
           "action_name", "plan_drain", "plan_resize", "plan_start"]
