"""Router configuration: one frozen pydantic model, validated in one place.

Sources, later wins: defaults, a YAML config file (``--config``), command-line flags. Every knob and
its default is listed in docs/router.md."""

from __future__ import annotations

import pathlib
import socket
from typing import Any, Literal

import pydantic
import yaml

from meridian import latency, spec
from router import health, policies, scheduler_tls


class _Frozen(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")


class HealthConfig(_Frozen):
    interval_s: float = pydantic.Field(default=5.0, gt=0, le=3600)
    timeout_s: float = pydantic.Field(default=5.0, gt=0, le=300)
    unhealthy_threshold: int = pydantic.Field(default=3, ge=1, le=100)
    healthy_threshold: int = pydantic.Field(default=2, ge=1, le=100)
    path: str = pydantic.Field(default="/health", pattern=r"^/")
    enabled: bool = True

    def settings(self) -> health.ActiveSettings:
        return health.ActiveSettings(self.interval_s, self.timeout_s, self.unhealthy_threshold,
                                     self.healthy_threshold, self.path)


class OutlierConfig(_Frozen):
    consecutive_failures: int = pydantic.Field(default=5, ge=1, le=1000)
    base_ejection_s: float = pydantic.Field(default=30.0, gt=0, le=86_400)
    max_ejection_s: float = pydantic.Field(default=300.0, gt=0, le=86_400)
    max_ejected_percent: float = pydantic.Field(default=50.0, ge=0, le=100)
    panic_threshold_percent: float = pydantic.Field(default=50.0, ge=0, le=100)

    def settings(self) -> health.OutlierSettings:
        return health.OutlierSettings(self.consecutive_failures, self.base_ejection_s, self.max_ejection_s,
                                      self.max_ejected_percent, self.panic_threshold_percent)


class RetryConfig(_Frozen):
    max_attempts: int = pydantic.Field(default=3, ge=1, le=10, description="Tries per request, the first included.")
    budget_ratio: float = pydantic.Field(default=0.2, ge=0, le=1, description="Retries per request, on average.")
    budget_min_per_s: float = pydantic.Field(default=3.0, ge=0, le=10_000)
    budget_window_s: int = pydantic.Field(default=10, ge=1, le=3600)


class RouterConfig(_Frozen):
    listen_host: str = "127.0.0.1"
    listen_port: int = pydantic.Field(default=8080, ge=0, le=65535)
    workers: int = pydantic.Field(default=1, ge=1, le=64, description="Processes sharing the port (SO_REUSEPORT).")
    metrics_port: int = pydantic.Field(
        default=0, ge=0, le=65535,
        description="0: off. Else /metrics is also served on listen_host at this port, by worker i at this "
                    "port + i, so Prometheus scrapes every worker (the shared port's /metrics answers for "
                    "whichever worker takes the connection).")
    router_id: str = pydantic.Field(default="", max_length=128, description="Default: hostname-port.")
    region: str = pydantic.Field(default="", description="Client region of this router (latency map name).")
    trusted_region_header: str = pydantic.Field(
        default="", description="Header an edge sets with the client's region; empty: trust none.")
    latency_map_files: tuple[str, ...] = ()
    scheduler_address: str = pydantic.Field(default="", description="host:port of the RoutingService.")
    scheduler_token: str = ""
    scheduler_tls_ca_file: str = pydantic.Field(
        default="", description="PEM CA bundle that signed the scheduler's certificate; set: TLS to the scheduler.")
    scheduler_tls_cert_file: str = pydantic.Field(
        default="", description="PEM client certificate for a scheduler that requires mutual TLS.")
    scheduler_tls_key_file: str = pydantic.Field(default="", description="Unencrypted PEM key of the client cert.")
    routes_file: str = pydantic.Field(default="", description="Static routing table (YAML), for running without a scheduler.")
    lkg_store: Literal["file", "redis", "none"] = "file"
    lkg_path: str = pydantic.Field(default="", description="Last-known-good table file; default under ~/.local/state.")
    redis_url: str = ""
    api_keys_file: str = ""
    api_keys_in_redis: bool = False
    default_rate_limit_rps: float = pydantic.Field(default=0.0, ge=0, description="Per key; 0: unlimited.")
    default_rate_limit_burst: int = pydantic.Field(default=0, ge=0, description="0: one second of rate.")
    policy: str = policies.DEFAULT
    policy_args: dict[str, dict[str, Any]] = pydantic.Field(default_factory=dict)
    max_body_bytes: int = pydantic.Field(default=8 * 1024 * 1024, ge=1024, le=1 << 30)
    request_timeout_s: float = pydantic.Field(default=600.0, gt=0, le=86_400)
    connect_timeout_s: float = pydantic.Field(default=3.0, gt=0, le=300)
    upstream_idle_timeout_s: float = pydantic.Field(default=4.0, gt=0, le=3600)
    upstream_api_key: str = ""
    max_in_flight_per_replica: int = pydantic.Field(default=256, ge=1, le=1_000_000)
    queue_size_per_model: int = pydantic.Field(default=1024, ge=0, le=10_000_000)
    queue_timeout_s: float = pydantic.Field(default=30.0, gt=0, le=3600)
    cold_start_wait_s: float = pydantic.Field(
        default=90.0, ge=0, le=3600,
        description="How long a request for a model with no replica at all (scaled to zero, or not placed "
                    "yet) waits for one to appear before 503; 0 answers 503 at once.")
    ewma_decay_s: float = pydantic.Field(default=10.0, gt=0, le=3600)
    default_cost_ms: float = pydantic.Field(default=30.0, gt=0, le=600_000)
    unknown_rtt_ms: float = pydantic.Field(default=150.0, ge=0, le=10_000)
    traffic_report_interval_s: float = pydantic.Field(default=10.0, gt=0, le=3600)
    health: HealthConfig = HealthConfig()
    outlier: OutlierConfig = OutlierConfig()
    retry: RetryConfig = RetryConfig()
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @pydantic.field_validator("policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        policies.check(value)
        return value

    @pydantic.field_validator("policy_args")
    @classmethod
    def _policy_args(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, args in value.items():
            policies.check(name, args)
        return value

    @pydantic.field_validator("trusted_region_header")
    @classmethod
    def _header(cls, value: str) -> str:
        return value.strip().lower()

    @pydantic.model_validator(mode="after")
    def _cross_field(self) -> RouterConfig:
        problems = []
        if self.scheduler_address and self.routes_file:
            problems.append("routes_file: give either scheduler_address or routes_file, not both")
        if self.lkg_store == "redis" and not self.redis_url:
            problems.append("lkg_store: 'redis' needs redis_url")
        if self.api_keys_in_redis and not self.redis_url:
            problems.append("api_keys_in_redis: needs redis_url")
        if (self.default_rate_limit_rps or self.default_rate_limit_burst) and not (
                self.api_keys_file or self.api_keys_in_redis):
            # Limits are per API key: without keys nothing would be limited, silently.
            problems.append("default_rate_limit_rps: limits each API key; set api_keys_file or api_keys_in_redis, "
                            "or leave it 0")
        if self.region and self.region not in self.latency_map():
            problems.append(f"region: {latency.UnknownRegion(self.region)}; see meridian/data/regions.csv")
        if self.outlier.base_ejection_s > self.outlier.max_ejection_s:
            problems.append("outlier.base_ejection_s: must be <= outlier.max_ejection_s")
        if self.metrics_port:
            last = self.metrics_port + self.workers - 1
            if last > 65535:
                problems.append(f"metrics_port: {self.metrics_port} + {self.workers} workers runs past port 65535")
            elif self.metrics_port <= self.listen_port <= last:
                problems.append(f"metrics_port: ports {self.metrics_port}-{last} (one per worker) include "
                                f"listen_port {self.listen_port}")
        tls_problems = scheduler_tls.pairing_problems(self.scheduler_tls_ca_file, self.scheduler_tls_cert_file,
                                                      self.scheduler_tls_key_file, self.scheduler_address)
        problems.extend(tls_problems)
        if not tls_problems:
            try:
                self.scheduler_tls()
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def latency_map(self) -> latency.LatencyMap:
        """The default latency map with the overrides of ``latency_map_files`` (LatencyMap specs), as
        the spec loader builds it while validating them."""
        if not self.latency_map_files:
            return latency.default()
        return spec.load_files(list(self.latency_map_files)).context.latency_map

    def scheduler_tls(self) -> scheduler_tls.ClientTls | None:
        """The TLS material for the scheduler connection (files read and checked); None: plaintext."""
        return scheduler_tls.load(self.scheduler_tls_ca_file, self.scheduler_tls_cert_file,
                                  self.scheduler_tls_key_file)

    @property
    def effective_router_id(self) -> str:
        return self.router_id or f"{socket.gethostname()}-{self.listen_port}"

    @property
    def effective_lkg_path(self) -> pathlib.Path:
        if self.lkg_path:
            return pathlib.Path(self.lkg_path)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.effective_router_id)
        return pathlib.Path.home() / ".local" / "state" / "meridian" / f"router-{safe}.routes.pb"


def load(path: str | None = None, overrides: dict[str, Any] | None = None) -> RouterConfig:
    """Build the config from an optional YAML file and flag overrides (None values are ignored);
    raises pydantic.ValidationError with field paths on bad input."""
    data: dict[str, Any] = {}
    if path:
        text = pathlib.Path(path).read_text()
        loaded = yaml.safe_load(text) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: a router config file must be a mapping of settings")
        data.update(loaded)
    for key, value in (overrides or {}).items():
        if value is not None:
            data[key] = value
    return RouterConfig.model_validate(data)
