"""The emulator's settings: SGLang's own flags (same names, same defaults where they matter) plus
emulator-only knobs, read from flags or ``MERIDIAN_EMULATOR_*`` environment variables (the
supervisor uses the variables so the argv stays exactly SGLang's)."""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
from collections.abc import Mapping, Sequence

import pydantic

from meridian import capacity, latency, spec, yamlread
from meridian.catalog import gpus

log = logging.getLogger(__name__)

ENV_PREFIX = "MERIDIAN_EMULATOR_"
# A small model for paths the capacity model does not know (a local path, a test name).
DEFAULT_ARCHITECTURE = capacity.Architecture(parameters_b=0.49, layers=24, kv_heads=2, head_dim=64)
DEFAULT_CONTEXT_LENGTH = 32768
DEFAULT_EMBEDDING_CONTEXT_LENGTH = 8192


class FaultConfig(pydantic.BaseModel):
    """Injected faults, settable at start and at run time (POST /_emulator/faults)."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    crash_after_requests: int = pydantic.Field(default=0, ge=0,
                                               description="Exit abruptly (code 134) on the N-th generation request; 0: never.")
    hang: bool = pydantic.Field(default=False, description="Stop making progress: requests and /health_generate hang.")
    slowdown_factor: float = pydantic.Field(default=1.0, ge=1.0, le=1000.0,
                                            description="Multiply every model time (prefill, decode).")
    error_rate: float = pydantic.Field(default=0.0, ge=0.0, le=1.0,
                                       description="Share of generation requests answered 500.")
    fail_startup: bool = pydantic.Field(default=False,
                                        description="Log an error and exit 1 during model load (never becomes ready).")


class EmulatorConfig(pydantic.BaseModel):
    """Everything the emulator runs with. Times are model seconds; ``speedup`` divides real sleeps."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    model_path: str
    served_model_name: str = ""
    host: str = "127.0.0.1"
    port: int = pydantic.Field(default=30000, ge=0, le=65535)
    tp_size: int = pydantic.Field(default=1, ge=1, le=64)
    dp_size: int = pydantic.Field(default=1, ge=1, le=64)
    mem_fraction_static: float = pydantic.Field(default=0.88, gt=0.0, lt=1.0)
    max_running_requests: int = pydantic.Field(default=0, ge=0, description="0: from the KV budget, at most 1024.")
    max_queued_requests: int = pydantic.Field(default=0, ge=0, description="0: unlimited (SGLang's default).")
    context_length: int = pydantic.Field(default=0, ge=0, description="0: the model's (32768; 8192 for embeddings).")
    chunked_prefill_size: int = pydantic.Field(default=8192, ge=1)
    schedule_policy: str = "fcfs"
    enable_metrics: bool = False
    api_key: str | None = None
    # TLS, as SGLang 0.5.23 serves it (uvicorn): a certificate and key; a CA bundle is loaded but
    # client certificates are not required (SGLang does not do mutual TLS); with
    # enable_ssl_refresh the files are reloaded when they change. (--ssl-keyfile-password is not
    # emulated: a password belongs in no command line.)
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    ssl_ca_certs: str | None = None
    enable_ssl_refresh: bool = False
    quantization: str = ""
    disable_radix_cache: bool = False
    enable_cache_report: bool = False
    skip_server_warmup: bool = False
    is_embedding: bool = False
    log_level: str = "info"
    revision: str = ""
    # Emulator-only.
    gpu_type: str = "H100"
    startup_delay_s: float | None = pydantic.Field(default=None, ge=0,
                                                   description="Model-load time with the port closed; None: from the weights size.")
    warmup_s: float = pydantic.Field(default=1.0, ge=0, description="Port open, /health_generate 503 until warm.")
    speedup: float = pydantic.Field(default=1.0, gt=0, le=1e6, description="Real sleeps are model time / speedup.")
    output_tokens_mean: int = pydantic.Field(default=64, ge=1, description="Natural answer length when max_tokens allows.")
    health_timeout_s: float = pydantic.Field(default=20.0, gt=0, description="/health_generate gives 503 after this.")
    region: str = pydantic.Field(
        default="", description="Cloud region this replica pretends to run in. With it, a request carrying "
        "X-Meridian-Client-Region waits the RTT between the two (meridian.latency) before it is served, so "
        "network distance is felt on one machine (the demo). Empty: no simulated network.")
    latency_map_file: str = pydantic.Field(
        default="", description="A LatencyMap spec file (measured RTTs, extra regions) applied over the built-in "
        "map for the simulated distance, as the scheduler and routers apply it; empty: the built-in map.")
    request_log_dir: str = pydantic.Field(
        default="", description="Append '<unix time> <X-Request-Id>' for every answered generation request to a file "
        "in this directory (one per replica process, replica-<pid>-*.log), for tests that count requests served "
        "twice; empty: none.")
    faults: FaultConfig = FaultConfig()

    def latency_map(self) -> latency.LatencyMap:
        """The built-in latency map with the overrides of ``latency_map_file`` (the map the spec
        loader builds while it validates the file, as it does for the scheduler's specs)."""
        if not self.latency_map_file:
            return latency.default()
        loaded = spec.load_files([self.latency_map_file])
        if not loaded.of_kind("LatencyMap"):
            raise ValueError(f"{self.latency_map_file} has no LatencyMap document")
        return loaded.context.latency_map

    @pydantic.model_validator(mode="after")
    def _ssl(self) -> EmulatorConfig:
        # SGLang's own checks (srt/arg_groups/serving_hook.py handle_ssl_validation), same words.
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError("--ssl-keyfile requires --ssl-certfile to be specified as well.")
        if self.ssl_certfile and not self.ssl_keyfile:
            raise ValueError("--ssl-certfile requires --ssl-keyfile to be specified as well.")
        if self.ssl_ca_certs and not self.ssl_certfile:
            raise ValueError("--ssl-ca-certs has no effect without --ssl-certfile and --ssl-keyfile.")
        for flag, path in (("--ssl-keyfile", self.ssl_keyfile), ("--ssl-certfile", self.ssl_certfile),
                           ("--ssl-ca-certs", self.ssl_ca_certs)):
            if path and not os.path.isfile(path):
                raise ValueError(f"SSL file not found: '{path}'. Please check the {flag} path.")
        if self.enable_ssl_refresh and not self.ssl_certfile:
            raise ValueError("--enable-ssl-refresh requires --ssl-certfile and --ssl-keyfile to be specified.")
        return self

    @pydantic.model_validator(mode="after")
    def _known_region(self) -> EmulatorConfig:
        try:
            known = self.latency_map()
        except (OSError, ValueError, spec.SpecError) as exc:
            raise ValueError(f"latency_map_file: {exc}") from exc
        if self.region and self.region not in known:
            raise ValueError(f"region: unknown region {self.region!r}; use a cloud region of the latency map, "
                             "e.g. us-east-1")
        return self

    @pydantic.field_validator("gpu_type")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        if value not in gpus.GPUS:
            raise ValueError(f"unknown GPU type {value!r}; known: {', '.join(gpus.names())}")
        return value

    @pydantic.field_validator("served_model_name")
    @classmethod
    def _no_colon(cls, value: str) -> str:
        if ":" in value:
            raise ValueError(f"served_model_name {value!r} must not contain ':' (SGLang rejects it)")
        return value

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model_path

    @property
    def architecture(self) -> capacity.Architecture:
        arch = capacity.architecture_for(self.model_path)
        if arch is None:
            return capacity.Architecture(DEFAULT_ARCHITECTURE.parameters_b, DEFAULT_ARCHITECTURE.layers,
                                         DEFAULT_ARCHITECTURE.kv_heads, DEFAULT_ARCHITECTURE.head_dim,
                                         is_embedding=self.is_embedding)
        return arch

    @property
    def embedding(self) -> bool:
        return self.is_embedding or self.architecture.is_embedding

    @property
    def effective_context_length(self) -> int:
        if self.context_length:
            return self.context_length
        return DEFAULT_EMBEDDING_CONTEXT_LENGTH if self.embedding else DEFAULT_CONTEXT_LENGTH


