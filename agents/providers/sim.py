"""The simulated cloud: the demo's, the simulator's and the tests' provider, and the default for
``cloud: local`` clusters.

Real instance types, GPU counts and prices per region come from the offline catalog. Nodes arrive
after ``sim.provisioning_delay_s``; a pool can have a capacity limit (beyond it a resize fails with
insufficient capacity: a stock-out), and ``sim.stock_out_pools`` never grow. Spot nodes are
preempted at ``sim.spot_preemptions_per_node_hour`` with a notice ``notice_s`` ahead. Faults are
injected on demand. Time and chance are injected: ``SimCloud`` is a synchronous state machine that
advances to ``clock()`` whenever it is read, so the simulator can drive it with a simulated clock
and no sleeping; ``SimProvider`` is the async provider over it."""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import pathlib
import random
from collections.abc import Callable, Mapping

from meridian import catalog, spec
from meridian.spec import cluster as cluster_spec

from agents import providers, state
from agents.providers import base, common
from agents.providers.errors import CloudError, CloudErrorKind

log = logging.getLogger(__name__)

OPERATIONS = ("discover", "resize", "interruptions")


@dataclasses.dataclass
class _Node:
    node_id: str
    ready_at: float
    notice_id: str = ""
    notice_deadline: float | None = None


@dataclasses.dataclass
class _Pool:
    decl: cluster_spec.PoolDecl
    offer: catalog.InstanceOffer | None
    zone: str
    nodes: list[_Node]
    target: int
    capacity_limit_nodes: int | None
    stocked_out: bool = False
    serial: int = 0
    problem: CloudError | None = None


