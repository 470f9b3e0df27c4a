"""What every backend tells an engine beyond its SGLang flags: whether the engine is Meridian's
SGLang emulator, and then the emulator-only settings (the pool's GPU type, the sim cluster's
region) as ``MERIDIAN_EMULATOR_*`` variables, so the argv stays SGLang's."""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Sequence

from runtime_adapter.emulator import config as emulator_config
from runtime_adapter.emulator import settings as emulator_settings

from agents.backends import base

log = logging.getLogger(__name__)


def is_emulator(engine_command: Sequence[str]) -> bool:
    """Whether the engine is Meridian's SGLang emulator, however it is launched:
    ``python -m runtime_adapter.emulator``, ``python -mruntime_adapter.emulator`` or
    ``meridian emulator`` (it is then told the pool's GPU type and the cluster's region)."""
    args = list(engine_command)
    if any(a in ("runtime_adapter.emulator", "-mruntime_adapter.emulator") for a in args):
        return True
    # The CLI, however started (`meridian`, `env meridian`, `python -m meridian.cli.main`): its
    # `emulator` subcommand.
    launchers = {"meridian", "meridian.cli.main", "-mmeridian.cli.main", "meridian.cli", "-mmeridian.cli"}
    return any((pathlib.PurePath(a).name in launchers) and nxt == "emulator" for a, nxt in zip(args, args[1:]))


def engine_env(settings: base.ReplicaSettings, gpu_type: str, engine_command: Sequence[str] | None = None) -> dict[str, str]:
    """The engine's extra environment: ``settings.engine_env``, plus, when the engine is the
    emulator, the pool's GPU type and the emulator region (each on its own: a value the emulator
    does not model drops only that one, with a warning)."""
    env = dict(settings.engine_env)
    if not is_emulator(settings.engine_command if engine_command is None else engine_command):
        return env
    # A region may come from the LatencyMap file the replicas will be given (inherited or set).
    map_var = emulator_config.ENV_PREFIX + "LATENCY_MAP_FILE"
    map_file = env.get(map_var) or os.environ.get(map_var)
    for name, value in (("gpu_type", gpu_type), ("region", settings.emulator_region)):
        if not value:
            continue
        try:
            if name == "gpu_type":
                extra = emulator_settings.environment(gpu_type=value)
            else:
                extra = emulator_settings.environment(region=value, latency_map_file=map_file or None)
            env = {**extra, **env}
        except ValueError:
            log.warning("emulator does not model %s=%s; using its default", name, value)
    return env