# SGLang flags the emulator understands: (flags, dest, type or "switch").
_SGLANG_ARGS: tuple[tuple[tuple[str, ...], str, object], ...] = (
    (("--model-path", "--model"), "model_path", str),
    (("--served-model-name",), "served_model_name", str),
    (("--host",), "host", str),
    (("--port",), "port", int),
    (("--tp-size", "--tp"), "tp_size", int),
    (("--dp-size", "--dp"), "dp_size", int),
    (("--mem-fraction-static",), "mem_fraction_static", float),
    (("--max-running-requests",), "max_running_requests", int),
    (("--max-queued-requests",), "max_queued_requests", int),
    (("--context-length",), "context_length", int),
    (("--chunked-prefill-size",), "chunked_prefill_size", int),
    (("--schedule-policy",), "schedule_policy", str),
    (("--enable-metrics",), "enable_metrics", "switch"),
    (("--api-key",), "api_key", str),
    (("--ssl-keyfile",), "ssl_keyfile", str),
    (("--ssl-certfile",), "ssl_certfile", str),
    (("--ssl-ca-certs",), "ssl_ca_certs", str),
    (("--enable-ssl-refresh",), "enable_ssl_refresh", "switch"),
    (("--quantization",), "quantization", str),
    (("--disable-radix-cache",), "disable_radix_cache", "switch"),
    (("--enable-cache-report",), "enable_cache_report", "switch"),
    (("--skip-server-warmup",), "skip_server_warmup", "switch"),
    (("--is-embedding",), "is_embedding", "switch"),
    (("--log-level",), "log_level", str),
    (("--revision",), "revision", str),
)
# Accepted for compatibility, no effect on the emulator.
_IGNORED_WITH_VALUE = ("--kv-cache-dtype", "--dtype", "--device", "--load-format", "--download-dir",
                       "--weight-cache-mode", "--tokenizer-path")
