"""Simulated clusters: the agent's side of the fleet, on a simulated clock.

Each cluster owns an ``agents.providers.sim.SimCloud`` (the simulated cloud the demo and the agent
tests use: catalog prices, provisioning delay, stock-outs, spot preemption with notice, all on an
injected clock and RNG) and plays the agent's part on it: it places replicas on nodes with the
agent's own allocator (``agents.allocation``), reports pools and replicas as an agent would, turns
interruption notices into events, and carries out directives (start, drain, resize).

Replicas start STARTING and are READY after a cold start (``perf.cold_start_s``); a drained replica
leaves after its in-flight requests finish; a replica whose node disappears (preemption, outage)
dies at once. Nodes bill from the moment they are ordered (provisioning included) until removed."""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable, Mapping

from meridian import catalog, cost, spec
from meridian.fleet import models as fm
from meridian.simulate import perf
from meridian.spec import policy as policy_spec
from agents import allocation, directives
from agents import nodes as agent_nodes
from agents.providers import sim as sim_provider
from agents.providers.errors import CloudError, CloudErrorKind
from scheduler.solver import problem

log = logging.getLogger("meridian.simulate.clusters")

_STOCK_OUT_KINDS = (CloudErrorKind.INSUFFICIENT_CAPACITY, CloudErrorKind.QUOTA_EXCEEDED)


