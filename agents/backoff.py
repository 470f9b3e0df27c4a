"""Jittered exponential backoff, with the randomness injected so tests and the simulator are
deterministic. "Full jitter" (a uniform draw below the exponential ceiling) spreads the reconnects of
many agents after a scheduler restart instead of having them arrive in lockstep."""

from __future__ import annotations

import dataclasses
import random


@dataclasses.dataclass
class Backoff:
    """Delays for successive failed attempts: attempt n waits uniform(floor, min(max_s, initial_s *
    multiplier**n)) seconds, where floor is ``min_fraction`` of that ceiling. ``reset()`` after a
    success starts again from ``initial_s``."""

    initial_s: float = 0.5
    max_s: float = 30.0
    multiplier: float = 2.0
    min_fraction: float = 0.1
    rng: random.Random = dataclasses.field(default_factory=random.Random)
    attempts: int = 0

    def __post_init__(self) -> None:
        if self.initial_s <= 0:
            raise ValueError(f"initial_s must be > 0, got {self.initial_s}")
        if self.max_s < self.initial_s:
            raise ValueError(f"max_s ({self.max_s}) must be >= initial_s ({self.initial_s})")
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.min_fraction <= 1:
            raise ValueError(f"min_fraction must be in [0, 1], got {self.min_fraction}")

    def ceiling_s(self) -> float:
        """The upper bound of the next delay."""
        # Cap the exponent so a long outage cannot overflow the float.
        return min(self.max_s, self.initial_s * self.multiplier ** min(self.attempts, 64))

    def next_delay_s(self) -> float:
        """The delay before the next attempt; counts one more failed attempt."""
        ceiling = self.ceiling_s()
        self.attempts += 1
        return self.rng.uniform(ceiling * self.min_fraction, ceiling)

    def reset(self) -> None:
        self.attempts = 0