class SimCloud:
    """State of every pool of one simulated cluster. Not thread-safe; one owner (an agent or the
    simulator) drives it."""

    def __init__(self, cluster: spec.Cluster, *, clock: Callable[[], float], rng: random.Random,
                 capacity_limits: Mapping[str, int] | None = None, notice_s: float = 120.0,
                 state_path: pathlib.Path | None = None):
        if notice_s < 0:
            raise ValueError(f"notice_s must be >= 0, got {notice_s}")
        s = cluster.spec
        self.cluster_id = cluster.metadata.name
        self._region = s.region
        self._cloud = s.cloud
        self._settings = s.sim
        self._clock = clock
        self._rng = rng
        self._notice_s = notice_s
        self._faults: dict[str, collections.deque[CloudError]] = {op: collections.deque() for op in OPERATIONS}
        self._last_advance = clock()
        limits = dict(capacity_limits or {})
        unknown = sorted(set(limits) - {p.name for p in s.pools})
        if unknown:
            raise ValueError(f"capacity_limits name unknown pools {unknown}; pools: {[p.name for p in s.pools]}")
        self._pools: dict[str, _Pool] = {}
        now = clock()
        for decl in s.pools:
            pool = _Pool(decl=decl, offer=self._offer(decl.instance_type), zone=decl.zone or s.zone or f"{s.region}a",
                         nodes=[], target=decl.initial_nodes, capacity_limit_nodes=limits.get(decl.name))
            for _ in range(decl.initial_nodes):
                pool.nodes.append(self._new_node(pool, ready_at=now))
            self._pools[decl.name] = pool
        self._state_path = state_path
        self._saved: dict | None = None
        if state_path is not None and state_path.exists():
            self._load(state_path)

    # ------------------------------------------------------------------ persistence

    def _dump(self) -> dict:
        return {"last_advance": self._last_advance, "pools": {
            name: {"target": p.target, "serial": p.serial, "stocked_out": p.stocked_out,
                   "capacity_limit_nodes": p.capacity_limit_nodes,
                   "nodes": [dataclasses.asdict(n) for n in p.nodes]}
            for name, p in self._pools.items()}}

    def _load(self, path: pathlib.Path) -> None:
        """Restore pools the spec still declares (a restarted agent finds the cloud as it left it)."""
        try:
            data = json.loads(path.read_text())
            for name, saved in data.get("pools", {}).items():
                pool = self._pools.get(name)
                if pool is None:
                    continue
                pool.target = min(max(int(saved["target"]), pool.decl.min_nodes), pool.decl.max_nodes)
                pool.serial = int(saved["serial"])
                pool.stocked_out = bool(saved.get("stocked_out", False))
                pool.capacity_limit_nodes = saved.get("capacity_limit_nodes", pool.capacity_limit_nodes)
                pool.nodes = [_Node(**n) for n in saved["nodes"]]
            self._last_advance = float(data.get("last_advance", self._last_advance))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("sim cloud state unreadable path=%s error=%s; starting from the spec", path, exc)

    def _persist(self) -> None:
        if self._state_path is None:
            return
        data = self._dump()
        if data != self._saved:
            state.write_json_atomic(self._state_path, data)
            self._saved = data

    # ------------------------------------------------------------------ catalog

    def _offer(self, instance_type: str) -> catalog.InstanceOffer | None:
        cat = catalog.instances.default()
        if self._cloud != "local":
            return cat.lookup(self._cloud, instance_type, self._region)
        # A local cluster borrows the figures of the first cloud region offering the type.
        matches = [o for o in cat.offers if o.instance_type == instance_type]
        return matches[0] if matches else None

    def _new_node(self, pool: _Pool, ready_at: float) -> _Node:
        pool.serial += 1
        return _Node(node_id=f"{self.cluster_id}-{pool.decl.name}-{pool.serial:04d}", ready_at=ready_at)

    # ------------------------------------------------------------------ fault injection

    def inject_fault(self, operation: str, error: CloudError, times: int = 1) -> None:
        """Make the next ``times`` calls of ``operation`` (discover, resize, interruptions) fail."""
        if operation not in self._faults:
            raise ValueError(f"unknown operation {operation!r}; valid: {', '.join(OPERATIONS)}")
        if times < 1:
            raise ValueError(f"times must be >= 1, got {times}")
        self._faults[operation].extend([error] * times)

    def set_capacity_limit(self, pool_id: str, nodes: int | None) -> None:
        """Cap how many nodes ``pool_id`` can have (None: unlimited); growing beyond it stocks out."""
        self._pool(pool_id).capacity_limit_nodes = nodes
        self._persist()

    def preempt(self, pool_id: str, node_id: str | None = None, notice_s: float | None = None) -> base.Interruption:
        """Serve an interruption notice to a running node of ``pool_id`` (the oldest without one when
        ``node_id`` is None); the node goes away ``notice_s`` later."""
        self.advance()
        pool = self._pool(pool_id)
        now = self._clock()
        candidates = [n for n in pool.nodes if n.ready_at <= now and n.notice_deadline is None
                      and (node_id is None or n.node_id == node_id)]
        if not candidates:
            raise ValueError(f"pool {pool_id!r} has no running node {node_id or ''} without a notice")
        node = candidates[0]
        self._notify(node, pool, now + (self._notice_s if notice_s is None else notice_s))
        self._persist()
        return self._interruption(pool, node)

    def preempt_wave(self, pool_id: str | None = None, notice_s: float | None = None) -> list[base.Interruption]:
        """Serve a notice to every running node without one: of ``pool_id``, or of every spot pool."""
        if pool_id is not None:
            self._pool(pool_id)  # raises for an unknown pool
        names = [name for name, pool in self._pools.items()
                 if (name == pool_id if pool_id else pool.decl.tier == "spot")]
        notices = []
        for name in names:
            while True:
                try:
                    notices.append(self.preempt(name, notice_s=notice_s))
                except ValueError:
                    break
        return notices

    def _take_fault(self, operation: str) -> None:
        queue = self._faults[operation]
        if queue:
            raise queue.popleft()

    def _pool(self, pool_id: str) -> _Pool:
        try:
            return self._pools[pool_id]
        except KeyError:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no pool {pool_id!r}; pools: {sorted(self._pools)}",
                             pool_id=pool_id) from None

    # ------------------------------------------------------------------ time

    def advance(self) -> None:
        """Bring the cloud to ``clock()``: issue spot notices, remove nodes whose notice ran out
        (and order replacements, as an ASG does), finish provisioning."""
        now = self._clock()
        elapsed_h = max(0.0, now - self._last_advance) / 3600.0
        self._last_advance = max(self._last_advance, now)
        rate = self._settings.spot_preemptions_per_node_hour
        for pool in self._pools.values():
            if pool.decl.tier == "spot" and rate > 0 and elapsed_h > 0:
                p = 1.0 - math.exp(-rate * elapsed_h)
                for node in pool.nodes:
                    if node.ready_at <= now and node.notice_deadline is None and self._rng.random() < p:
                        self._notify(node, pool, now + self._notice_s)
            gone = [n for n in pool.nodes if n.notice_deadline is not None and n.notice_deadline <= now]
            if gone:
                pool.nodes = [n for n in pool.nodes if n not in gone]
                self._fill(pool, now)

    def _notify(self, node: _Node, pool: _Pool, deadline: float) -> None:
        node.notice_deadline = deadline
        node.notice_id = f"{node.node_id}@{deadline:.0f}"

    def _fill(self, pool: _Pool, now: float) -> None:
        """Order nodes up to the target, within the capacity limit; short of it the pool stocks out."""
        room = self._room(pool)
        while len(pool.nodes) < pool.target and room > 0:
            pool.nodes.append(self._new_node(pool, ready_at=now + self._settings.provisioning_delay_s))
            room -= 1
        if len(pool.nodes) < pool.target:
            pool.stocked_out = True
            pool.problem = self._stock_out(pool, pool.target)

    def _room(self, pool: _Pool) -> int:
        if pool.decl.name in self._settings.stock_out_pools:
            return 0
        if pool.capacity_limit_nodes is None:
            return 1 << 30
        return max(0, pool.capacity_limit_nodes - len(pool.nodes))

    def _stock_out(self, pool: _Pool, target: int) -> CloudError:
        return CloudError(CloudErrorKind.INSUFFICIENT_CAPACITY,
                          f"insufficient {pool.decl.instance_type} capacity in {pool.zone}: "
                          f"{target} nodes requested, {len(pool.nodes) + self._room(pool)} available",
                          code="InsufficientInstanceCapacity", pool_id=pool.decl.name, operation="resize")

    # ------------------------------------------------------------------ provider operations

    def snapshot(self) -> list[base.PoolStatus]:
        self._take_fault("discover")
        self.advance()
        now = self._clock()
        out = []
        for pool in self._pools.values():
            running = [n for n in pool.nodes if n.ready_at <= now]
            pending = len(pool.nodes) - len(running)
            gpu_type = pool.offer.gpu_type if pool.offer else "unknown"
            gpus_per_node = pool.offer.gpu_count if pool.offer else 0
            price = 0.0
            if pool.offer:
                price = pool.offer.spot_price_per_hour_usd if pool.decl.tier == "spot" else pool.offer.price_per_hour_usd
            headroom_nodes = min(pool.decl.max_nodes - len(pool.nodes), self._room(pool))
            out.append(base.PoolStatus(
                pool=common.build_pool(
                    pool.decl, gpu_type=gpu_type, gpus_per_node=gpus_per_node,
                    gpu_memory_gib=pool.offer.gpu_memory_gib if pool.offer else 0,
                    nodes_current=len(running), nodes_pending=pending, price_per_node_hour_usd=price,
                    quota_headroom_gpus=max(0, headroom_nodes) * gpus_per_node, zone=pool.zone,
                    state=common.provisioning_state(len(running), pending, pool.target, pool.stocked_out)),
                nodes=tuple(n.node_id for n in running),
                problem=pool.problem,
            ))
        self._persist()
        return out

    def resize(self, pool_id: str, target_nodes: int, keep_nodes: frozenset[str] = frozenset()) -> None:
        """Set the pool's target. Growing beyond the capacity left raises INSUFFICIENT_CAPACITY and
        changes nothing; shrinking removes pending nodes first, then running nodes not in
        ``keep_nodes``, newest first."""
        self._take_fault("resize")
        self.advance()
        pool = self._pool(pool_id)
        if not pool.decl.min_nodes <= target_nodes <= pool.decl.max_nodes:
            raise CloudError(CloudErrorKind.INVALID_REQUEST,
                             f"target {target_nodes} outside [{pool.decl.min_nodes}, {pool.decl.max_nodes}]",
                             pool_id=pool_id, operation="resize")
        now = self._clock()
        if target_nodes > len(pool.nodes) and target_nodes - len(pool.nodes) > self._room(pool):
            pool.stocked_out = True
            pool.problem = self._stock_out(pool, target_nodes)
            self._persist()
            raise pool.problem
        pool.target = target_nodes
        pool.stocked_out = False
        pool.problem = None
        if len(pool.nodes) > target_nodes:
            # Pending nodes go first, then running nodes not kept, then kept ones; newest first.
            order = ([n for n in reversed(pool.nodes) if n.ready_at > now]
                     + [n for n in reversed(pool.nodes) if n.ready_at <= now and n.node_id not in keep_nodes]
                     + [n for n in reversed(pool.nodes) if n.ready_at <= now and n.node_id in keep_nodes])
            drop = {n.node_id for n in order[:len(pool.nodes) - target_nodes]}
            pool.nodes = [n for n in pool.nodes if n.node_id not in drop]
        else:
            self._fill(pool, now)
        self._persist()

    def notices(self) -> list[base.Interruption]:
        self._take_fault("interruptions")
        self.advance()
        self._persist()
        return [self._interruption(pool, n) for pool in self._pools.values() for n in pool.nodes
                if n.notice_deadline is not None]

    def _interruption(self, pool: _Pool, node: _Node) -> base.Interruption:
        return base.Interruption(notice_id=node.notice_id, pool_id=pool.decl.name, deadline=node.notice_deadline or 0.0,
                                 node_id=node.node_id,
                                 message=f"spot preemption of {node.node_id} ({pool.decl.instance_type})")


