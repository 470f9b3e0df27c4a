"""Directive decisions (pure) and the executor's refusals, duplicates and failures: a directive that
cannot be carried out is refused with a reason before anything is reserved, spawned or asked of
the cloud."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest

from meridian.fleet import models

from agents import allocation, backends, directives, metrics, outbox, state
from agents.backends import local
from agents.providers import sim
from agents.providers.base import PoolStatus
from agents.providers.errors import CloudError

RT = models.RuntimeSpec(model_path="Qwen/Qwen2.5-0.5B-Instruct", served_model_name="qwen")


def start(rid="r1", pool="l4x4", gpus=2, runtime=RT, deployment="chat", revision="rev1", spec_json=""):
    return models.StartReplica(rid, deployment, revision, runtime, pool, gpus, spec_json)


@pytest.fixture
def view(cluster, clock):
    statuses = {s.pool.pool_id: s for s in sim.SimCloud(cluster, clock=clock, rng=random.Random(0)).snapshot()}
    return directives.View(pools=statuses, declared={p.name: p for p in cluster.spec.pools})


def with_holdings(view, *holdings, replicas_=None):
    return directives.View(view.pools, view.declared, tuple(holdings), replicas_ or {}, view.noticed_nodes)


def test_start_is_placed_on_a_node(view):
    """A feasible start gets a node, GPU indices and the pool's GPU type."""
    plan = directives.plan_start(start(), view)
    assert isinstance(plan, directives.StartPlan)
    assert plan.gpu_ids == (0, 1) and plan.gpu_type == "L4" and plan.node_id in view.pools["l4x4"].nodes


def test_start_avoids_the_nodes_the_scheduler_is_emptying(view):
    """``avoid_nodes`` (a node the scheduler consolidates away) keeps the replica off that node; with
    every node avoided the start is refused, saying there is no room."""
    nodes = list(view.pools["l4-spot"].nodes)
    assert len(nodes) == 2
    one = start(pool="l4-spot", gpus=1)
    first = directives.plan_start(one, view)
    avoided = directives.plan_start(dataclasses.replace(one, avoid_nodes=(first.node_id,)), view)
    assert isinstance(avoided, directives.StartPlan) and avoided.node_id != first.node_id
    everywhere = directives.plan_start(dataclasses.replace(one, avoid_nodes=tuple(nodes)), view)
    assert isinstance(everywhere, directives.Refuse) and "not enough free GPUs" in everywhere.reason


@pytest.mark.parametrize("action, reason", [
    (start(pool="nope"), "unknown pool 'nope'"),
    (start(gpus=5), "needs 5 GPUs on one node"),
    (start(pool="h100", gpus=1), "not enough free GPUs in pool h100"),
    (start(gpus=2, runtime=models.RuntimeSpec("m", "s", tp_size=3)), "tp_size 3 must divide gpu_count 2"),
    (start(gpus=0), "gpu_count must be >= 1"),
    (start(rid="bad id!"), "replica_id"),
    (start(deployment=""), "deployment is empty"),
    (start(runtime=models.RuntimeSpec("", "s")), "model_path is empty"),
    (start(spec_json="{oops"), "not valid JSON"),
])
def test_start_refusals_say_why(view, action, reason):
    """Unknown pool, too few GPUs, malformed spec: refused with a reason naming the problem."""
    plan = directives.plan_start(action, view)
    assert isinstance(plan, directives.Refuse) and reason in plan.reason


def test_start_of_an_existing_replica(view):
    """The same replica and revision already running is done; another deployment on its id is refused."""
    running = {"r1": ("chat", "rev1", models.ReplicaState.READY)}
    v = with_holdings(view, replicas_=running)
    assert isinstance(directives.plan_start(start(), v), directives.AlreadyDone)
    assert isinstance(directives.plan_start(start(revision="rev2"), v), directives.Refuse)


def test_undiscovered_pool_is_refused(cluster):
    """Before the cloud has answered, starts are refused (retry later), not guessed."""
    v = directives.View(pools={}, declared={p.name: p for p in cluster.spec.pools})
    assert "not been discovered" in directives.plan_start(start(), v).reason


def test_resize_bounds_and_busy_nodes(view):
    """A resize outside the pool's bounds, or below the nodes hosting replicas, is refused."""
    assert "outside pool l4's bounds [0, 4]" in directives.plan_resize(models.ResizePool("l4", 5), view).reason
    n1, n2 = view.pools["l4"].nodes
    busy = with_holdings(view, allocation.Holding("a", "l4", n1, (0,), 1), allocation.Holding("b", "l4", n2, (0,), 2))
    assert "drain them before shrinking" in directives.plan_resize(models.ResizePool("l4", 1), busy).reason
    plan = directives.plan_resize(models.ResizePool("l4", 3), busy)
    assert plan.keep_nodes == {n1, n2}


