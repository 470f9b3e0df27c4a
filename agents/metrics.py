"""The agent's Prometheus metrics, on a private registry per agent so several agents (the demo,
tests) can live in one process. Names are documented in docs/agents.md."""

from __future__ import annotations

import prometheus_client as prom

from meridian.fleet import models


class AgentMetrics:
    def __init__(self, cluster_id: str, registry: prom.CollectorRegistry | None = None):
        self.registry = registry or prom.CollectorRegistry()
        r = self.registry
        label = {"cluster": cluster_id}
        self._label = label
        self.info = prom.Gauge("meridian_agent_info", "Constant 1, labelled with the agent's identity",
                               ["cluster", "provider", "version"], registry=r)
        self.pools = prom.Gauge("meridian_agent_pools", "GPU pools the provider reports", ["cluster"], registry=r)
        self.pool_nodes = prom.Gauge("meridian_agent_pool_nodes", "Nodes per pool by state (running, pending)",
                                     ["cluster", "pool", "state"], registry=r)
        self.gpus = prom.Gauge("meridian_agent_gpus", "GPUs by state (total: on running nodes; free: not held by a replica)",
                               ["cluster", "pool", "state"], registry=r)
        self.replicas = prom.Gauge("meridian_agent_replicas", "Replicas by state", ["cluster", "state"], registry=r)
        self.directives = prom.Counter("meridian_agent_directives_total", "Directive acknowledgements by action and outcome",
                                       ["cluster", "action", "outcome"], registry=r)
        self.reconnects = prom.Counter("meridian_agent_stream_reconnects_total",
                                       "Stream (re)connection attempts after the first", ["cluster"], registry=r)
        self.connected = prom.Gauge("meridian_agent_stream_connected", "1 while a stream to the scheduler is up",
                                    ["cluster"], registry=r)
        self.tls_reloads = prom.Counter("meridian_agent_scheduler_tls_reloads_total",
                                        "Rotated scheduler-link TLS files: loaded (outcome=reloaded) or refused, "
                                        "the previous credentials kept (outcome=failed)", ["cluster", "outcome"],
                                        registry=r)
        self.messages = prom.Counter("meridian_agent_messages_sent_total", "Messages sent to the scheduler by kind",
                                     ["cluster", "kind"], registry=r)
        self.events = prom.Counter("meridian_agent_events_total", "Events raised by kind", ["cluster", "kind"], registry=r)
        self.cloud_errors = prom.Counter("meridian_agent_cloud_errors_total", "Classified cloud API errors",
                                         ["cluster", "operation", "kind"], registry=r)
        self.auth_failing = prom.Gauge("meridian_agent_cloud_auth_failing",
                                       "1 while the last cloud call failed authentication", ["cluster"], registry=r)
        self.discover_seconds = prom.Histogram("meridian_agent_discover_seconds", "Time of one provider discovery",
                                               ["cluster"], registry=r,
                                               buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
        self.connected.labels(**label).set(0)
        self.auth_failing.labels(**label).set(0)
        self.reconnects.labels(**label)
        for state in models.ReplicaState:
            self.replicas.labels(cluster=cluster_id, state=state.value).set(0)

    @property
    def cluster(self) -> str:
        return self._label["cluster"]

    def set_pools(self, pools: list[models.GpuPool]) -> None:
        self.pools.labels(**self._label).set(len(pools))
        for p in pools:
            self.pool_nodes.labels(self.cluster, p.pool_id, "running").set(p.nodes_current)
            self.pool_nodes.labels(self.cluster, p.pool_id, "pending").set(p.nodes_pending)
            self.gpus.labels(self.cluster, p.pool_id, "total").set(p.gpus_total)
            self.gpus.labels(self.cluster, p.pool_id, "free").set(p.gpus_free)

    def set_replicas(self, states: list[models.ReplicaState]) -> None:
        for state in models.ReplicaState:
            self.replicas.labels(self.cluster, state.value).set(sum(1 for s in states if s == state))

    def directive(self, action: str, outcome: models.DirectiveOutcome) -> None:
        self.directives.labels(self.cluster, action, models.DirectiveOutcome(outcome).value).inc()

    def event(self, kind: models.EventKind) -> None:
        self.events.labels(self.cluster, models.EventKind(kind).value).inc()

    def cloud_error(self, operation: str, kind: str) -> None:
        self.cloud_errors.labels(self.cluster, operation, kind).inc()

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)