@dataclasses.dataclass
class SimReplica:
    replica_id: str
    deployment: str
    revision: str
    served_name: str
    pool_id: str
    node_id: str
    gpu_ids: tuple[int, ...]
    gpu_type: str
    tier: fm.Tier
    started_at: float
    ready_at: float
    state: fm.ReplicaState = fm.ReplicaState.STARTING
    load: fm.ReplicaLoad = fm.ReplicaLoad()
    backlog: float = 0.0
    steady: perf.Steady | None = None
    server_ttft_ms: float | None = None  # mean server-side TTFT of its last tick with traffic
    leave_at: float | None = None
    region_share: dict[str, float] = dataclasses.field(default_factory=dict)

    def holding(self) -> allocation.Holding:
        return allocation.Holding(self.replica_id, self.pool_id, self.node_id, self.gpu_ids, 0)


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the agent would send now (None fields: the agent is silent, its region is down) and
    the replicas that died since the last look."""

    pools: list[fm.GpuPool] | None
    reports: list[fm.ReplicaReport] | None
    events: list[fm.Event]
    killed: list[SimReplica]


class SimCluster:
    def __init__(self, cluster: spec.Cluster, *, clock: Callable[[], float], rng: random.Random,
                 notice_s: float, policy: policy_spec.CapacityPolicySpec | None,
                 cold_start: Callable[[str, str], float], provisioning_delay_s: float | None = None,
                 preemptions_per_node_hour: float | None = None):
        sim_update: dict[str, object] = {}
        if provisioning_delay_s is not None:
            sim_update["provisioning_delay_s"] = provisioning_delay_s
        if preemptions_per_node_hour is not None:
            sim_update["spot_preemptions_per_node_hour"] = preemptions_per_node_hour
        if sim_update:
            cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(
                update={"sim": cluster.spec.sim.model_copy(update=sim_update)})})
        self.spec = cluster
        self.cluster_id = cluster.metadata.name
        s = cluster.spec
        self.region = s.region
        self.identity = fm.ClusterIdentity(self.cluster_id, fm.Cloud(s.cloud), s.region, s.zone or "", "simulated")
        self.cloud = sim_provider.SimCloud(cluster, clock=clock, rng=rng, notice_s=notice_s)
        self._clock = clock
        self._cold_start = cold_start
        self.replicas: dict[str, SimReplica] = {}
        self.down = False
        self._noticed: set[str] = set()
        self._notice_nodes: dict[str, float] = {}
        self._nodes: dict[str, tuple[str, ...]] = {}
        self._pools: dict[str, fm.GpuPool] = {}
        # How each pool's nodes bill (``meridian.cost.prices``: tier, overrides, reserved commitments).
        self._prices: dict[str, cost.Price] = {}
        self._where: dict[str, cost.Where] = {}
        offers = catalog.instances.default()
        for decl in s.pools:
            offer = offers.lookup(s.cloud, decl.instance_type, s.region)
            if offer is not None:
                self._prices[decl.name] = cost.node_price(s.cloud, s.region, decl.instance_type, decl.tier, offer,
                                                          policy)
        self.preempted_nodes = 0
        self._refresh()

    # ------------------------------------------------------------------ cloud view

    def _refresh(self) -> None:
        statuses = self.cloud.snapshot()
        self._nodes = {st.pool.pool_id: st.nodes for st in statuses}
        self._pools = {st.pool.pool_id: st.pool for st in statuses}

    def cost_pools(self) -> list[cost.Pool]:
        """The cluster's pools as the cloud bills them now: nodes running and provisioning, a reserved
        pool's nodes beyond its commitment at the on-demand price (``meridian.cost``)."""
        out = []
        for pid, p in sorted(self._pools.items()):
            price = self._prices.get(pid) or cost.Price(p.price_per_node_hour_usd)
            where = self._where.get(pid)
            if where is None:
                where = self._where[pid] = cost.Where(problem.pool_key(self.cluster_id, pid), self.cluster_id,
                                                      self.identity.cloud.value, self.region, pid, p.gpu_type,
                                                      p.tier.value)
            out.append(cost.Pool(where, p.gpus_per_node, p.nodes_current + p.nodes_pending, price, p.nodes_pending,
                                 p.instance_type))
        return out

    def cost_replicas(self, owners: Mapping[str, cost.Owner]) -> list[cost.Replica]:
        """Every replica on the cluster's nodes (starting, ready or draining) with the GPUs it holds."""
        return [cost.Replica(r.replica_id, problem.pool_key(self.cluster_id, r.pool_id), len(r.gpu_ids),
                             owners.get(r.deployment) or cost.Owner(r.served_name, r.deployment))
                for r in sorted(self.replicas.values(), key=lambda x: x.replica_id)]

    def cost_per_hour_usd(self) -> float:
        """What the cluster's nodes (running and provisioning) cost per hour now (``cost_pools``' bill)."""
        return sum(p.price.usd_per_hour(p.nodes) for p in self.cost_pools())

    def down_extra_usd_per_hour(self) -> float:
        """While the region is down: what its nodes beyond the pools' minimums bill per hour (nodes
        the fleet had there when the region went, which nobody can release until it is back; every
        fleet pays the minimums, the demand-following bound too). 0 while it is up."""
        if not self.down:
            return 0.0
        out = 0.0
        for pool in self.cost_pools():
            floor = min(pool.nodes, self._pools[pool.where.pool].nodes_min)
            out += pool.price.usd_per_hour(pool.nodes) - pool.price.usd_per_hour(floor)
        return out

    def nodes(self) -> dict[str, int]:
        """Pool id -> nodes billed now (running + provisioning)."""
        return {pid: p.nodes_current + p.nodes_pending for pid, p in self._pools.items()}

    def gpus_by_tier(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self._pools.values():
            out[p.tier.value] = out.get(p.tier.value, 0) + (p.nodes_current + p.nodes_pending) * p.gpus_per_node
        return out

    def pool(self, pool_id: str) -> fm.GpuPool | None:
        return self._pools.get(pool_id)

    # ------------------------------------------------------------------ time

    def observe(self, now: float) -> Observation:
        """Advance the cloud to ``now``, settle replicas, and build the agent's reports."""
        before = {pid: set(nodes) for pid, nodes in self._nodes.items()}
        self._refresh()
        running = {pid: set(nodes) for pid, nodes in self._nodes.items()}
        for pid, nodes in before.items():
            self.preempted_nodes += len({n for n in nodes - running.get(pid, set()) if n in self._notice_nodes})
        killed = []
        for rid, r in list(self.replicas.items()):
            if r.node_id not in running.get(r.pool_id, set()):
                killed.append(self.replicas.pop(rid))
            elif r.leave_at is not None and r.leave_at <= now:
                del self.replicas[rid]
            elif r.state is fm.ReplicaState.STARTING and r.ready_at <= now:
                r.state = fm.ReplicaState.READY
        notices = self.cloud.notices()
        self._notice_nodes = {n.node_id: n.deadline for n in notices if n.node_id}
        events: list[fm.Event] = []
        for n in notices:
            if n.notice_id in self._noticed:
                continue
            self._noticed.add(n.notice_id)
            hit = [r for r in self.replicas.values() if r.node_id == n.node_id and r.state is not fm.ReplicaState.DRAINING]
            for r in hit:
                events.append(fm.Event(fm.EventKind.SPOT_INTERRUPTION, n.pool_id, r.replica_id, n.message, n.deadline))
            if not hit:
                events.append(fm.Event(fm.EventKind.SPOT_INTERRUPTION, n.pool_id, "", n.message, n.deadline))
        if self.down:
            return Observation(None, None, [], killed)
        return Observation(self._agent_pools(), self._reports(), events, killed)

    def _agent_pools(self) -> list[fm.GpuPool]:
        """The pools as the agent reports them (``Agent.inventory``): free GPUs are those no replica
        holds, on nodes not under an interruption notice (a replacement started there would go with
        the node, and the agent places none there)."""
        holdings = [r.holding() for r in self.replicas.values()]
        out = []
        for pid, pool in sorted(self._pools.items()):
            nodeset = agent_nodes.without(allocation.NodeSet(pid, pool.gpus_per_node, self._nodes.get(pid, ())),
                                          self._notice_nodes)
            out.append(dataclasses.replace(pool, gpus_free=allocation.gpus_free(nodeset, holdings)))
        return out

    def _reports(self) -> list[fm.ReplicaReport]:
        return [fm.ReplicaReport(
            replica_id=r.replica_id, deployment=r.deployment, revision=r.revision,
            endpoint=f"http://{self.cluster_id}.sim:{31000 + i}", state=r.state, load=r.load, pool_id=r.pool_id,
            gpu_count=len(r.gpu_ids), time_to_ready_s=max(0.0, r.ready_at - r.started_at),
            served_model_name=r.served_name, started_at=r.started_at, node_id=r.node_id)
            for i, r in enumerate(sorted(self.replicas.values(), key=lambda x: x.replica_id))]

    # ------------------------------------------------------------------ directives

    def apply(self, directive: fm.Directive, now: float) -> tuple[fm.DirectiveAck, list[fm.Event]]:
        """Carry out one directive as an agent would; the ack and any event it raises."""
        a = directive.action
        if isinstance(a, fm.StartReplica):
            return self._start(directive.directive_id, a, now), []
        if isinstance(a, fm.DrainReplica):
            r = self.replicas.get(a.replica_id)
            if r is None:
                return fm.DirectiveAck(directive.directive_id, fm.DirectiveOutcome.SUCCEEDED, "already gone"), []
            if r.state is not fm.ReplicaState.DRAINING:
                in_flight_s = r.steady.request_s if (r.steady and r.state is fm.ReplicaState.READY) else 0.0
                r.state = fm.ReplicaState.DRAINING
                r.leave_at = now + min(float(a.deadline_s), in_flight_s)
            return fm.DirectiveAck(directive.directive_id, fm.DirectiveOutcome.ACCEPTED), []
        return self._resize(directive.directive_id, a)

    def _start(self, directive_id: str, a: fm.StartReplica, now: float) -> fm.DirectiveAck:
        if a.replica_id in self.replicas:
            return fm.DirectiveAck(directive_id, fm.DirectiveOutcome.DUPLICATE)
        pool = self._pools.get(a.pool_id)
        if pool is None:
            return fm.DirectiveAck(directive_id, fm.DirectiveOutcome.REFUSED, f"no pool {a.pool_id}")
        nodeset = allocation.NodeSet(a.pool_id, pool.gpus_per_node, self._nodes.get(a.pool_id, ()))
        choice = allocation.choose_gpus(nodeset, [r.holding() for r in self.replicas.values()], a.gpu_count,
                                        avoid_nodes=set(self._notice_nodes) | set(a.avoid_nodes))
        if isinstance(choice, str):
            return fm.DirectiveAck(directive_id, fm.DirectiveOutcome.REFUSED, choice)
        node_id, gpu_ids = choice
        self.replicas[a.replica_id] = SimReplica(
            a.replica_id, a.deployment, a.revision, a.runtime.served_model_name, a.pool_id, node_id, gpu_ids,
            pool.gpu_type, pool.tier, now, now + self._cold_start(a.deployment, pool.gpu_type))
        return fm.DirectiveAck(directive_id, fm.DirectiveOutcome.ACCEPTED)

    def _resize(self, directive_id: str, a: fm.ResizePool) -> tuple[fm.DirectiveAck, list[fm.Event]]:
        keep = frozenset(r.node_id for r in self.replicas.values() if r.pool_id == a.pool_id)
        refusal = directives.shrink_refusal(a.pool_id, a.target_nodes, len(keep))
        if refusal is not None:  # the agent's rule: a shrink never takes a node that hosts a replica
            return fm.DirectiveAck(directive_id, fm.DirectiveOutcome.REFUSED, refusal), []
        try:
            self.cloud.resize(a.pool_id, a.target_nodes, keep)
        except CloudError as exc:
            self._refresh()
            events = []
            if exc.kind in _STOCK_OUT_KINDS:
                kind = fm.EventKind.STOCK_OUT if exc.kind is CloudErrorKind.INSUFFICIENT_CAPACITY \
                    else fm.EventKind.QUOTA_EXCEEDED
                events.append(fm.Event(kind, a.pool_id, "", exc.message))
            return fm.DirectiveAck(directive_id, fm.DirectiveOutcome.FAILED, str(exc)), events
        self._refresh()
        return fm.DirectiveAck(directive_id, fm.DirectiveOutcome.ACCEPTED), []

    # ------------------------------------------------------------------ faults

    def go_down(self) -> list[SimReplica]:
        """Region outage: the agent falls silent and every replica dies now."""
        self.down = True
        killed = list(self.replicas.values())
        self.replicas.clear()
        return killed

    def come_back(self) -> None:
        self.down = False

    def set_stock_out(self, pool_id: str, on: bool) -> None:
        """While ``on``, the pool cannot grow beyond the nodes it has (ordered or running)."""
        pool = self._pools.get(pool_id)
        nodes = (pool.nodes_current + pool.nodes_pending) if pool is not None else 0
        self.cloud.set_capacity_limit(pool_id, nodes if on else None)

    def preempt_wave(self, share: float, rng: random.Random) -> int:
        """Serve interruption notices to ``share`` of the running spot nodes (each independently)."""
        hit = 0
        for pid, pool in sorted(self._pools.items()):
            if pool.tier is not fm.Tier.SPOT:
                continue
            for node in self._nodes.get(pid, ()):
                if node in self._notice_nodes or rng.random() >= share:
                    continue
                try:
                    self.cloud.preempt(pid, node)
                except ValueError:
                    continue  # the background hazard served it a notice a moment ago
                hit += 1
        return hit
