"""Every knob of a scheduler process, validated in one place (a frozen pydantic model).

Defaults suit a small fleet; docs/scheduler.md lists them with their meaning. Cross-field rules
(the lease must outlive several renewals, liveness must span several heartbeats, a TLS certificate
comes with its key) are checked here so a bad combination fails at start with the field named."""

from __future__ import annotations

import os
import socket

import pydantic

ADDRESS = r"^[^\s:]+:\d{1,5}$"
STATE_SCHEMES = ("sqlite", "redis", "rediss", "redis+sentinel", "rediss+sentinel")


def default_scheduler_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class SchedulerConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    scheduler_id: str = pydantic.Field(default_factory=default_scheduler_id, min_length=1, max_length=200,
                              description="This node's id in the lease and in routing tables.")
    grpc_address: str = pydantic.Field(default="127.0.0.1:7070", pattern=ADDRESS,
                                       description="host:port of the gRPC server (agents, routers).")
    admin_address: str = pydantic.Field(default="127.0.0.1:7071", pattern=ADDRESS,
                                        description="host:port of the admin HTTP API and /metrics.")
    advertise_grpc_address: str | None = pydantic.Field(
        default=None, pattern=ADDRESS, description="gRPC address other nodes name when redirecting agents.")
    state_url: str = pydantic.Field(default="sqlite://~/.local/state/meridian/scheduler.db", min_length=1,
                                    description="sqlite://PATH (one node), redis://HOST:PORT/DB (HA) or "
                                                "redis+sentinel://H:P[,H:P...]/SERVICE[/DB] (HA on replicated Redis).")
    state_replica_acks: int | None = pydantic.Field(
        default=None, ge=0, le=10,
        description="Redis replicas that must confirm each state write (WAIT) before it counts; default 1 with "
                    "redis+sentinel:// (a write a failover could lose is never acted on), 0 otherwise.")
    namespace: str = pydantic.Field(default="default", pattern=r"^[a-zA-Z0-9_.-]{1,64}$",
                                    description="Key prefix in a shared store; one fleet per namespace.")
    tokens_file: str | None = pydantic.Field(default=None, description="YAML/JSON file of cluster and router tokens.")
    admin_token_file: str | None = pydantic.Field(default=None, description="Admin bearer token file.")
    tls_cert_file: str | None = pydantic.Field(
        default=None, min_length=1,
        description="PEM certificate chain the gRPC port presents; with tls_key_file it turns TLS on.")
    tls_key_file: str | None = pydantic.Field(default=None, min_length=1,
                                              description="Unencrypted PEM private key of tls_cert_file.")
    tls_client_ca_file: str | None = pydantic.Field(
        default=None, min_length=1,
        description="PEM CA bundle: clients must present a certificate it signed (mutual TLS).")
    tls_reload_interval_s: float = pydantic.Field(
        default=10.0, gt=0, le=3600,
        description="How often the gRPC port's certificate, key and client CA files are checked for a change.")
    admin_tls_cert_file: str | None = pydantic.Field(
        default=None, min_length=1,
        description="PEM certificate chain the admin API presents; with admin_tls_key_file it serves HTTPS.")
    admin_tls_key_file: str | None = pydantic.Field(default=None, min_length=1,
                                                    description="Unencrypted PEM private key of admin_tls_cert_file.")
    admin_tls_reload_interval_s: float = pydantic.Field(
        default=10.0, gt=0, le=3600, description="How often the admin certificate files are checked for a change.")

    heartbeat_interval_s: int = pydantic.Field(
        default=5, ge=1, le=300, description="Told to agents in Welcome, in whole seconds as the wire carries it "
                                             "(a fraction was rounded there while loss was timed on the fraction).")
    lost_after_intervals: int = pydantic.Field(default=3, ge=2, le=100,
                                               description="Silent heartbeat intervals before an agent is lost.")
    lease_ttl_s: float = pydantic.Field(default=5.0, gt=0.5, le=120,
                                       description="The lease lapses this long after its last renewal.")
    lease_renew_interval_s: float = pydantic.Field(default=1.5, gt=0.05, le=60, description="At most half the TTL.")
    standby_poll_interval_s: float = pydantic.Field(default=1.0, gt=0.05, le=60,
                                                    description="How often a standby tries the lease.")
    adopt_grace_s: float = pydantic.Field(
        default=15.0, ge=0, le=600,
        description="After gaining leadership, how long to wait for agents' reports before acting.")

    tick_interval_s: float = pydantic.Field(default=2.0, gt=0, le=300, description="Reconcile period.")
    plan_interval_s: float = pydantic.Field(default=30.0, gt=0, le=3600, description="Re-plan at least this often.")
    full_solve_interval_s: float = pydantic.Field(
        default=600.0, ge=0, le=86_400,
        description="At least this often a plan re-places every deployment (a full solve, warm-started from the "
                    "fleet, moves priced as churn) instead of re-solving only those whose demand changed: a placement "
                    "made while a cheaper pool was not up yet (a reserved node still provisioning) is revisited even "
                    "when demand holds still. A plan is also full when a pool is offered that the last plan did not "
                    "have (a lost cluster back). 0: every plan is a full solve.")
    solve_time_limit_s: float = pydantic.Field(default=5.0, gt=0, le=600,
                                              description="Solver time limit; the best plan found is used.")
    ttft_headroom_ms: float = pydantic.Field(
        default=10.0, ge=0, le=10_000,
        description="TTFT p99 the placement keeps free of RTT + prefill (the router's hop, engine scheduling, "
                    "jitter): a replica covers a client region only when RTT + prefill + this is within ttft_p99_ms.")
    solver_backend: str = pydantic.Field(
        default="portfolio", description="Placement search backend by name (scheduler.solver.backends): portfolio "
                                         "(the neighbourhood or CP-SAT search, then HiGHS from its plan on models of "
                                         "at most 2000 pairs), search, or mip.")

    ack_timeout_s: float = pydantic.Field(default=30.0, gt=0, le=3600,
                                          description="A directive not acknowledged by then expires.")
    start_timeout_s: float = pydantic.Field(default=1200.0, gt=0, le=86_400,
                                            description="An accepted start whose replica never shows expires.")
    drain_deadline_s: int = pydantic.Field(default=120, ge=0, le=86_400,
                                          description="In-flight requests get this long when a replica drains.")
    cluster_directives_per_min: float = pydantic.Field(default=30.0, gt=0, le=100_000,
                                                       description="Directive rate limit per cluster.")
    cluster_directive_burst: int = pydantic.Field(default=10, ge=1, le=100_000, description="Rate limit bucket size.")
    stock_out_backoff_s: float = pydantic.Field(default=60.0, gt=0, le=86_400,
                                                description="First wait before a stocked-out pool is tried again.")
    stock_out_backoff_max_s: float = pydantic.Field(default=1800.0, gt=0, le=604_800,
                                                   description="Cap of the doubling stock-out backoff.")
    pool_scale_down_delay_s: float = pydantic.Field(default=300.0, ge=0, le=86_400,
                                                    description="A pool's idle nodes are released after this.")

    demand_max_age_s: float = pydantic.Field(default=120.0, gt=0, le=86_400,
                                             description="Traffic reports older than this are ignored.")
    routes_load_refresh_s: float = pydantic.Field(default=5.0, gt=0, le=3600,
                                                  description="Load-only routing changes are published this often.")
    directives_enabled: bool = pydantic.Field(
        default=True, description="False: shadow mode: learn, plan and publish routes, but send no directive.")
    directive_retention_s: float = pydantic.Field(default=86_400.0, gt=0, le=30 * 86_400,
                                                 description="Closed directives are forgotten after this.")

    @property
    def lost_after_s(self) -> float:
        return self.heartbeat_interval_s * self.lost_after_intervals

    @pydantic.field_validator("solver_backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        # Imported here, not at the top: the registry's modules load OR-Tools and HiGHS, which a
        # command that only reads this config (the CLI's start) must not pay for.
        from scheduler.solver import backends

        if value not in backends.BACKENDS:
            raise ValueError(f"unknown solver backend {value!r}; valid: {', '.join(sorted(backends.BACKENDS))}")
        return value

    @pydantic.field_validator("state_url")
    @classmethod
    def _state_scheme(cls, value: str) -> str:
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in STATE_SCHEMES:
            raise ValueError(f"{value!r}: use sqlite://PATH (one node), redis://HOST:PORT/DB (HA) or "
                             "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE[/DB] (HA on replicated Redis)")
        return value

    @pydantic.model_validator(mode="after")
    def _cross_field(self) -> SchedulerConfig:
        if self.lease_renew_interval_s * 2 > self.lease_ttl_s:
            raise ValueError(f"lease_renew_interval_s ({self.lease_renew_interval_s}) must be at most half of "
                             f"lease_ttl_s ({self.lease_ttl_s}) so one lost renewal does not lose the lease")
        if self.stock_out_backoff_max_s < self.stock_out_backoff_s:
            raise ValueError(f"stock_out_backoff_max_s ({self.stock_out_backoff_max_s}) must be >= "
                             f"stock_out_backoff_s ({self.stock_out_backoff_s})")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            given, missing = (("tls_cert_file (--tls-cert-file)", "tls_key_file (--tls-key-file)")
                              if self.tls_cert_file else
                              ("tls_key_file (--tls-key-file)", "tls_cert_file (--tls-cert-file)"))
            raise ValueError(f"{given} is set but {missing} is not: TLS needs both the certificate and its key")
        if bool(self.admin_tls_cert_file) != bool(self.admin_tls_key_file):
            given, missing = (("admin_tls_cert_file (--admin-tls-cert-file)", "admin_tls_key_file (--admin-tls-key-file)")
                              if self.admin_tls_cert_file else
                              ("admin_tls_key_file (--admin-tls-key-file)", "admin_tls_cert_file (--admin-tls-cert-file)"))
            raise ValueError(f"{given} is set but {missing} is not: HTTPS needs both the certificate and its key")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ValueError("tls_client_ca_file (--tls-client-ca-file) needs tls_cert_file (--tls-cert-file) and "
                             "tls_key_file (--tls-key-file): mutual TLS is server TLS plus client certificates")
        return self