def test_drain_decisions(view):
    """Draining an unknown replica is refused; an already stopped one is done."""
    assert isinstance(directives.plan_drain(models.DrainReplica("x"), view), directives.Refuse)
    v = with_holdings(view, replicas_={"x": ("chat", "r", models.ReplicaState.STOPPED)})
    assert isinstance(directives.plan_drain(models.DrainReplica("x"), v), directives.AlreadyDone)
    v = with_holdings(view, replicas_={"x": ("chat", "r", models.ReplicaState.READY)})
    assert directives.plan_drain(models.DrainReplica("x"), v) is None


class Harness:
    """An executor over a real local backend (nothing is spawned on the paths tested here) and a sim cloud."""

    def __init__(self, cluster, clock, tmp_path, capacity_limits=None):
        self.provider = sim.SimProvider(sim.SimCloud(cluster, clock=clock, rng=random.Random(0),
                                                     capacity_limits=capacity_limits))
        self.cluster = cluster
        self.journal = state.DirectiveJournal(tmp_path / "directives.json")
        self.outbox = outbox.Outbox()
        self.metrics = metrics.AgentMetrics("test")
        self.manager = local.LocalBackend(backends.ReplicaSettings(), tmp_path)
        self.errors: list[tuple[CloudError, str]] = []
        self.statuses: dict[str, PoolStatus] = {}
        self.executor = directives.DirectiveExecutor(
            journal=self.journal, replicas=self.manager, provider=self.provider, view=self.view, outbox=self.outbox,
            metrics=self.metrics, on_cloud_error=lambda e, d: self.errors.append((e, d)), clock=clock)

    def view(self):
        return directives.View(self.statuses, {p.name: p for p in self.cluster.spec.pools},
                               tuple(self.manager.holdings()), {}, frozenset())

    async def discover(self):
        self.statuses = {s.pool.pool_id: s for s in await self.provider.discover()}

    def acks(self):
        return self.outbox.take().acks


async def test_refused_directive_leaves_nothing_behind(cluster, clock, tmp_path):
    """A refused start reserves nothing, is journalled, and a resend is acknowledged DUPLICATE."""
    h = Harness(cluster, clock, tmp_path)
    await h.discover()
    d = models.Directive("d1", start(pool="h100", gpus=8), 1)
    await h.executor.handle(d)
    (ack,) = h.acks()
    assert ack.outcome == models.DirectiveOutcome.REFUSED and "not enough free GPUs" in ack.reason
    assert h.manager.all() == [] and not (tmp_path / "placements").exists()
    await h.executor.handle(d)
    (dup,) = h.acks()
    assert dup.outcome == models.DirectiveOutcome.DUPLICATE and "refused" in dup.reason
    assert h.metrics.directives.labels("test", "start_replica", "refused")._value.get() == 1


async def test_malformed_runtime_is_refused_by_the_adapter_check(cluster, clock, tmp_path):
    """A served model name the engine would reject is refused before any process starts."""
    h = Harness(cluster, clock, tmp_path)
    await h.discover()
    await h.executor.handle(models.Directive("d1", start(runtime=models.RuntimeSpec("m", "bad:name")), 1))
    (ack,) = h.acks()
    assert ack.outcome == models.DirectiveOutcome.REFUSED and "malformed runtime spec" in ack.reason
    assert h.manager.all() == []


async def test_stale_fencing_token_is_refused(cluster, clock, tmp_path):
    """A directive from a deposed leader (lower fencing token) is refused."""
    h = Harness(cluster, clock, tmp_path)
    await h.discover()
    h.journal.observe_fencing_token(5)
    await h.executor.handle(models.Directive("d1", models.ResizePool("l4", 3), 4))
    (ack,) = h.acks()
    assert ack.outcome == models.DirectiveOutcome.REFUSED and "stale fencing token" in ack.reason


async def test_resize_succeeds_or_fails_with_a_stock_out(cluster, clock, tmp_path):
    """A resize is ACCEPTED then SUCCEEDED; beyond capacity it ends FAILED and the cloud error
    (insufficient capacity, hence a STOCK_OUT event) is reported with the directive id."""
    h = Harness(cluster, clock, tmp_path, capacity_limits={"h100": 1})
    await h.discover()
    await h.executor.handle(models.Directive("ok", models.ResizePool("h100", 1), 1))
    await h.executor.handle(models.Directive("big", models.ResizePool("h100", 2), 1))
    for _ in range(50):
        acks = [(a.directive_id, a.outcome) for a in h.outbox._pending]
        if ("big", models.DirectiveOutcome.FAILED) in acks and ("ok", models.DirectiveOutcome.SUCCEEDED) in acks:
            break
        await asyncio.sleep(0.01)
    outcomes = [(a.directive_id, a.outcome) for a in h.acks()]
    assert outcomes.count(("ok", models.DirectiveOutcome.ACCEPTED)) == 1
    assert ("ok", models.DirectiveOutcome.SUCCEEDED) in outcomes and ("big", models.DirectiveOutcome.FAILED) in outcomes
    ((err, directive_id),) = h.errors
    assert err.event_kind == models.EventKind.STOCK_OUT and err.pool_id == "h100" and directive_id == "big"
    assert h.journal.get("big").outcome == models.DirectiveOutcome.FAILED
