"""An SGLang 0.5.23 stand-in: the same HTTP surface (paths, status codes, JSON and SSE shapes,
error bodies, /metrics names) with a performance model from ``meridian.capacity`` behind it.

Run it as its own process (``python -m runtime_adapter.emulator --model-path ... --port ...`` or
``meridian emulator``), through the supervisor with ``engine_command=settings.command()`` and
``env=settings.environment(...)``, or in-process with ``server.serve(config)`` in tests."""

from runtime_adapter.emulator import config, settings
from runtime_adapter.emulator.config import EmulatorConfig, FaultConfig, parse_args
from runtime_adapter.emulator.settings import command, environment

__all__ = ["EmulatorConfig", "FaultConfig", "command", "config", "environment", "parse_args", "settings"]