class SimProvider(base.Provider):
    """The async provider over a ``SimCloud`` (exposed as ``.cloud`` for fault injection)."""

    name = "sim"

    def __init__(self, cloud: SimCloud):
        self.cloud = cloud

    async def discover(self) -> list[base.PoolStatus]:
        return self.cloud.snapshot()

    async def resize(self, pool_id: str, target_nodes: int, *, keep_nodes: frozenset[str] = frozenset()) -> None:
        self.cloud.resize(pool_id, target_nodes, keep_nodes)

    async def interruptions(self) -> list[base.Interruption]:
        return self.cloud.notices()


@providers.register("sim")
def create(cluster: spec.Cluster, *, clock: Callable[[], float], rng: random.Random,
           capacity_limits: Mapping[str, int] | None = None, notice_s: float = 120.0,
           state_path: pathlib.Path | None = None) -> SimProvider:
    """Options: ``capacity_limits`` (pool -> max nodes), ``notice_s`` (spot notice lead time),
    ``state_path`` (persist the simulated cloud's state there, so it survives agent restarts)."""
    return SimProvider(SimCloud(cluster, clock=clock, rng=rng, capacity_limits=capacity_limits, notice_s=notice_s,
                                state_path=state_path))


__all__ = ["OPERATIONS", "SimCloud", "SimProvider", "create"]
