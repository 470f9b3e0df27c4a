"""Prometheus metrics of one scheduler instance, on a private registry so tests (and the demo) can
run several schedulers in one process. Names are documented in docs/scheduler.md."""

from __future__ import annotations

import collections

import prometheus_client as prom

PREFIX = "meridian_scheduler"


class SchedulerMetrics:
    def __init__(self, registry: prom.CollectorRegistry | None = None):
        self.registry = registry or prom.CollectorRegistry()
        r = self.registry
        self.plan_cost_per_hour_usd = prom.Gauge(
            f"{PREFIX}_plan_cost_per_hour_usd", "Hourly cost of the current placement plan.", registry=r)
        self.solve_seconds = prom.Histogram(
            f"{PREFIX}_solve_seconds", "Wall time of one placement solve.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60), registry=r)
        self.plans = prom.Counter(f"{PREFIX}_plans_total", "Placement solves by result status.",
                                  ["status"], registry=r)
        self.desired_replicas = prom.Gauge(
            f"{PREFIX}_desired_replicas", "Replicas the autoscaler's last decision asks for, per deployment.",
            ["deployment"], registry=r)
        self.slo_breach = prom.Gauge(
            f"{PREFIX}_slo_breach", "1 while the autoscaler's last decision saw the deployment's SLO breached (TTFT "
            "p99, KV cache), whether or not it added replicas for it: /v1/status autoscaling gives the reason.",
            ["deployment"], registry=r)
        self.unplaced_replicas = prom.Gauge(
            f"{PREFIX}_unplaced_replicas", "Replicas the autoscaler asked for that the plan could not place.",
            ["deployment"], registry=r)
        self.unplaced_demand_rps = prom.Gauge(
            f"{PREFIX}_unplaced_demand_rps", "Demand (requests/s) the plan leaves unserved.",
            ["deployment", "client_region"], registry=r)
        self.unmet_sla = prom.Gauge(
            f"{PREFIX}_unmet_sla", "1 per deployment, client region and binding constraint where the plan does not "
            "meet the SLA: a covered region without a replica within reach (or served beyond max_rtt_ms), or demand "
            "left unplaced.", ["deployment", "client_region", "cause"], registry=r)
        self.directives = prom.Counter(
            f"{PREFIX}_directives_total", "Directives by action and outcome (sent, accepted, succeeded, "
            "refused, failed, duplicate, expired, rate_limited).", ["action", "outcome"], registry=r)
        self.replicas = prom.Gauge(
            f"{PREFIX}_replicas", "Replicas reported by agents.", ["state", "cloud", "region", "gpu_type"], registry=r)
        self.agents = prom.Gauge(f"{PREFIX}_agents", "Known clusters by agent status.", ["status"], registry=r)
        self.auth_failures = prom.Counter(
            f"{PREFIX}_auth_failures_total", "Refused agent, router and admin credentials.", ["surface", "reason"],
            registry=r)
        self.version_refusals = prom.Counter(
            f"{PREFIX}_version_refusals_total", "Agents and routers refused for a version outside the skew rule.",
            ["surface"], registry=r)
        self.limit_refusals = prom.Counter(
            f"{PREFIX}_limit_refusals_total", "Inputs refused for exceeding a limit (message items, body size, "
            "YAML bounds), by surface (agent, router, admin) and limit.", ["surface", "limit"], registry=r)
        self.routing_version = prom.Gauge(f"{PREFIX}_routing_table_version", "Version of the published routing table.",
                                          registry=r)
        self.route_watchers = prom.Gauge(f"{PREFIX}_route_watchers", "Open WatchRoutes streams.", registry=r)
        self.traffic_samples = prom.Counter(f"{PREFIX}_traffic_samples_total", "Traffic samples accepted.",
                                            registry=r)
        self.is_leader = prom.Gauge(f"{PREFIX}_is_leader", "1 while this instance holds the leader lease.",
                                    registry=r)
        self.leader_changes = prom.Counter(f"{PREFIX}_leader_transitions_total",
                                           "Times this instance gained or lost the lease.", ["to"], registry=r)
        self.fencing_token = prom.Gauge(f"{PREFIX}_fencing_token", "Fencing token of the lease held (0: none).",
                                        registry=r)
        self.stocked_out_pools = prom.Gauge(f"{PREFIX}_stocked_out_pools", "Pools in stock-out backoff.", registry=r)
        self.rollout_step = prom.Gauge(
            f"{PREFIX}_rollout_step", "Step of the deployment's rollout in progress (1-based; 0: none in progress).",
            ["deployment"], registry=r)
        self.rollout_new_percent = prom.Gauge(
            f"{PREFIX}_rollout_new_percent", "Share (%) of the deployment's replicas its applied revision gets now "
            "(100: fully rolled out; 0: rolled back).", ["deployment"], registry=r)
        self.rollbacks = prom.Counter(
            f"{PREFIX}_rollbacks_total", "Automatic rollout rollbacks by reason (error_rate, ttft).",
            ["deployment", "reason"], registry=r)
        self.bill_usd_per_hour = prom.Gauge(
            f"{PREFIX}_bill_usd_per_hour", "What the nodes of the clusters this leader hears from bill per hour "
            "(node-hours x price), by cloud, tier and part: shares (GPUs replicas hold) or idle; the parts sum to "
            "the bill.", ["cloud", "tier", "part"], registry=r)
        self.errors = prom.Counter(f"{PREFIX}_errors_total", "Errors handled without crashing, by where.",
                                   ["where"], registry=r)
        self._replica_keys: set[tuple[str, str, str, str]] = set()
        self._unplaced_keys: set[str] = set()
        self._unplaced_demand_keys: set[tuple[str, str]] = set()
        self._unmet_keys: set[tuple[str, str, str]] = set()
        self._bill_keys: set[tuple[str, str, str]] = set()

    def set_replicas(self, counts: collections.Counter) -> None:
        """Replace the replica gauge with ``counts`` keyed by (state, cloud, region, gpu_type); label sets no
        longer present drop to zero rather than keeping a stale value."""
        for key in self._replica_keys - set(counts):
            self.replicas.labels(*key).set(0)
        for key, n in counts.items():
            self.replicas.labels(*key).set(n)
        self._replica_keys |= set(counts)

    def set_unplaced(self, replicas: dict[str, int], demand_rps: dict[tuple[str, str], float]) -> None:
        for key in self._unplaced_keys - set(replicas):
            self.unplaced_replicas.labels(key).set(0)
        for key, n in replicas.items():
            self.unplaced_replicas.labels(key).set(n)
        self._unplaced_keys |= set(replicas)
        for key in self._unplaced_demand_keys - set(demand_rps):
            self.unplaced_demand_rps.labels(*key).set(0)
        for key, v in demand_rps.items():
            self.unplaced_demand_rps.labels(*key).set(v)
        self._unplaced_demand_keys |= set(demand_rps)

    def set_unmet_sla(self, keys: set[tuple[str, str, str]]) -> None:
        """(deployment, client region, cause) unmet now: 1; label sets no longer unmet drop to 0."""
        for key in self._unmet_keys - keys:
            self.unmet_sla.labels(*key).set(0)
        for key in keys:
            self.unmet_sla.labels(*key).set(1)
        self._unmet_keys |= keys

    def set_bill(self, usd: dict[tuple[str, str, str], float]) -> None:
        """Replace the bill gauge with ``usd`` keyed by (cloud, tier, part); absent label sets drop to 0."""
        for key in self._bill_keys - set(usd):
            self.bill_usd_per_hour.labels(*key).set(0)
        for key, v in usd.items():
            self.bill_usd_per_hour.labels(*key).set(v)
        self._bill_keys |= set(usd)

    def exposition(self) -> bytes:
        return prom.generate_latest(self.registry)