_IGNORED_SWITCHES = ("--trust-remote-code", "--disable-cuda-graph", "--enable-dp-attention")
# Emulator-only: flag, dest, type, env var suffix.
_EMULATOR_ARGS: tuple[tuple[str, str, object], ...] = (
    ("--gpu-type", "gpu_type", str),
    ("--startup-delay-s", "startup_delay_s", float),
    ("--warmup-s", "warmup_s", float),
    ("--speedup", "speedup", float),
    ("--output-tokens-mean", "output_tokens_mean", int),
    ("--health-timeout-s", "health_timeout_s", float),
    ("--region", "region", str),
    ("--latency-map-file", "latency_map_file", str),
    ("--request-log-dir", "request_log_dir", str),
)
_FAULT_ARGS: tuple[tuple[str, str, object], ...] = (
    ("--crash-after-requests", "crash_after_requests", int),
    ("--hang", "hang", "switch"),
    ("--slowdown-factor", "slowdown_factor", float),
    ("--error-rate", "error_rate", float),
    ("--fail-startup", "fail_startup", "switch"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m runtime_adapter.emulator",
        description="SGLang 0.5.23 HTTP emulator backed by Meridian's capacity model. Emulator-only "
                    f"settings may also come from {ENV_PREFIX}<NAME> environment variables.")
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", dest="config", default=None,
                        help="YAML file of flags (as SGLang's --config: keys are flag names), under the command "
                             "line's; how Meridian passes --api-key without putting it on the command line")
    for flags, dest, kind in _SGLANG_ARGS:
        if kind == "switch":
            parser.add_argument(*flags, dest=dest, action="store_true", default=None)
        else:
            parser.add_argument(*flags, dest=dest, type=kind, default=None)
    for flag in _IGNORED_WITH_VALUE:
        parser.add_argument(flag, default=None, help=argparse.SUPPRESS)
    for flag in _IGNORED_SWITCHES:
        parser.add_argument(flag, action="store_true", default=None, help=argparse.SUPPRESS)
    group = parser.add_argument_group("emulator-only (also MERIDIAN_EMULATOR_<NAME>)")
    for flag, dest, kind in _EMULATOR_ARGS + _FAULT_ARGS:
        if kind == "switch":
            group.add_argument(flag, dest=dest, action="store_true", default=None)
        else:
            group.add_argument(flag, dest=dest, type=kind, default=None)


