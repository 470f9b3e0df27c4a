"""Supervisor settings: one frozen, validated object (defaults suit real SGLang; tests shrink them)."""

from __future__ import annotations

import pydantic

from meridian import backoff


class SupervisorConfig(pydantic.BaseModel):
    """How a Replica supervises its engine. Durations in seconds."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    ready_timeout_s: float = pydantic.Field(default=1800.0, gt=0,
                                            description="Spawn to ready; a large model's first download can take long.")
    probe_interval_s: float = pydantic.Field(default=0.5, gt=0, description="Readiness probe period.")
    health_timeout_s: float = pydantic.Field(default=25.0, gt=0,
                                             description="One /health_generate call (SGLang itself gives up after 20 s).")
    health_interval_s: float = pydantic.Field(default=10.0, gt=0, description="Health probe period while ready.")
    unhealthy_threshold: int = pydantic.Field(default=3, ge=1,
                                              description="Consecutive failed health probes that count as a crash.")
    scrape_interval_s: float = pydantic.Field(default=2.0, gt=0, description="/metrics scrape period while ready.")
    scrape_timeout_s: float = pydantic.Field(default=5.0, gt=0)
    load_window_s: float = pydantic.Field(default=60.0, gt=0, description="Sliding window of latency percentiles.")
    restart_backoff_initial_s: float = pydantic.Field(default=1.0, ge=0)
    restart_backoff_max_s: float = pydantic.Field(default=60.0, ge=0)
    restart_backoff_multiplier: float = pydantic.Field(default=2.0, ge=1.0)
    max_crashes: int = pydantic.Field(default=5, ge=1,
                                      description="Consecutive crashes after which the replica is FAILED.")
    stable_after_s: float = pydantic.Field(default=600.0, gt=0,
                                           description="Ready this long resets the consecutive-crash count.")
    term_grace_s: float = pydantic.Field(default=30.0, ge=0, description="SIGTERM to SIGKILL.")
    kill_wait_s: float = pydantic.Field(default=10.0, gt=0, description="How long to wait for exit after SIGKILL.")
    drain_poll_interval_s: float = pydantic.Field(default=0.5, gt=0)
    relay_start_timeout_s: float = pydantic.Field(
        default=30.0, gt=0, description="With TLS: the relay's spawn to its first TLS handshake.")
    log_lines: int = pydantic.Field(default=200, ge=1, description="Engine log lines kept in memory.")
    message_log_lines: int = pydantic.Field(default=20, ge=0, description="Log lines quoted in a failure message.")
    log_max_bytes: int = pydantic.Field(default=16 * 1024 * 1024, ge=4096,
                                        description="Adoptable mode's log file is truncated past this.")
    survive_supervisor_exit: bool = pydantic.Field(
        default=False,
        description="Adoptable mode: the engine outlives the supervisor (no death signal, log to a file in "
                    "state_dir, a record for Replica.adopt). Off: the kernel kills the engine when the supervisor dies.")

    @pydantic.model_validator(mode="after")
    def _backoff_order(self) -> SupervisorConfig:
        if self.restart_backoff_max_s < self.restart_backoff_initial_s:
            raise ValueError(f"restart_backoff_max_s ({self.restart_backoff_max_s}) must be >= "
                             f"restart_backoff_initial_s ({self.restart_backoff_initial_s})")
        return self

    def backoff_s(self, crashes: int) -> float:
        """Delay before the restart that follows the ``crashes``-th consecutive crash (1-based)."""
        # No jitter: one process restarting, nothing to spread (meridian.backoff's ceiling).
        return backoff.ceiling_s(crashes, self.restart_backoff_initial_s, self.restart_backoff_max_s,
                                 self.restart_backoff_multiplier)
