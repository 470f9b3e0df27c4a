"""An SGLang 0.5.23 stand-in: the same HTTP surface (paths, status codes, JSON and SSE shapes,
error bodies, /metrics names) with a performance model from ``meridian.capacity`` behind it.

Run it as its own process (``python -m runtime_adapter.emulator --model-path ... --port ...`` or
``meridian emulator``), through the supervisor with ``engine_command=emulator.command()`` and
``env=emulator.environment(...)``, or in-process with ``async with emulator.serve(config)``."""

from runtime_adapter.emulator import config, engine, protocol, radix, settings, tokens
from runtime_adapter.emulator.config import EmulatorConfig, FaultConfig, parse_args
from runtime_adapter.emulator.engine import Engine, GenRequest, QueueFull
from runtime_adapter.emulator.server import ConfigError, EmulatorServer, StartupFailed, serve
from runtime_adapter.emulator.settings import command, environment

__all__ = [
    "ConfigError", "EmulatorConfig", "EmulatorServer", "Engine", "FaultConfig", "GenRequest", "QueueFull",
    "StartupFailed", "command", "config", "engine", "environment", "parse_args", "protocol", "radix", "serve",
    "settings", "tokens",
]
