"""Router configuration: one frozen pydantic model, validated in one place.

Sources, later wins: defaults, a YAML config file (``--config``), command-line flags. Every knob and
its default is listed in docs/router.md."""

from __future__ import annotations

import pathlib
import socket
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pydantic

from meridian import latency, spec, yamlread
from router import cors, health, pertry, policies, scheduler_tls, secret_files, tls


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
    # Per-try time to first byte (router.pertry): a try that has received nothing within its limit
    # is retried on another replica, within the budget.
    per_try_ttft_multiplier: float = pydantic.Field(
        default=3.0, ge=0, le=100, description="A try's first byte may take this x the deployment's ttft_p99_ms "
                                               "(x tpot_p99_ms per token for non-streaming answers); 0: off.")
    per_try_floor_s: float = pydantic.Field(default=1.0, gt=0, le=3600, description="Shortest per-try limit.")
    per_try_cap_s: float = pydantic.Field(
        default=30.0, gt=0, le=3600, description="Longest first-byte limit; also the limit when a model has no "
                                                "TTFT target in the table.")
    per_try_default_tpot_ms: float = pydantic.Field(
        default=100.0, gt=0, le=10_000, description="Time per output token assumed when the table has no target.")

    @pydantic.model_validator(mode="after")
    def _per_try_bounds(self) -> RetryConfig:
        if self.per_try_floor_s > self.per_try_cap_s:
            raise ValueError(f"per_try_floor_s ({self.per_try_floor_s:g}) must be <= per_try_cap_s "
                             f"({self.per_try_cap_s:g})")
        return self

    def per_try(self) -> pertry.PerTrySettings:
        return pertry.PerTrySettings(enabled=self.per_try_ttft_multiplier > 0, ttft_multiplier=self.per_try_ttft_multiplier,
                                     floor_s=self.per_try_floor_s, cap_s=self.per_try_cap_s,
                                     default_tpot_ms=self.per_try_default_tpot_ms)


# A DNS name (labels of letters, digits and inner hyphens, dot-separated): what a certificate's SAN names.
DNS_NAME = r"^$|^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"


