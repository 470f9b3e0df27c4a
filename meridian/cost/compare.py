"""Comparing two bills: one saving figure, defined once, so every report that compares two costs
prints the same number with the same denominator."""

from __future__ import annotations

import math

SAVING_DEFINITION = "(baseline - meridian) / baseline"


def saving(baseline_usd: float, usd: float) -> float:
    """What ``usd`` saves against ``baseline_usd``, as a share of the baseline's cost:
    ``(baseline - usd) / baseline``; negative when it costs more; nan without a baseline cost."""
    return (baseline_usd - usd) / baseline_usd if baseline_usd > 0 else math.nan
