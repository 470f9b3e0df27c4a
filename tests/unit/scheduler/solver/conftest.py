"""Hypothesis settings for the solver's property tests (profile ``meridian-solver``, which the
tests take as their parent settings, so nothing global changes for other components' tests).

With the CI environment variable set the examples are derandomized and no example database is
kept: every CI run checks the same examples, on a loaded 2-core machine as on a fast one, and a
failure prints the blob that reproduces it. Locally, examples are random and failures are replayed
from the database, so new ground is covered run after run."""

from __future__ import annotations

import os

import hypothesis

PROFILE = "meridian-solver"

_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")

hypothesis.settings.register_profile(
    PROFILE, deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow],
    **({"derandomize": True, "database": None, "print_blob": True} if _CI else {}))