class RouterConfig(_Frozen):
    listen_host: str = "127.0.0.1"
    listen_port: int = pydantic.Field(default=8080, ge=0, le=65535)
    workers: int = pydantic.Field(default=1, ge=1, le=64, description="Processes sharing the port (SO_REUSEPORT).")
    metrics_port: int = pydantic.Field(
        default=0, ge=0, le=65535,
        description="0: off (/metrics on the client port, behind the API keys when there are any). Else "
                    "/metrics is served on listen_host at this port only, without a key, by worker i at this "
                    "port + i, so Prometheus scrapes every worker; the client port answers 404 for it.")
    router_id: str = pydantic.Field(default="", max_length=128, description="Default: hostname-port.")
    region: str = pydantic.Field(default="", description="Client region of this router (latency map name).")
    trusted_region_header: str = pydantic.Field(
        default="", description="Header an edge sets with the client's region; empty: trust none.")
    latency_map_files: tuple[str, ...] = ()
    scheduler_address: str = pydantic.Field(default="", description="host:port of the RoutingService.")
    scheduler_token_file: str = pydantic.Field(
        default="", description="File holding the token presented to the scheduler; unset: the environment "
                                "variable MERIDIAN_ROUTER_SCHEDULER_TOKEN.")
    scheduler_tls_ca_file: str = pydantic.Field(
        default="", description="PEM CA bundle that signed the scheduler's certificate; set: TLS to the scheduler.")
    scheduler_tls_cert_file: str = pydantic.Field(
        default="", description="PEM client certificate for a scheduler that requires mutual TLS.")
    scheduler_tls_key_file: str = pydantic.Field(default="", description="Unencrypted PEM key of the client cert.")
    scheduler_tls_server_name: str = pydantic.Field(
        default="", max_length=253, pattern=DNS_NAME,
        description="DNS name the scheduler's certificate is verified against instead of scheduler_address's host.")
    tls_cert_file: str = pydantic.Field(
        default="", description="PEM certificate chain the client listener (and metrics port) serves; set with "
                                "tls_key_file: HTTPS. Reloaded when the file changes.")
    tls_key_file: str = pydantic.Field(default="", description="Unencrypted PEM private key of tls_cert_file.")
    upstream_tls_ca_file: str = pydantic.Field(
        default="", description="PEM CA bundle that signed the certificates of https:// replicas; empty: the "
                                "system's trust store.")
    upstream_tls_cert_file: str = pydantic.Field(
        default="", description="PEM client certificate presented to https:// replicas that require mutual TLS.")
    upstream_tls_key_file: str = pydantic.Field(default="", description="Unencrypted PEM key of upstream_tls_cert_file.")
    upstream_tls_server_name: str = pydantic.Field(
        default="", max_length=253, pattern=DNS_NAME,
        description="DNS name every https:// replica's certificate is verified against (SNI and hostname check) "
                    "instead of its address, for replicas sharing one certificate (a cluster's tls_secret) at "
                    "addresses that change (pod IPs); empty: each replica's own host or IP.")
    upstream_tls_server_names: dict[str, Annotated[str, pydantic.StringConstraints(
        min_length=1, max_length=253, pattern=DNS_NAME)]] = pydantic.Field(
        default_factory=dict,
        description="Per cluster id (the routing table's cluster_id): the name that cluster's https:// replicas "
                    "are verified against, overriding upstream_tls_server_name, so one cluster's certificate "
                    "cannot stand in for another's replicas.")
    tls_reload_interval_s: float = pydantic.Field(
        default=5.0, gt=0, le=3600, description="How often the TLS files are checked for a change (rotation).")
    routes_file: str = pydantic.Field(default="", description="Static routing table (YAML), for running without a scheduler.")
    lkg_store: Literal["file", "redis", "none"] = "file"
    lkg_path: str = pydantic.Field(default="", description="Last-known-good table file; default under ~/.local/state.")
    redis_url: str = ""
    api_keys_file: str = ""
    api_keys_in_redis: bool = False
    default_rate_limit_rps: float = pydantic.Field(default=0.0, ge=0, description="Per key; 0: unlimited.")
    default_rate_limit_burst: int = pydantic.Field(default=0, ge=0, description="0: one second of rate.")
    default_max_concurrent_streams: int = pydantic.Field(
        default=0, ge=0, le=1_000_000, description="Streaming requests one API key may have open at once through "
                                                  "this router process (a key's max_concurrent_streams overrides "
                                                  "it); 0: unlimited. Beyond it: 429 with Retry-After.")
    cors_allow_origins: tuple[str, ...] = pydantic.Field(
        default=(), description="Origins whose browser pages may call the router (CORS): exact origins "
                                "(https://app.example.com) or '*' for any. Empty: no CORS headers, and browsers "
                                "refuse cross-origin calls (router.cors says why this is not '*' by default).")
    cors_max_age_s: int = pydantic.Field(
        default=600, ge=0, le=86_400, description="How long a browser may reuse a preflight's answer.")
    policy: str = policies.DEFAULT
    policy_args: dict[str, dict[str, Any]] = pydantic.Field(default_factory=dict)
    max_body_bytes: int = pydantic.Field(default=8 * 1024 * 1024, ge=1024, le=1 << 30)
    max_header_line_bytes: int = pydantic.Field(
        default=8190, ge=1024, le=65536, description="Longest request line or header line; beyond: 431.")
    max_headers: int = pydantic.Field(default=100, ge=8, le=1000, description="Most headers in a request; beyond: 431.")
    request_timeout_s: float = pydantic.Field(default=600.0, gt=0, le=86_400)
    client_keepalive_timeout_s: float = pydantic.Field(
        default=75.0, gt=0, le=3600, description="A client connection idle this long (no request being served) "
                                                 "is closed.")
    shutdown_timeout_s: float = pydantic.Field(
        default=50.0, ge=0, le=3600, description="On stop, how long requests being served (streams included) may "
                                                 "take to finish before their connections are cut; under the "
                                                 "pod's terminationGracePeriodSeconds (60).")
    connect_timeout_s: float = pydantic.Field(default=3.0, gt=0, le=300)
    upstream_idle_timeout_s: float = pydantic.Field(default=4.0, gt=0, le=3600)
    upstream_api_key_file: str = pydantic.Field(
        default="", description="File holding the API key sent to replicas (SGLang --api-key) as a bearer token; "
                                "unset: the environment variable MERIDIAN_UPSTREAM_API_KEY.")
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

    @pydantic.field_validator("cors_allow_origins")
    @classmethod
    def _origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        problems = [p for p in map(cors.origin_problem, value) if p]
        if problems:
            raise ValueError("; ".join(problems))
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
        if self.default_max_concurrent_streams and not (self.api_keys_file or self.api_keys_in_redis):
            problems.append("default_max_concurrent_streams: limits each API key; set api_keys_file or "
                            "api_keys_in_redis, or leave it 0")
        problems.extend(self._tls_problems())
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
        for secret, path in ((secret_files.SCHEDULER_TOKEN, self.scheduler_token_file),
                             (secret_files.UPSTREAM_API_KEY, self.upstream_api_key_file)):
            try:
                value = secret.read(path)
            except secret_files.SecretFileError as exc:
                problems.append(str(exc))
                continue
            if value and not all(33 <= ord(c) <= 126 for c in value):
                where = f"{secret.setting} ({secret.flag}) {path}" if path else f"environment variable {secret.env}"
                problems.append(f"{where}: the secret must be printable ASCII without spaces (it goes into a header)")
        tls_problems = scheduler_tls.pairing_problems(self.scheduler_tls_ca_file, self.scheduler_tls_cert_file,
                                                      self.scheduler_tls_key_file, self.scheduler_address,
                                                      self.scheduler_tls_server_name)
        problems.extend(tls_problems)
        if not tls_problems:
            try:
                self.scheduler_tls()
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _tls_problems(self) -> list[str]:
        def named(field: str) -> str:
            return f"{field} (--{field.replace('_', '-')})"

        problems = []
        for cert, key in (("tls_cert_file", "tls_key_file"), ("upstream_tls_cert_file", "upstream_tls_key_file")):
            if bool(getattr(self, cert)) != bool(getattr(self, key)):
                given, missing = (cert, key) if getattr(self, cert) else (key, cert)
                problems.append(f"{named(given)}: set without {named(missing)}; a certificate needs its key")
        if problems:
            return problems
        try:
            if self.tls_cert_file:
                tls.check_server_files(self.tls_cert_file, self.tls_key_file, cert_setting=named("tls_cert_file"),
                                       key_setting=named("tls_key_file"))
            tls.check_client_files(self.upstream_tls_ca_file, self.upstream_tls_cert_file, self.upstream_tls_key_file,
                                   ca_setting=named("upstream_tls_ca_file"),
                                   cert_setting=named("upstream_tls_cert_file"),
                                   key_setting=named("upstream_tls_key_file"))
        except ValueError as exc:
            problems.append(str(exc))
        return problems

    def latency_map(self) -> latency.LatencyMap:
        """The default latency map with the overrides of ``latency_map_files`` (LatencyMap specs), as
        the spec loader builds it while validating them."""
        if not self.latency_map_files:
            return latency.default()
        return spec.load_files(list(self.latency_map_files)).context.latency_map

    def scheduler_token(self) -> str:
        """The token for the scheduler (file, else environment; "" when neither is set)."""
        return secret_files.SCHEDULER_TOKEN.read(self.scheduler_token_file)

    def upstream_server_name(self, cluster_id: str) -> str:
        """What an https:// replica of ``cluster_id`` must name: its cluster's name, else the one
        name, else "" (its own address)."""
        return self.upstream_tls_server_names.get(cluster_id) or self.upstream_tls_server_name

    def upstream_api_key(self) -> str:
        """The API key for replicas (file, else environment; "" when neither is set)."""
        return secret_files.UPSTREAM_API_KEY.read(self.upstream_api_key_file)

    def scheduler_tls(self, on_error: Callable[[str], None] | None = None) -> scheduler_tls.ClientTls | None:
        """The TLS material for the scheduler connection (files read and checked, reloaded on change
        before each connect); None: plaintext."""
        return scheduler_tls.load(self.scheduler_tls_ca_file, self.scheduler_tls_cert_file,
                                  self.scheduler_tls_key_file, server_name=self.scheduler_tls_server_name,
                                  on_error=on_error)

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
        loaded = yamlread.safe_load(text, path) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: a router config file must be a mapping of settings")
        data.update(loaded)
    for key, value in (overrides or {}).items():
        if value is not None:
            data[key] = value
    return RouterConfig.model_validate(data)
