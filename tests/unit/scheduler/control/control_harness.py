"""A control loop on a simulated clock, with in-memory clusters speaking through the Intake (the same
sink the gRPC edge feeds) and a transport that records directives instead of streaming them."""

from __future__ import annotations

import dataclasses

from meridian import spec
from meridian.fleet import models as fm
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler import reconciler, testing
from scheduler.control import events, fleet, intake, loop, routes
from scheduler.server import auth, routing
from scheduler.state import records

SPECS = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 2, max_replicas: 4, scale_up_delay_s: 0}
---
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c1}
spec:
  cloud: aws
  region: us-east-1
  auth: {token_env: TOKEN_C1}
  pools: [{name: l4, instance_type: g6.xlarge, max_nodes: 4}]
---
apiVersion: meridian/v1
kind: Cluster
metadata: {name: c2}
spec:
  cloud: aws
  region: us-west-2
  auth: {token_env: TOKEN_C2}
  pools: [{name: l4, instance_type: g6.xlarge, max_nodes: 4}]
"""
REGIONS = {"c1": "us-east-1", "c2": "us-west-2", "g1": "us-east4", "z1": "eastus2"}

# Four clusters on three clouds; ``chat`` must run on two clouds at once (the isolation rule).
ISOLATED_SPECS = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat, team: t}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 3, max_replicas: 6, scale_up_delay_s: 0}
  placement: {min_distinct_clouds: 2}
""" + "".join(f"""---
apiVersion: meridian/v1
kind: Cluster
metadata: {{name: {name}}}
spec:
  cloud: {cloud}
  region: {REGIONS[name]}
  provider: sim
  auth: {{token_env: TOKEN_{name.upper()}}}
  pools: [{{name: l4, instance_type: {instance}, max_nodes: 4}}]
""" for name, cloud, instance in (("c1", "aws", "g6.xlarge"), ("c2", "aws", "g6.xlarge"),
                                  ("g1", "gcp", "g2-standard-8"), ("z1", "azure", "Standard_NV36ads_A10_v5")))


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, fm.Directive]] = []

    async def send(self, cluster_id: str, directive: fm.Directive) -> bool:
        self.sent.append((cluster_id, directive))
        return True


class Harness:
    def __init__(self, store, clock: clock_mod.ManualClock, token: int, **overrides):
        self.clock = clock
        self.token = token
        cfg = testing.local_config("sqlite://:memory:", adopt_grace_s=5.0, heartbeat_interval_s=5.0,
                                   lost_after_intervals=3, stock_out_backoff_s=60.0, **overrides)
        self.metrics = metrics_mod.SchedulerMetrics()
        self.fleet = fleet.FleetView(cfg.lost_after_s)
        self.events = events.EventTracker(base_s=cfg.stock_out_backoff_s, max_s=cfg.stock_out_backoff_max_s)
        self.transport = Recorder()
        self.executor = reconciler.Executor(log_store=records.DirectiveLog(store), transport=self.transport,
                                            clock=clock, metrics=self.metrics, timeouts=reconciler.Timeouts())
        self.routes = routing.RouteHub()
        publisher = routes.RoutePublisher(store=records.RoutingStore(store), hub=self.routes, clock=clock,
                                          scheduler_id=f"t{token}", load_refresh_s=5.0, metrics=self.metrics)
        self.fenced = False
        self.loop = loop.ControlLoop(
            config=cfg, clock=clock, spec_store=records.SpecStore(store), traffic=records.TrafficLog(store),
            fleet=self.fleet, events=self.events, executor=self.executor, publisher=publisher, metrics=self.metrics,
            tokens=auth.TokenBook(env={}), fence=lambda: self.token, on_fenced=self._fenced, env={})
        self.intake = intake.Intake(fleet=self.fleet, executor=self.executor, events=self.events, metrics=self.metrics,
                                    fence=lambda: self.token, wake=self.loop.wake, on_fenced=self._fenced)

    def _fenced(self) -> None:
        self.fenced = True
        self.token = 0

    def directives(self, kind: type | None = None) -> list[tuple[str, fm.Directive]]:
        return [(c, d) for c, d in self.transport.sent if kind is None or isinstance(d.action, kind)]


async def apply_specs(store, text: str = SPECS) -> None:
    await records.SpecStore(store).apply(spec.load_text(text, "specs.yaml").documents, 0.0)


@dataclasses.dataclass
class SimCluster:
    """An agent's view of one cluster: carries out directives and reports through an Intake."""

    cluster_id: str
    nodes: int = 2
    cloud: fm.Cloud = fm.Cloud.AWS
    instance_type: str = "g6.xlarge"
    nodes_max: int = 4
    replicas: dict = dataclasses.field(default_factory=dict)
    done: list = dataclasses.field(default_factory=list)
    stocked_out: bool = False

    def pool(self) -> fm.GpuPool:
        used = sum(r.gpu_count for r in self.replicas.values())
        return dataclasses.replace(testing.gpu_pool("l4", nodes=self.nodes, nodes_max=self.nodes_max,
                                                    instance_type=self.instance_type, price_per_node_hour_usd=0.8048),
                                   gpus_free=max(0, self.nodes - used))

    async def hello(self, h: Harness, *, report: bool = True) -> None:
        """Connect; with ``report`` false, only the Hello (the inventory and replicas come later)."""
        ident = fm.ClusterIdentity(self.cluster_id, self.cloud, REGIONS[self.cluster_id])
        await h.intake.on_hello(ident, tuple(self.done), h.clock.now())
        if report:
            await self.report(h)

    async def report(self, h: Harness) -> None:
        now = h.clock.now()
        await h.intake.on_inventory(self.cluster_id, [self.pool()], True, now)
        await h.intake.on_replicas(self.cluster_id, list(self.replicas.values()), True, now)

    async def carry_out(self, h: Harness, start_at: int = 0) -> int:
        """Do every directive sent to this cluster from index ``start_at`` on; returns the next index."""
        sent = h.transport.sent
        for cluster_id, d in sent[start_at:]:
            if cluster_id != self.cluster_id or d.directive_id in self.done:
                continue
            a = d.action
            if isinstance(a, fm.StartReplica):
                self.replicas[a.replica_id] = fm.ReplicaReport(
                    a.replica_id, a.deployment, a.revision, f"http://{a.replica_id}", fm.ReplicaState.STARTING,
                    pool_id=a.pool_id, gpu_count=a.gpu_count, served_model_name=a.runtime.served_model_name)
            elif isinstance(a, fm.DrainReplica):
                self.replicas.pop(a.replica_id, None)
            elif isinstance(a, fm.ResizePool) and not self.stocked_out:
                self.nodes = min(self.nodes_max, a.target_nodes)
            self.done.append(d.directive_id)
            await h.intake.on_ack(self.cluster_id, fm.DirectiveAck(d.directive_id, fm.DirectiveOutcome.ACCEPTED),
                                  h.clock.now())
        await self.report(h)
        return len(sent)

    async def promote(self, h: Harness) -> None:
        for rid, r in list(self.replicas.items()):
            if r.state is fm.ReplicaState.STARTING:
                self.replicas[rid] = dataclasses.replace(r, state=fm.ReplicaState.READY)
        await self.report(h)

    def ready(self) -> set[str]:
        return {rid for rid, r in self.replicas.items() if r.state is fm.ReplicaState.READY}