def _env_value(env: Mapping[str, str], dest: str) -> str | None:
    return env.get(ENV_PREFIX + dest.upper())


def config_file_args(path: str) -> list[str]:
    """The flags a ``--config`` YAML file stands for, converted the way SGLang 0.5.23 does
    (``sglang.srt.utils.server_args_config_parser``): ``key: value`` -> ``--key value``, ``true`` ->
    the switch, ``false`` -> nothing, a list -> ``--key v1 v2``. ValueError naming the file."""
    if pathlib.Path(path).suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"--config {path}: the file must be YAML (.yaml or .yml), as SGLang requires")
    try:
        data = yamlread.load_file(path) or {}
    except (OSError, yamlread.YAMLFileError) as exc:
        raise ValueError(f"--config {path}: cannot read it: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of flag names to values")
    args: list[str] = []
    for key, value in data.items():
        flag = f"--{str(key).replace('_', '-')}"
        if value is True:
            args.append(flag)
        elif isinstance(value, list):
            args += [flag, *map(str, value)] if value else []
        elif value is not False and value is not None:
            args += [flag, str(value)]
    return args


def _with_config_file(ns: argparse.Namespace) -> argparse.Namespace:
    """``ns`` with the values of its ``--config`` file filled in where the command line gave none."""
    path = getattr(ns, "config", None)
    if not path:
        return ns
    from_file, _unknown = build_parser().parse_known_args(config_file_args(path))
    merged = vars(from_file) | {k: v for k, v in vars(ns).items() if v is not None}
    return argparse.Namespace(**merged)


def from_namespace(ns: argparse.Namespace, env: Mapping[str, str] | None = None) -> EmulatorConfig:
    """Flags first (the ``--config`` file's under the command line's), then MERIDIAN_EMULATOR_*
    variables, then defaults. Raises pydantic's ValidationError (with the field named) on bad values."""
    env = os.environ if env is None else env
    ns = _with_config_file(ns)
    values: dict[str, object] = {}
    for _flags, dest, _kind in _SGLANG_ARGS:
        v = getattr(ns, dest, None)
        if v is not None:
            values[dest] = v
    if values.get("model_path") is None:
        raise ValueError("--model-path is required (a hub id such as meta-llama/Llama-3.1-8B-Instruct, or any name)")
    faults: dict[str, object] = {}
    for table, target in ((_EMULATOR_ARGS, values), (_FAULT_ARGS, faults)):
        for _flag, dest, _kind in table:
            v = getattr(ns, dest, None)
            if v is None:
                v = _env_value(env, dest)
                if v is not None and _kind == "switch":
                    v = v.strip().lower() in ("1", "true", "yes", "on")
            if v is not None:
                target[dest] = v
    values["faults"] = FaultConfig(**faults)
    return EmulatorConfig(**values)


def parse_args(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> EmulatorConfig:
    """Parse SGLang flags plus emulator flags. Unknown flags (other SGLang options passed through
    a spec's extra_args) are logged and ignored: the emulator cannot honour them all."""
    parser = build_parser()
    ns, unknown = parser.parse_known_args(argv)
    if unknown:
        log.warning("event=ignored_flags flags=%r", unknown)
    return from_namespace(ns, env)
