"""Replica: supervise one engine process (SGLang or the emulator) for the agent.

Lifecycle: STARTING (prefetch, spawn, port closed while the model loads, then /health_generate
503 until warm) -> READY (scrape /metrics, probe health) -> on a crash: back to STARTING after an
exponential backoff, or FAILED after ``max_crashes`` consecutive crashes (the message quotes the
last log lines). ``drain``: DRAINING first (routers stop sending), wait until running + queued
requests reach zero or the deadline, then SIGTERM (SGLang would otherwise wait forever for
in-flight work while still accepting new requests), then SIGKILL after the grace period -> STOPPED.

With ``tls`` the engine binds loopback only and a TLS relay process (``relay_process``) on
``tls_host:tls_port`` is the endpoint (``https://``), spawned before the engine; READY needs both
(engine health on loopback, the relay's TLS handshake); a relay that exits or stops answering is
restarted alone (counted as a crash); drain and stop end it after the engine; adoption checks it
beside the engine and replaces a dead one: a TLS replica is never adopted as plaintext."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar

import aiohttp

from meridian import fleet
from meridian import waits
from runtime_adapter import clock as clock_mod
from runtime_adapter import config as config_mod
from runtime_adapter import handle, launcher, probe, process, records, relay_process, scraper, weights
from runtime_adapter import metrics as metrics_mod
from runtime_adapter.outcomes import AdoptError, DrainResult, ReplicaFailed, StartupPhases

log = logging.getLogger(__name__)
T = TypeVar("T")
_EXITED = object()


class _Stopped(Exception):
    """Internal: drain/stop/detach asked the supervision loop to end."""


class _RelayDown(str):
    """Internal: a crash reason that concerns the TLS relay only (the engine keeps running)."""


class Replica:
    """One supervised engine. Not thread-safe; use from one event loop."""

    def __init__(
        self,
        spec: fleet.RuntimeSpec,
        replica_id: str,
        *,
        port: int,
        host: str = "127.0.0.1",
        gpu_ids: Sequence[int] = (),
        engine_command: Sequence[str] | None = None,
        api_key: str | None = None,
        cache_dir: str | None = None,
        env: Mapping[str, str] | None = None,
        config: config_mod.SupervisorConfig | None = None,
        clock: clock_mod.Clock | None = None,
        session: aiohttp.ClientSession | None = None,
        state_dir: str | None = None,
        metrics: metrics_mod.AdapterMetrics | None = None,
        prefetcher: weights.Prefetcher | None = None,
        advertise_host: str | None = None,
        tls: relay_process.TlsFiles | None = None,
        tls_host: str = "0.0.0.0",
        tls_port: int = 0,
    ) -> None:
        self.spec = spec
        self.replica_id = replica_id
        self.host, self.port = host, port
        self.gpu_ids = tuple(gpu_ids)
        self.config = config or config_mod.SupervisorConfig()
        if self.config.survive_supervisor_exit and not state_dir:
            raise ValueError("config.survive_supervisor_exit needs state_dir (the engine's log and adoption record live there)")
        # The API key reaches the engine in a private --config file (never its command line): in
        # state_dir when there is one (the adoptable mode restarts read it again), else in a
        # private temporary directory of this replica.
        self._secrets_dir: str | None = None
        config_path = None
        if api_key:
            if state_dir:
                config_path = records.engine_config_path(state_dir, replica_id)
            else:
                self._secrets_dir = tempfile.mkdtemp(prefix=f"meridian-{replica_id}-")
                config_path = os.path.join(self._secrets_dir, "engine.yaml")
        self._plan_args = dict(host=host, port=port, gpu_ids=self.gpu_ids, engine_command=engine_command,
                               api_key=api_key, cache_dir=cache_dir, env=dict(env or {}), config_path=config_path)
        self.plan = launcher.build_command(spec, **self._plan_args)
        self._api_key = api_key
        self._clock = clock or clock_mod.SystemClock()
        self._session = session
        self._own_session = session is None
        self._state_dir = state_dir
        self._metrics = metrics or metrics_mod.AdapterMetrics()
        self._prefetcher = prefetcher
        self._probe_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        self.endpoint = f"http://{advertise_host or host}:{port}"
        self._probe_base = f"http://{self._probe_host}:{port}"
        self.tls = tls
        self._relay: relay_process.Relay | None = None
        if tls is not None:
            if not relay_process.is_loopback(host):
                raise ValueError(f"with tls the engine listens on loopback only: host must be 127.x, got {host!r}")
            if tls_port == port:
                raise ValueError(f"tls_port must differ from the engine's port ({port})")
            survive = self.config.survive_supervisor_exit
            self._relay = relay_process.Relay(
                tls, replica_id=replica_id, upstream=self._probe_base, host=tls_host, port=tls_port, clock=self._clock,
                survive_supervisor_exit=survive, log_lines=self.config.log_lines,
                log_path=records.relay_log_path(state_dir, replica_id) if survive and state_dir else None)
            public = "127.0.0.1" if tls_host in ("0.0.0.0", "::", "") else tls_host
            self.endpoint = f"https://{advertise_host or public}:{tls_port}"
        self._keep_time_to_ready = False  # a relay-only restart: the engine's time to ready stands
        self._state = fleet.ReplicaState.STARTING
        self._changed = asyncio.Event()
        self._stop_event = asyncio.Event()
        self._stop_waiter: asyncio.Future[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._engine: handle.EngineHandle | None = None
        self._log = process.LogTail(self.config.log_lines, replica_id=replica_id, secrets=(api_key or "",))
        self._scraper: scraper.Scraper | None = None
        self._load = fleet.ReplicaLoad()
        self._crashes = 0
        self._ready_since: float | None = None
        self._was_ready = False
        self._adopted: records.ReplicaRecord | None = None
        self.restarts = 0
        self.time_to_ready_s = 0.0
        self.started_at = 0.0
        self.message = ""
        self.last_crash = ""  # the latest crash's reason and log tail; kept after recovery
        self.phases = StartupPhases()

    # ----- public surface -------------------------------------------------------------------
    @property
    def state(self) -> fleet.ReplicaState:
        return self._state

    @property
    def pid(self) -> int | None:
        return self._engine.pid if self._engine else None

    @property
    def relay_pid(self) -> int | None:
        """The TLS relay's pid (None without tls, or before it is spawned)."""
        return self._relay.pid if self._relay else None

    def log_lines(self, n: int | None = None) -> list[str]:
        """The engine's last output lines (bounded)."""
        return self._log.lines(n)

    async def start(self) -> None:
        """Prefetch weights (when a prefetcher is set), spawn the engine and begin supervising.
        Returns once supervision runs; ``wait_ready`` waits for READY."""
        if self._task is not None:
            raise RuntimeError(f"replica {self.replica_id} was already started")
        if self._session is None:
            self._session = aiohttp.ClientSession()
        self._scraper = scraper.Scraper(self._session, self._probe_base, window_s=self.config.load_window_s,
                                        timeout_s=self.config.scrape_timeout_s, clock=self._clock)
        self._stop_waiter = asyncio.ensure_future(self._stop_event.wait())
        self._set_state(fleet.ReplicaState.STARTING)
        self._task = asyncio.create_task(self._supervise(), name=f"replica-{self.replica_id}")

    async def wait_ready(self, timeout_s: float) -> bool:
        """True once READY; raises ReplicaFailed when it ends FAILED/STOPPED/DRAINING first and
        TimeoutError (with the last log lines) after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            if self._state == fleet.ReplicaState.READY:
                return True
            if self._state in (fleet.ReplicaState.FAILED, fleet.ReplicaState.STOPPED, fleet.ReplicaState.DRAINING):
                raise ReplicaFailed(f"replica {self.replica_id} is {self._state.value}: {self.message}")
            event = self._changed
            remaining = deadline - loop.time()
            if not await waits.event_set(event, remaining):
                tail = "\n".join(self._log.lines(self.config.message_log_lines))
                raise TimeoutError(f"replica {self.replica_id} not ready after {timeout_s}s "
                                   f"(state {self._state.value}); last log lines:\n{tail}") from None

    def load(self) -> fleet.ReplicaLoad:
        """The latest scraped load (zeros before the first scrape)."""
        return self._load

    async def scrape_now(self) -> fleet.ReplicaLoad:
        """Scrape /metrics now (between the periodic scrapes); raises scraper.ScrapeError."""
        if self._scraper is None:
            raise RuntimeError(f"replica {self.replica_id} is not started")
        self._load = await self._scraper.scrape()
        return self._load

    def report(self, deployment: str, revision: str, pool_id: str = "", gpu_count: int = 0) -> fleet.ReplicaReport:
        return fleet.ReplicaReport(
            replica_id=self.replica_id, deployment=deployment, revision=revision, endpoint=self.endpoint,
            state=self._state, load=self._load, pool_id=pool_id, gpu_count=gpu_count or len(self.gpu_ids),
            time_to_ready_s=self.time_to_ready_s, restarts=self.restarts, message=self.message,
            served_model_name=self.spec.served_model_name, started_at=self.started_at)

    async def drain(self, deadline_s: float) -> DrainResult:
        """DRAINING, wait for running + queued == 0 (or ``deadline_s``), SIGTERM, SIGKILL -> STOPPED."""
        t0 = self._clock.monotonic()
        if self._state in (fleet.ReplicaState.STOPPED, fleet.ReplicaState.FAILED):
            return DrainResult(0, False, False, 0.0)
        self._set_state(fleet.ReplicaState.DRAINING)
        await self._halt()
        outstanding, deadline_hit = 0, False
        engine = self._engine
        if engine is not None and engine.proc.is_running() and self._was_ready:
            outstanding, deadline_hit = await self._wait_idle(t0, deadline_s)
        killed = await self._terminate()
        duration_s = self._clock.monotonic() - t0
        log.info("event=replica_drained replica=%s outstanding_at_term=%d deadline_hit=%s killed=%s duration_s=%.2f",
                 self.replica_id, outstanding, deadline_hit, killed, duration_s)
        await self._finish(fleet.ReplicaState.STOPPED)
        return DrainResult(outstanding, deadline_hit, killed, duration_s)

    async def stop(self) -> None:
        """Stop now: SIGTERM, SIGKILL after the grace period -> STOPPED (no waiting for requests)."""
        if self._state == fleet.ReplicaState.STOPPED and self._task is None:
            return
        await self._halt()
        await self._terminate()
        await self._finish(fleet.ReplicaState.STOPPED if self._state != fleet.ReplicaState.FAILED else self._state)

    async def detach(self) -> None:
        """Stop supervising but leave an adoptable engine running (agent shutdown in
        ``survive_supervisor_exit`` mode); its record stays in state_dir for ``adopt``."""
        if not self.config.survive_supervisor_exit:
            raise RuntimeError("detach needs config.survive_supervisor_exit; otherwise use stop() or drain()")
        await self._halt()
        await self._close(remove_record=False)
        log.info("event=replica_detached replica=%s pid=%s", self.replica_id, self.pid)

    @classmethod
    async def adopt(cls, record: records.ReplicaRecord, *, engine_command: Sequence[str] | None = None,
                    **kwargs: Any) -> Replica:
        """Re-attach to a still-running engine described by ``record`` (see ``records``).

        Checks the pid is alive and is the same process (start time, command line), else raises
        AdoptError; one whose port is still closed (loading) is adopted STARTING and awaited as a
        fresh launch is. Needs ``survive_supervisor_exit`` in the config."""
        config = kwargs.get("config") or config_mod.SupervisorConfig()
        if not config.survive_supervisor_exit:
            raise ValueError("adopt needs config.survive_supervisor_exit=True (an adopted engine is one that outlives its supervisor)")
        if engine_command is None:
            engine_command = record.argv[:record.argv.index("--model-path")] if "--model-path" in record.argv else None
        # The record says whether the replica serves TLS (a plaintext one is adopted as plaintext:
        # the caller compares ``tls`` with what it wants); the relay keeps its recorded address, and
        # takes the caller's files when it gives them (a changed path restarts the relay).
        tls, relay_rec = kwargs.pop("tls", None), record.relay
        if relay_rec is not None:
            files = tls or relay_process.TlsFiles(relay_rec.cert_file, relay_rec.key_file, relay_rec.reload_interval_s)
            kwargs.update(tls=files, tls_host=relay_rec.host, tls_port=relay_rec.port)
        replica = cls(record.spec, record.replica_id, host=record.host, port=record.port, gpu_ids=record.gpu_ids,
                      engine_command=engine_command, **kwargs)
        metrics = replica._metrics
        reason = _identity_mismatch(record)
        if reason is None and not await probe.port_open(replica._probe_host, record.port, timeout_s=2.0):
            log.warning("event=replica_adopted_starting replica=%s pid=%d port=%d; port closed (loading or hung): "
                        "awaited up to ready_timeout_s", record.replica_id, record.pid, record.port)
        if reason is not None:
            metrics.adoptions.labels(record.replica_id, "refused").inc()
            if relay_rec is not None:  # nothing may stay in front of an engine no one supervises
                await relay_process.end_recorded(relay_rec, replica._clock, grace_s=replica.config.term_grace_s)
            raise AdoptError(f"cannot adopt replica {record.replica_id} (pid {record.pid}): {reason}")
        replica._adopted = record
        replica._engine = handle.EngineHandle(process.attach(record.pid, record.start_ticks), replica._clock,
                                              replica._log)
        if record.log_path:
            replica._engine.follow_file(record.log_path, replica.config.probe_interval_s,
                                        replica.config.log_max_bytes, from_end=True)
        replica.restarts, replica.time_to_ready_s, replica.started_at = record.restarts, record.time_to_ready_s, record.started_at
        if relay_rec is not None and replica._relay is not None:
            why = await replica._relay.adopt(relay_rec)
            if why is not None:  # supervision spawns a fresh relay before the replica is READY
                metrics.adoptions.labels(record.replica_id, "relay_restarted").inc()
                log.warning("event=relay_not_adopted replica=%s relay_pid=%d reason=%r; starting a new relay",
                            record.replica_id, relay_rec.pid, why)
        metrics.adoptions.labels(record.replica_id, "adopted").inc()
        log.info("event=replica_adopted replica=%s pid=%d port=%d", record.replica_id, record.pid, record.port)
        await replica.start()
        return replica

    # ----- supervision loop -----------------------------------------------------------------
    async def _supervise(self) -> None:
        try:
            while True:
                reason = None
                if self._relay is not None and not self._relay.running:
                    reason = await self._spawn_relay()
                if reason is None and (self._engine is None or not self._engine.proc.is_running()):
                    reason = await self._launch()
                # else adopted, or a relay-only restart: the engine already runs
                if reason is None:
                    reason = await self._await_ready()
                if reason is None:
                    await self._on_ready()
                    reason = await self._watch()
                if not await self._on_crash(reason):
                    return
                await self._guard(self._clock.sleep(self.config.backoff_s(self._crashes)))
                self.restarts += 1
                self._metrics.restarts.labels(self.replica_id).inc()
        except _Stopped:
            return

    async def _launch(self) -> str | None:
        """Prefetch + spawn; a reason string when the launch itself failed."""
        self._was_ready = False
        plan = self.plan
        prefetch_s = 0.0
        if self._prefetcher is not None:
            t0 = self._clock.monotonic()
            try:
                fetched = await self._guard(self._prefetcher.prefetch(self.spec))
            except weights.PrefetchError as exc:
                return f"prefetch failed: {exc}"
            prefetch_s = self._clock.monotonic() - t0
            if fetched.env:
                plan = launcher.build_command(self.spec, **{**self._plan_args, "env": {**self._plan_args["env"], **fetched.env}})
        self.phases = StartupPhases(prefetch_s=prefetch_s)
        self._metrics.startup_phase.labels(self.replica_id, "prefetch").set(prefetch_s)
        log_path = records.log_path(self._state_dir, self.replica_id) if self.config.survive_supervisor_exit and self._state_dir else None
        try:
            for path, text in plan.secret_files.items():
                await asyncio.to_thread(process.write_private_file, path, text)
            proc, stream = await process.spawn(plan.argv, plan.full_env(),
                                               survive_supervisor_exit=self.config.survive_supervisor_exit,
                                               log_path=log_path)
        except OSError as exc:
            return f"could not start {plan.argv[0]!r}: {exc}"
        self._engine = handle.EngineHandle(proc, self._clock, self._log)
        self.started_at = self._clock.time()
        if stream is not None:
            self._engine.follow_stream(stream)
        elif log_path:
            self._engine.follow_file(log_path, self.config.probe_interval_s, self.config.log_max_bytes, from_end=False)
        await self._save_record()
        log.info("event=replica_spawned replica=%s pid=%d argv=%r", self.replica_id, proc.pid, plan.redacted_argv())
        return None

    async def _spawn_relay(self) -> str | None:
        assert self._relay is not None
        why = await self._relay.spawn()
        if why is not None:
            return _RelayDown(why)
        await self._save_record()  # a relay no record names would be nobody's after an agent restart
        return None

    async def _await_ready(self) -> str | None:
        cfg = self.config
        engine = self._engine
        assert engine is not None
        spawn_t = engine.started_monotonic
        # A relay-only restart waits for the relay, not for an engine that started long ago.
        deadline = (self._clock.monotonic() if self._keep_time_to_ready else spawn_t) + cfg.ready_timeout_s
        port_t: float | None = None
        last = ""
        while True:
            if engine.exited:
                return f"engine exited with code {engine.exit_code()} before ready ({last or 'port never opened'})"
            if self._clock.monotonic() > deadline:
                return f"not ready after {cfg.ready_timeout_s:g}s ({last or 'port never opened'})"
            if port_t is None and await self._guard(probe.port_open(self._probe_host, self.port)):
                port_t = self._clock.monotonic()
            if port_t is not None:
                status, last = await self._guard(probe.http_status(
                    self._session, self._probe_base + "/health_generate", timeout_s=cfg.health_timeout_s,
                    api_key=self._api_key))
                if status == 200:
                    now = self._clock.monotonic()
                    if not self._keep_time_to_ready:
                        self.phases = dataclasses.replace(self.phases, load_s=port_t - spawn_t, warmup_s=now - port_t)
                    if self._relay is not None:
                        why = await self._guard(self._relay.serving(cfg.relay_start_timeout_s, cfg.probe_interval_s))
                        if why is not None:
                            return _RelayDown(why)
                    return None
            await self._guard(self._clock.sleep(cfg.probe_interval_s), exit_task=engine.exit_task)

    async def _on_ready(self) -> None:
        now = self._clock.monotonic()
        keep, self._keep_time_to_ready = self._keep_time_to_ready, False
        if not keep and (self._adopted is None or self._was_ready or self.time_to_ready_s == 0.0):
            assert self._engine is not None
            self.time_to_ready_s = self.phases.prefetch_s + (now - self._engine.started_monotonic)
            self._metrics.time_to_ready.labels(self.replica_id).observe(self.time_to_ready_s)
            for phase in ("load", "warmup"):
                self._metrics.startup_phase.labels(self.replica_id, phase).set(getattr(self.phases, f"{phase}_s"))
        self._adopted = None
        self._ready_since = now
        self._was_ready = True
        self.message = ""
        self._set_state(fleet.ReplicaState.READY)
        await self._save_record()

    async def _watch(self) -> str:
        """While READY: scrape, probe health; returns the reason supervision must restart."""
        cfg = self.config
        engine = self._engine
        assert self._scraper is not None and engine is not None
        next_health = self._clock.monotonic() + cfg.health_interval_s
        failures = 0
        while True:
            if await self._guard(self._clock.sleep(cfg.scrape_interval_s), exit_task=engine.exit_task) is _EXITED:
                return f"engine exited with code {engine.exit_code()}"
            if self._relay is not None and not self._relay.running:
                return _RelayDown(f"tls relay exited with code {self._relay.exit_code()}")
            try:
                self._load = await self._guard(self._scraper.scrape())
            except scraper.ScrapeError as exc:
                self._metrics.scrape_errors.labels(self.replica_id).inc()
                log.warning("event=scrape_failed replica=%s error=%r", self.replica_id, str(exc))
            now = self._clock.monotonic()
            if self._crashes and self._ready_since is not None and now - self._ready_since >= cfg.stable_after_s:
                self._crashes = 0
            if now < next_health:
                continue
            if self._relay is not None and (why := await self._guard(self._relay.check(cfg))) is not None:
                return _RelayDown(why)
            status, why = await self._guard(probe.http_status(
                self._session, self._probe_base + "/health_generate", timeout_s=cfg.health_timeout_s, api_key=self._api_key))
            next_health = self._clock.monotonic() + cfg.health_interval_s
            if status == 200:
                failures = 0
                continue
            if engine.exited:
                return f"engine exited with code {engine.exit_code()}"
            failures += 1
            self._metrics.health_failures.labels(self.replica_id).inc()
            log.warning("event=health_failed replica=%s failures=%d detail=%r", self.replica_id, failures, why)
            if failures >= cfg.unhealthy_threshold:
                return f"unhealthy: {failures} consecutive failed health probes ({why})"

    async def _on_crash(self, reason: str) -> bool:
        """Record a crash; True when supervision should restart, False when it gave up. A relay-only
        crash (``_RelayDown``) restarts the relay alone: the engine stays up and warm."""
        self._crashes += 1
        relay_only = isinstance(reason, _RelayDown)
        if relay_only and self._relay is not None:
            await self._relay.terminate(0.0, self.config.kill_wait_s)  # gone already, or hung
            tail = self._relay.log_lines(self.config.message_log_lines)
            kind, self._keep_time_to_ready = "relay", self._was_ready
        else:
            if self._engine is not None:
                await self._engine.kill(self.config.kill_wait_s)
                await self._engine.stop_following()
            tail = self._log.lines(self.config.message_log_lines)
            kind = "exit" if "exited" in reason else "unhealthy" if "unhealthy" in reason else "start"
            self._load = fleet.ReplicaLoad()
            if self._scraper is not None:
                self._scraper.window.clear()
        self._metrics.crashes.labels(self.replica_id, kind).inc()
        self.message = self.last_crash = f"{reason}; last log lines:\n" + "\n".join(tail)
        log.warning("event=replica_crashed replica=%s crashes=%d kind=%s reason=%r", self.replica_id, self._crashes,
                    kind, reason)
        if self._crashes >= self.config.max_crashes:
            self.message = f"gave up after {self._crashes} consecutive crashes: {self.message}"
            log.error("event=replica_failed replica=%s crashes=%d", self.replica_id, self._crashes)
            if self._engine is not None:
                await self._engine.kill(self.config.kill_wait_s)
            if self._relay is not None:
                await self._relay.terminate(0.0, self.config.kill_wait_s)
            await self._close(remove_record=True)
            self._set_state(fleet.ReplicaState.FAILED)
            return False
        self._set_state(fleet.ReplicaState.STARTING)
        return True

    # ----- termination ----------------------------------------------------------------------
    async def _wait_idle(self, t0: float, deadline_s: float) -> tuple[int, bool]:
        assert self._scraper is not None
        zeros, outstanding = 0, -1
        while True:
            try:
                self._load = await self._scraper.scrape()
                outstanding = self._load.outstanding
            except scraper.ScrapeError as exc:
                outstanding = -1
                self._metrics.scrape_errors.labels(self.replica_id).inc()
                log.warning("event=drain_scrape_failed replica=%s error=%r", self.replica_id, str(exc))
            # Two idle readings in a row: a request between HTTP accept and the scheduler is not
            # counted yet by the engine, one poll later it is.
            zeros = zeros + 1 if outstanding == 0 else 0
            if zeros >= 2:
                return 0, False
            remaining = deadline_s - (self._clock.monotonic() - t0)
            if remaining <= 0:
                return outstanding, True
            await self._clock.sleep(min(self.config.drain_poll_interval_s, remaining))

    async def _terminate(self) -> bool:
        """SIGTERM the engine's group, SIGKILL after ``term_grace_s``, then the relay's the same way
        (after the engine: a request in flight keeps its way back until the engine is gone); True
        when the engine needed SIGKILL."""
        killed = False
        if self._engine is not None:
            killed = await self._engine.terminate(self.config.term_grace_s, self.config.kill_wait_s)
            if killed:
                self._metrics.kills.labels(self.replica_id).inc()
                log.warning("event=sigkill replica=%s pid=%d grace_s=%g", self.replica_id, self._engine.pid,
                            self.config.term_grace_s)
        if self._relay is not None:
            await self._relay.terminate(self.config.term_grace_s, self.config.kill_wait_s)
        return killed

    # ----- plumbing -------------------------------------------------------------------------
    async def _guard(self, aw: Awaitable[T], *, exit_task: asyncio.Future[Any] | None = None) -> Any:
        """Await ``aw`` unless stop is requested first (raises _Stopped) or ``exit_task`` ends first
        (returns _EXITED)."""
        task = asyncio.ensure_future(aw)
        waiters: set[asyncio.Future[Any]] = {task}
        if self._stop_waiter is not None:
            waiters.add(self._stop_waiter)
        if exit_task is not None:
            waiters.add(exit_task)
        done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self._stop_waiter is not None and self._stop_waiter in done:
            raise _Stopped
        return _EXITED

    async def _halt(self) -> None:
        """End the supervision loop (no restart after this); the engine keeps running."""
        self._stop_event.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _finish(self, state: fleet.ReplicaState) -> None:
        await self._close(remove_record=True)
        self._set_state(state)

    async def _close(self, *, remove_record: bool) -> None:
        if self._engine is not None:
            await self._engine.release()
        if self._relay is not None:
            await self._relay.release()
        if self._stop_waiter is not None:
            self._stop_waiter.cancel()
        if remove_record and self._state_dir:
            records.remove(self._state_dir, self.replica_id)
        if remove_record:  # the engine is gone: so goes the file that handed it its key
            for path in self.plan.secret_files:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            if self._secrets_dir is not None:
                shutil.rmtree(self._secrets_dir, ignore_errors=True)
        if self._own_session and self._session is not None and not self._session.closed:
            await self._session.close()
        self._task = None

    def _set_state(self, state: fleet.ReplicaState) -> None:
        if state != self._state:
            log.info("event=replica_state replica=%s from=%s to=%s", self.replica_id, self._state.value, state.value)
        self._state = state
        self._metrics.set_state(self.replica_id, state)
        self._changed.set()
        self._changed = asyncio.Event()

    async def _save_record(self) -> None:
        """Write the adoption record (atomic, fsync'd) off the event loop: a slow disk must not stall
        the supervision of every other replica."""
        if not (self.config.survive_supervisor_exit and self._state_dir and self._engine is not None):
            return
        proc = self._engine.proc
        await asyncio.to_thread(records.save, self._state_dir, records.ReplicaRecord(
            replica_id=self.replica_id, pid=proc.pid, start_ticks=proc.start_ticks or 0,
            host=self.host, port=self.port, spec=self.spec, gpu_ids=self.gpu_ids,
            argv=self.plan.redacted_argv(), started_at=self.started_at,
            log_path=records.log_path(self._state_dir, self.replica_id), time_to_ready_s=self.time_to_ready_s,
            restarts=self.restarts, relay=self._relay.record() if self._relay is not None else None))


def _identity_mismatch(record: records.ReplicaRecord) -> str | None:
    """Why the process at record.pid is not the recorded engine, or None when it is."""
    if not process.pid_alive(record.pid):
        return "the process is gone"
    if process.proc_start_ticks(record.pid) != record.start_ticks:
        return "the pid now belongs to another process (start time differs)"
    cmdline = process.proc_cmdline(record.pid)
    if cmdline is None or launcher.redact(cmdline) != tuple(record.argv):
        return f"the command line differs: {cmdline!r}"
    return None
