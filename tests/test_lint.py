"""Style and types stay where the code base keeps them: `ruff check` (rules in pyproject.toml's
[tool.ruff]) on the whole repository and `mypy` (pyproject.toml's [tool.mypy]) on the kernel."""

from __future__ import annotations

import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent


def test_ruff_finds_nothing():
    """`ruff check .` passes: no pyflakes, pycodestyle-error, warning or bugbear finding anywhere."""
    result = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "--output-format", "concise", "."], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_passes_on_the_kernel_and_the_kubernetes_backend():
    """`mypy` (the kernel: spec, fleet, catalog, latency, capacity, client, cost, traces, tls; and the
    agents' replica backends; typed defs, strict equality) passes."""
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(REPO / ".mypy_cache")], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
