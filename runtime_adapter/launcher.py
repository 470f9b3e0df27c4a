"""From a RuntimeSpec and a GPU assignment to the engine's command line and environment.

The argv is SGLang 0.5.23's exactly (flag names checked against ``sglang.srt.server_args`` in
tests when it is importable, and always against ``SGLANG_FLAGS``). The engine command is a
parameter, so the same supervisor runs real SGLang or the emulator (which accepts the same flags;
its own settings travel as ``MERIDIAN_EMULATOR_*`` environment variables so the argv stays SGLang's).

The API key never goes on the command line (``ps`` would show it to every user of the node):
SGLang 0.5.23 reads no environment variable for it, but it reads ``--config FILE`` (YAML, keys are
flag names; ``sglang.srt.utils.server_args_config_parser``), so the plan carries the key in a
private file (``LaunchPlan.secret_files``, written with mode 0600 before the spawn) named by
``--config``. The emulator reads the same file the same way.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence

import yaml

from meridian import fleet

SGLANG_COMMAND: tuple[str, ...] = (sys.executable, "-m", "sglang.launch_server")
EMULATOR_COMMAND: tuple[str, ...] = (sys.executable, "-m", "runtime_adapter.emulator")

# SGLang 0.5.23 flags Meridian sets or that a spec's extra_args commonly use (docs: sglang.md).
# Flags that take no value are listed in SGLANG_SWITCHES.
SGLANG_FLAGS: frozenset[str] = frozenset({
    "--model-path", "--model", "--host", "--port", "--tp-size", "--dp-size", "--mem-fraction-static",
    "--max-running-requests", "--max-queued-requests", "--context-length", "--chunked-prefill-size",
    "--schedule-policy", "--enable-metrics", "--api-key", "--served-model-name", "--log-level",
    "--quantization", "--kv-cache-dtype", "--dtype", "--disable-radix-cache", "--enable-cache-report",
    "--device", "--load-format", "--skip-server-warmup", "--download-dir", "--revision",
    "--trust-remote-code", "--is-embedding", "--weight-cache-mode", "--config",
})
SGLANG_SWITCHES: frozenset[str] = frozenset({
    "--enable-metrics", "--disable-radix-cache", "--enable-cache-report", "--skip-server-warmup",
    "--trust-remote-code", "--is-embedding",
})


# Flags whose value is a secret: never accepted in extra_args (they would show in ps).
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--ssl-keyfile-password"})


class LaunchError(ValueError):
    """A launch parameter is invalid; the message names the parameter and what would be valid."""


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """What to exec: ``argv`` (engine command + SGLang flags) and ``env`` (only the variables
    Meridian sets; they are laid over the parent's environment at spawn)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    engine_args: tuple[str, ...]
    # path -> text of files holding secrets (the API key's --config file), to write privately
    # (mode 0600) before spawning; never logged.
    secret_files: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def full_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with the plan's variables laid over it."""
        merged = dict(os.environ if base is None else base)
        merged.update(self.env)
        return merged

    def redacted_argv(self) -> tuple[str, ...]:
        """The argv with the API key replaced, for logs, reports and adoption records."""
        return redact(self.argv)


def redact(argv: Sequence[str]) -> tuple[str, ...]:
    """``argv`` with the value of ``--api-key`` replaced by ``***``."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--api-key":
            out[i + 1] = "***"
    return tuple(out)


def build_command(
    spec: fleet.RuntimeSpec,
    *,
    host: str = "127.0.0.1",
    port: int,
    gpu_ids: Sequence[int] = (),
    engine_command: Sequence[str] | None = None,
    api_key: str | None = None,
    cache_dir: str | None = None,
    enable_metrics: bool = True,
    env: Mapping[str, str] | None = None,
    config_path: str | None = None,
) -> LaunchPlan:
    """The engine command line and environment for one replica.

    ``gpu_ids`` become ``CUDA_VISIBLE_DEVICES`` (empty: left as inherited, e.g. the emulator);
    when given, ``spec.tp_size`` must divide their number. ``cache_dir`` is the node's shared
    weights cache: ``--download-dir`` plus the Hugging Face cache variables, so the tokenizer and
    the weights come from the same place. ``env`` adds variables (e.g. ``MERIDIAN_EMULATOR_*``).
    ``api_key`` needs ``config_path`` (a ``.yaml`` path only the engine's user can read): the key
    goes in that file, and ``--config config_path`` on the command line."""
    _validate(spec, host=host, port=port, gpu_ids=gpu_ids)
    args: list[str] = [
        "--model-path", spec.model_path,
        "--served-model-name", spec.served_model_name,
        "--host", host,
        "--port", str(port),
        "--tp-size", str(spec.tp_size),
        "--mem-fraction-static", _num(spec.mem_fraction_static),
    ]
    if spec.model_revision and spec.model_revision != "main":
        args += ["--revision", spec.model_revision]
    if spec.context_length:
        args += ["--context-length", str(spec.context_length)]
    if spec.max_running_requests:
        args += ["--max-running-requests", str(spec.max_running_requests)]
    if spec.max_queued_requests:
        args += ["--max-queued-requests", str(spec.max_queued_requests)]
    if spec.quantization and spec.quantization != "none":
        args += ["--quantization", spec.quantization]
    if spec.is_embedding:
        args.append("--is-embedding")
    if enable_metrics:
        args.append("--enable-metrics")
    secret_files: dict[str, str] = {}
    if api_key:
        if not config_path or not config_path.endswith((".yaml", ".yml")):
            raise LaunchError("api_key needs config_path, a .yaml file for SGLang's --config: the key is never put "
                              "on the command line")
        if any(a.split("=", 1)[0] == "--config" for a in spec.extra_args):
            raise LaunchError("runtime.extra_args sets --config, which carries the replica's API key here "
                              "(SGLang takes one --config); put those settings in extra_args instead")
        secret_files[config_path] = yaml.safe_dump({"api-key": api_key})
        args += ["--config", config_path]
    if cache_dir:
        args += ["--download-dir", cache_dir]
    args += list(spec.extra_args)

    plan_env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    if gpu_ids:
        plan_env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpu_ids)
    if cache_dir:
        plan_env["HF_HOME"] = cache_dir
        plan_env["HF_HUB_CACHE"] = os.path.join(cache_dir, "hub")
    plan_env.update(spec.env)
    plan_env.update(env or {})
    command = tuple(engine_command) if engine_command else SGLANG_COMMAND
    return LaunchPlan(argv=command + tuple(args), env=plan_env, engine_args=tuple(args), secret_files=secret_files)


def _validate(spec: fleet.RuntimeSpec, *, host: str, port: int, gpu_ids: Sequence[int]) -> None:
    if not spec.model_path:
        raise LaunchError("runtime.model_path is empty; give a hub id (org/name) or a local path")
    if not spec.served_model_name or ":" in spec.served_model_name or any(c.isspace() for c in spec.served_model_name):
        raise LaunchError(f"runtime.served_model_name {spec.served_model_name!r} must be non-empty, "
                          "without ':' or spaces (SGLang rejects ':')")
    if spec.engine != "sglang":
        raise LaunchError(f"runtime.engine {spec.engine!r} is not supported; valid: 'sglang'")
    if not host:
        raise LaunchError("host is empty; give an address to bind, e.g. 127.0.0.1")
    if not 1 <= port <= 65535:
        raise LaunchError(f"port {port} is out of range; valid: 1..65535")
    if spec.tp_size < 1:
        raise LaunchError(f"runtime.tp_size {spec.tp_size} must be >= 1")
    if gpu_ids:
        if len(set(gpu_ids)) != len(gpu_ids) or any(g < 0 for g in gpu_ids):
            raise LaunchError(f"gpu_ids {list(gpu_ids)} must be distinct non-negative device indexes")
        if len(gpu_ids) % spec.tp_size:
            raise LaunchError(f"runtime.tp_size {spec.tp_size} must divide the {len(gpu_ids)} assigned GPUs {list(gpu_ids)}")
    if not 0.0 < spec.mem_fraction_static < 1.0:
        raise LaunchError(f"runtime.mem_fraction_static {spec.mem_fraction_static} must be in (0, 1)")
    if spec.max_running_requests < 0 or spec.max_queued_requests < 0 or spec.context_length < 0:
        raise LaunchError("runtime.max_running_requests, max_queued_requests and context_length must be >= 0 (0: engine default)")
    owned = {"--model-path", "--model", "--port", "--host", "--tp-size", "--tp", "--served-model-name",
             "--api-key", "--enable-metrics", "--context-length", "--mem-fraction-static", "--download-dir"}
    for arg in spec.extra_args:
        if arg.split("=", 1)[0] in SECRET_FLAGS:
            raise LaunchError(f"runtime.extra_args sets {arg.split('=', 1)[0]}: a secret on the engine's command line "
                              "is visible to every user of the node (ps); Meridian does not pass one")
        if arg.split("=", 1)[0] in owned:
            raise LaunchError(f"runtime.extra_args sets {arg.split('=', 1)[0]}, which Meridian sets from the spec")


def _num(value: float) -> str:
    return f"{value:g}"
