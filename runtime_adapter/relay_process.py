"""The TLS relay in front of a local engine, as a process of its own (``python -m runtime_adapter
relay``, see ``tls_relay``): spawned, watched, adopted and stopped by the supervisor beside the
engine, the same way.

Why a process and not a task in the agent: in the adoptable mode the engine outlives the agent
(static stability), and the replica's public port must outlive it too, or a restarting agent would
take every replica off the network. The relay is spawned like the engine (its own process group;
``PR_SET_PDEATHSIG`` through ``deathsig.py`` outside the adoptable mode, so it dies with its
supervisor; a 0600 log file inside it), and its record (pid, kernel start time, command line,
port: ``records.RelayRecord``) sits in the engine's, so a restarted supervisor checks both.

The relay gets the certificate and key files' paths and reads the key itself: no secret is on its
command line. The engine listens on loopback only; the supervisor's own probes and scrapes go to
the engine there directly (no TLS, no CA needed by the agent, the API key never leaves the host),
and the relay is checked on its own by a TLS handshake."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

from runtime_adapter import clock as clock_mod
from runtime_adapter import config as config_mod
from runtime_adapter import handle, probe, process, records

log = logging.getLogger(__name__)

RELAY_COMMAND: tuple[str, ...] = (sys.executable, "-m", "runtime_adapter", "relay")
LOG_POLL_S = 0.5


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """A replica's HTTPS certificate chain and unencrypted key, as paths (the relay reads them and
    reloads them when they change, every ``reload_interval_s``)."""

    cert_file: str
    key_file: str
    reload_interval_s: float = 5.0


def relay_argv(files: TlsFiles, *, upstream: str, host: str, port: int, replica_id: str) -> tuple[str, ...]:
    return (*RELAY_COMMAND, "--replica-id", replica_id, "--upstream", upstream, "--host", host, "--port", str(port),
            "--tls-cert-file", files.cert_file, "--tls-key-file", files.key_file,
            "--tls-reload-interval-s", f"{files.reload_interval_s:g}")


def is_loopback(host: str) -> bool:
    return host.startswith("127.") or host in ("localhost", "::1")


def _recorded_alive(rec: records.RelayRecord) -> bool:
    """True when the recorded relay still runs: same pid, same kernel start time (not a reused pid)."""
    return rec.pid > 0 and process.pid_alive(rec.pid) and process.proc_start_ticks(rec.pid) == rec.start_ticks


async def end_recorded(rec: records.RelayRecord, clock: clock_mod.Clock, *, grace_s: float = 5.0) -> bool:
    """Stop a recorded relay that still runs (its engine is not adopted: nothing may stay in front of
    a port nobody supervises). True when there was one to stop."""
    if not _recorded_alive(rec):
        return False
    engine = handle.EngineHandle(process.attach(rec.pid, rec.start_ticks), clock, process.LogTail(1))
    await engine.terminate(grace_s, grace_s)
    await engine.release()
    log.info("event=relay_ended replica_pid=%d port=%d reason=engine_not_adopted", rec.pid, rec.port)
    return True


class Relay:
    """One replica's relay process: ``spawn`` (or ``adopt``), ``serving`` (its first TLS handshake),
    ``answers`` (one handshake), ``terminate``, ``release`` (stop watching, leave it running)."""

    def __init__(self, files: TlsFiles, *, replica_id: str, upstream: str, host: str, port: int,
                 clock: clock_mod.Clock, survive_supervisor_exit: bool, log_path: str | None, log_lines: int = 200):
        if not is_loopback(upstream.split("//", 1)[-1].rsplit(":", 1)[0].strip("[]")):
            raise ValueError(f"the relay's upstream {upstream!r} must be the engine on loopback")
        if not 1 <= port <= 65535:
            raise ValueError(f"the relay's port {port} is out of range; valid: 1..65535")
        self.files = files
        self.replica_id = replica_id
        self.host, self.port = host, port
        self.argv = relay_argv(files, upstream=upstream, host=host, port=port, replica_id=replica_id)
        self._probe_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        self._clock = clock
        self._survive = survive_supervisor_exit
        self._log_path = log_path
        self._log = process.LogTail(log_lines, logger_name="runtime_adapter.relay", replica_id=replica_id)
        self._handle: handle.EngineHandle | None = None
        self._failures = 0

    @property
    def pid(self) -> int | None:
        return self._handle.pid if self._handle else None

    @property
    def running(self) -> bool:
        return self._handle is not None and not self._handle.exited

    def exit_code(self) -> int | None:
        return self._handle.exit_code() if self._handle else None

    def log_lines(self, n: int | None = None) -> list[str]:
        return self._log.lines(n)

    async def spawn(self) -> str | None:
        """Start the relay; a reason when it could not be started."""
        await self.release()
        self._failures = 0
        try:
            proc, stream = await process.spawn(self.argv, os.environ, survive_supervisor_exit=self._survive,
                                               log_path=self._log_path)
        except OSError as exc:
            return f"could not start the tls relay: {exc}"
        self._handle = handle.EngineHandle(proc, self._clock, self._log)
        if stream is not None:
            self._handle.follow_stream(stream)
        elif self._log_path:
            self._handle.follow_file(self._log_path, LOG_POLL_S, 1024 * 1024, from_end=False)
        log.info("event=relay_spawned replica=%s pid=%d host=%s port=%d", self.replica_id, proc.pid, self.host,
                 self.port)
        return None

    async def answers(self, timeout_s: float = 2.0) -> bool:
        return await probe.tls_answers(self._probe_host, self.port, timeout_s=timeout_s)

    async def check(self, config: config_mod.SupervisorConfig) -> str | None:
        """One health check while READY (a TLS handshake); a reason after ``unhealthy_threshold``
        consecutive failures (a hung relay)."""
        if await self.answers(timeout_s=config.health_timeout_s):
            self._failures = 0
            return None
        self._failures += 1
        log.warning("event=relay_health_failed replica=%s failures=%d port=%d", self.replica_id, self._failures,
                    self.port)
        if self._failures < config.unhealthy_threshold:
            return None
        return f"tls relay unhealthy: {self._failures} consecutive failed TLS handshakes on port {self.port}"

    async def serving(self, timeout_s: float, interval_s: float) -> str | None:
        """Wait until the relay completes a TLS handshake; a reason when it exits or ``timeout_s`` passes."""
        deadline = self._clock.monotonic() + timeout_s
        while True:
            if self._handle is None or self._handle.exited:
                code = self.exit_code()
                tail = "; ".join(self._log.lines(3))
                return f"tls relay exited with code {code}" + (f" ({tail})" if tail else "")
            if await self.answers():
                return None
            if self._clock.monotonic() > deadline:
                return f"tls relay on port {self.port} did not answer TLS within {timeout_s:g}s"
            await self._handle.wait_exit(interval_s)

    async def adopt(self, rec: records.RelayRecord) -> str | None:
        """Re-attach to the recorded relay; a reason when it cannot serve as this replica's relay (then
        it is stopped if it still ran, and the caller spawns a fresh one)."""
        if not _recorded_alive(rec):
            return "the tls relay process is gone"
        cmdline = process.proc_cmdline(rec.pid)
        if cmdline != tuple(rec.argv):
            return f"the tls relay's pid now runs another command: {cmdline!r}"
        self._handle = handle.EngineHandle(process.attach(rec.pid, rec.start_ticks), self._clock, self._log)
        if rec.log_path:
            self._handle.follow_file(rec.log_path, LOG_POLL_S, 1024 * 1024, from_end=True)
        if tuple(rec.argv) != self.argv:
            await self.terminate(5.0, 5.0)
            return "the tls relay's settings changed (certificate files, port or interpreter)"
        if not await self.answers(timeout_s=5.0):
            await self.terminate(5.0, 5.0)
            return f"the tls relay (pid {rec.pid}) does not answer TLS on port {rec.port}"
        log.info("event=relay_adopted replica=%s pid=%d port=%d", self.replica_id, rec.pid, rec.port)
        return None

    async def terminate(self, grace_s: float, kill_wait_s: float) -> None:
        """SIGTERM, SIGKILL after ``grace_s``; stop watching."""
        if self._handle is None:
            return
        if await self._handle.terminate(grace_s, kill_wait_s):
            log.warning("event=relay_sigkill replica=%s pid=%d grace_s=%g", self.replica_id, self._handle.pid, grace_s)
        await self.release()

    async def release(self) -> None:
        """Stop watching without touching the process (detach, or after it exited)."""
        if self._handle is not None:
            await self._handle.release()

    def record(self) -> records.RelayRecord:
        proc = self._handle.proc if self._handle else None
        return records.RelayRecord(pid=proc.pid if proc else 0, start_ticks=(proc.start_ticks or 0) if proc else 0,
                                   host=self.host, port=self.port, argv=self.argv, cert_file=self.files.cert_file,
                                   key_file=self.files.key_file, reload_interval_s=self.files.reload_interval_s,
                                   log_path=self._log_path or "")


__all__ = ["RELAY_COMMAND", "Relay", "TlsFiles", "end_recorded", "is_loopback", "relay_argv"]
