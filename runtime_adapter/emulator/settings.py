"""Helpers for callers that launch the emulator through the supervisor: the engine command and the
``MERIDIAN_EMULATOR_*`` environment that carries emulator-only settings (the argv stays SGLang's)."""

from __future__ import annotations

from runtime_adapter import launcher
from runtime_adapter.emulator import config as config_mod


def command() -> list[str]:
    """``[sys.executable, "-m", "runtime_adapter.emulator"]``: pass as ``engine_command``."""
    return list(launcher.EMULATOR_COMMAND)


def environment(*, gpu_type: str | None = None, speedup: float | None = None, startup_delay_s: float | None = None,
                warmup_s: float | None = None, output_tokens_mean: int | None = None,
                health_timeout_s: float | None = None, region: str | None = None,
                latency_map_file: str | None = None, crash_after_requests: int | None = None,
                hang: bool | None = None, slowdown_factor: float | None = None, error_rate: float | None = None,
                fail_startup: bool | None = None, request_log_dir: str | None = None) -> dict[str, str]:
    """The environment variables for the given emulator settings (None: the emulator's default).
    Values are validated here, so a bad one fails at the caller, naming the setting."""
    settings = {k: v for k, v in locals().items() if v is not None}
    fault_names = set(config_mod.FaultConfig.model_fields)
    config_mod.FaultConfig(**{k: v for k, v in settings.items() if k in fault_names})
    config_mod.EmulatorConfig(model_path="validate", **{k: v for k, v in settings.items() if k not in fault_names})
    out = {}
    for name, value in settings.items():
        if isinstance(value, bool):
            value = "1" if value else "0"
        out[config_mod.ENV_PREFIX + name.upper()] = str(value)
    return out
