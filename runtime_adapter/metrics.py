"""The runtime adapter's own Prometheus metrics, in a registry the caller owns (one per agent, or a
private one per Replica), so tests can run many supervisors in one process."""

from __future__ import annotations

import prometheus_client as prom

from meridian import fleet


class AdapterMetrics:
    """Counters and gauges every Replica updates; labels: replica id (and state/phase)."""

    def __init__(self, registry: prom.CollectorRegistry | None = None) -> None:
        self.registry = registry or prom.CollectorRegistry()
        r = self.registry
        self.state = prom.Gauge("meridian_replica_state", "1 for the replica's current state, 0 for the others.",
                                ["replica", "state"], registry=r)
        self.restarts = prom.Counter("meridian_replica_restarts_total", "Engine restarts after a crash.",
                                     ["replica"], registry=r)
        self.crashes = prom.Counter("meridian_replica_crashes_total",
                                    "Engine exits or failed health/readiness the supervisor did not ask for.",
                                    ["replica", "reason"], registry=r)
        self.time_to_ready = prom.Histogram(
            "meridian_replica_time_to_ready_seconds", "From spawn (after prefetch) to the first 200 of /health_generate.",
            ["replica"], buckets=(1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200), registry=r)
        self.startup_phase = prom.Gauge("meridian_replica_startup_phase_seconds",
                                        "Duration of the last start-up's phases (prefetch, load, warmup).",
                                        ["replica", "phase"], registry=r)
        self.scrape_errors = prom.Counter("meridian_replica_scrape_errors_total", "Failed /metrics scrapes.",
                                          ["replica"], registry=r)
        self.health_failures = prom.Counter("meridian_replica_health_failures_total",
                                            "Failed /health_generate probes while ready.", ["replica"], registry=r)
        self.kills = prom.Counter("meridian_replica_sigkill_total",
                                  "Times the engine ignored SIGTERM past the grace period and got SIGKILL.",
                                  ["replica"], registry=r)
        self.adoptions = prom.Counter("meridian_replica_adoptions_total",
                                      "Engines re-attached after a supervisor restart.", ["replica", "outcome"],
                                      registry=r)

    def set_state(self, replica_id: str, state: fleet.ReplicaState) -> None:
        for s in fleet.ReplicaState:
            self.state.labels(replica_id, s.value).set(1.0 if s == state else 0.0)
