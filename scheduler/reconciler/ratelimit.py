"""A token bucket as a pure function: (tokens, at_s) -> refilled (tokens, now_s)."""

from __future__ import annotations


def refill(bucket: tuple[float, float] | None, now_s: float, per_min: float, burst: int) -> tuple[float, float]:
    """The bucket at ``now_s``: full (``burst``) when new, else topped up at ``per_min`` tokens per
    minute, never above ``burst``. Tokens may be negative after urgent spending; they recover."""
    if bucket is None:
        return float(burst), now_s
    tokens, at_s = bucket
    elapsed = max(0.0, now_s - at_s)
    return min(float(burst), tokens + elapsed * per_min / 60.0), now_s
