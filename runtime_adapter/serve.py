"""``python -m runtime_adapter serve``: the runtime adapter inside a replica pod.

It builds SGLang's command line from the RuntimeSpec as the adapter does for local replicas, runs
the engine in the foreground and exits with it (the kubelet restarts the container, on the same
node and weights cache), and serves on the adapter port:

- ``GET /drain?deadline_s=N``: wait until the engine has no running or queued request (two idle
  readings in a row) or ``N`` seconds, then SIGTERM the engine (SGLang would otherwise keep
  accepting work and wait for it without limit) and SIGKILL it after ``stop_grace_s``. Answers with
  what happened; concurrent calls share one drain. The preStop hook calls it without ``deadline_s``
  (the default, or the deadline the agent already gave: the agent calls it with its drain
  directive's deadline, which replaces the running drain's).
- ``GET /healthz``: 200 while the engine runs, 503 otherwise (JSON: phase, engine pid, and once a
  drain is done what it did: outstanding at SIGTERM, deadline hit, SIGKILL needed, duration).
- ``GET /metrics``: the adapter's own gauges (start-up phase durations, draining).
- ``GET /engine/metrics``: the engine's ``/metrics`` relayed (the agent's load scrape, when the
  engine listens on loopback behind the TLS port).

With ``--tls-cert-file``/``--tls-key-file`` the engine binds 127.0.0.1 only and HTTPS on
``--tls-port`` relays to it (``runtime_adapter.tls_relay``; the certificate reloaded when its files
change): the replica's endpoint is then ``https://<host>:<tls port>``.

Each start-up phase is logged (``event=phase phase=... seconds=...``): config, spawn, load (the
port opens once weights are loaded), warmup (the first 200 of ``/health``), ready; then draining,
stopped. SIGTERM without a drain first drains with the default deadline; SIGTERM during a drain
(the kubelet's grace period is over) stops the engine at once; SIGINT stops at once.

Settings come from flags or, as a pod gives them, from the environment (``--help`` lists both)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import prometheus_client as prom
from aiohttp import web

from meridian import fleet
from meridian import tls as tls_files
from meridian import waits
from runtime_adapter import clock as clock_mod
from runtime_adapter import handle, launcher, probe, process, scraper, tls_relay

log = logging.getLogger("runtime_adapter.serve")

ENV = {"runtime_spec": "MERIDIAN_RUNTIME_SPEC", "host": "MERIDIAN_BIND_HOST", "port": "MERIDIAN_ENGINE_PORT",
       "adapter_port": "MERIDIAN_ADAPTER_PORT", "engine_command": "MERIDIAN_ENGINE_COMMAND",
       "cache_dir": "MERIDIAN_CACHE_DIR", "drain_deadline_s": "MERIDIAN_DRAIN_DEADLINE_S",
       "stop_grace_s": "MERIDIAN_STOP_GRACE_S", "replica_id": "MERIDIAN_REPLICA_ID",
       "api_key_file": "MERIDIAN_API_KEY_FILE", "tls_cert_file": "MERIDIAN_TLS_CERT_FILE",
       "tls_key_file": "MERIDIAN_TLS_KEY_FILE", "tls_port": "MERIDIAN_TLS_PORT",
       "tls_reload_interval_s": "MERIDIAN_TLS_RELOAD_INTERVAL_S"}
EXIT_CONFIG = 2


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it (flag and variable)."""


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    spec: fleet.RuntimeSpec
    replica_id: str = "replica"
    host: str = "0.0.0.0"
    port: int = 30000
    adapter_port: int = 30001
    engine_command: tuple[str, ...] = launcher.SGLANG_COMMAND
    cache_dir: str | None = None
    drain_deadline_s: float = 120.0
    stop_grace_s: float = 15.0
    probe_interval_s: float = 0.5
    health_timeout_s: float = 25.0
    api_key: str | None = dataclasses.field(default=None, repr=False)  # from --api-key-file; a secret
    # HTTPS beside the engine (runtime_adapter.tls_relay): with a certificate, the engine binds
    # loopback only and the relay on host:tls_port is the replica's endpoint.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_port: int = 30443
    tls_reload_interval_s: float = 5.0


def parse_runtime_spec(text: str) -> fleet.RuntimeSpec:
    """A RuntimeSpec from its JSON object (the fields of ``meridian.fleet.RuntimeSpec``)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--runtime-spec / {ENV['runtime_spec']} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--runtime-spec / {ENV['runtime_spec']} must be a JSON object")
    known = {f.name for f in dataclasses.fields(fleet.RuntimeSpec)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"--runtime-spec / {ENV['runtime_spec']}: unknown fields {unknown}; valid: {sorted(known)}")
    data["extra_args"] = tuple(data.get("extra_args", ()))
    try:
        return fleet.RuntimeSpec(**data)
    except TypeError as exc:
        raise ConfigError(f"--runtime-spec / {ENV['runtime_spec']}: {exc}") from None


def runtime_spec_json(spec: fleet.RuntimeSpec) -> str:
    """The JSON ``parse_runtime_spec`` reads (what the kubernetes backend puts in the pod's env)."""
    body = dataclasses.asdict(spec)
    body["env"] = dict(spec.env)
    body["extra_args"] = list(spec.extra_args)
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def resolve_engine_command(command: Sequence[str]) -> tuple[str, ...]:
    """A bare ``python``/``python3`` is this interpreter (the image's, where SGLang is installed)."""
    if not command:
        raise ConfigError(f"--engine-command / {ENV['engine_command']} is empty")
    first = sys.executable if command[0] in ("python", "python3") else command[0]
    return (first, *command[1:])


def add_arguments(parser: argparse.ArgumentParser, environ: Mapping[str, str] | None = None) -> None:
    env = os.environ if environ is None else environ

    def default(name: str, fallback: str | None) -> str | None:
        return env.get(ENV[name], fallback)

    parser.add_argument("--runtime-spec", default=default("runtime_spec", None), metavar="JSON",
                        help=f"the RuntimeSpec as JSON (env {ENV['runtime_spec']}; required)")
    parser.add_argument("--replica-id", default=default("replica_id", "replica"),
                        help=f"for logs (env {ENV['replica_id']})")
    parser.add_argument("--host", default=default("host", "0.0.0.0"),
                        help=f"address the engine and the adapter bind: the pod IP (env {ENV['host']}; default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=default("port", "30000"),
                        help=f"the engine's port (env {ENV['port']}; default 30000)")
    parser.add_argument("--adapter-port", type=int, default=default("adapter_port", "30001"),
                        help=f"the adapter's port for /drain, /healthz, /metrics (env {ENV['adapter_port']}; default 30001)")
    parser.add_argument("--engine-command", default=default("engine_command", None), metavar="JSON",
                        help=f"the engine command as a JSON list (env {ENV['engine_command']}; default "
                             "[\"python3\", \"-m\", \"sglang.launch_server\"]; a bare python is this interpreter)")
    parser.add_argument("--cache-dir", default=default("cache_dir", None),
                        help=f"the weights cache mount: --download-dir and HF_HOME (env {ENV['cache_dir']})")
    parser.add_argument("--drain-deadline-s", type=float, default=default("drain_deadline_s", "120"),
                        help=f"/drain's and SIGTERM's default wait for in-flight requests (env {ENV['drain_deadline_s']}; "
                             "default 120)")
    parser.add_argument("--stop-grace-s", type=float, default=default("stop_grace_s", "15"),
                        help=f"SIGTERM to SIGKILL of the engine (env {ENV['stop_grace_s']}; default 15)")
    parser.add_argument("--api-key-file", default=default("api_key_file", None), metavar="FILE",
                        help=f"a file holding the API key the engine requires (SGLang --api-key; a mounted Secret; "
                             f"env {ENV['api_key_file']}); the key reaches the engine in a private --config file")
    parser.add_argument("--tls-cert-file", default=default("tls_cert_file", None), metavar="FILE",
                        help=f"serve HTTPS on --tls-port with this PEM certificate chain, relayed to the engine, which "
                             f"then binds 127.0.0.1 only (env {ENV['tls_cert_file']}); reloaded when it changes")
    parser.add_argument("--tls-key-file", default=default("tls_key_file", None), metavar="FILE",
                        help=f"its unencrypted PEM key (env {ENV['tls_key_file']})")
    parser.add_argument("--tls-port", type=int, default=default("tls_port", "30443"),
                        help=f"the HTTPS port (env {ENV['tls_port']}; default 30443)")
    parser.add_argument("--tls-reload-interval-s", type=float, default=default("tls_reload_interval_s", "5"),
                        help=f"how often the certificate files are checked for a change "
                             f"(env {ENV['tls_reload_interval_s']}; default 5)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def check_tls(args: argparse.Namespace) -> None:
    """Both TLS files or neither; they load, the key is unencrypted and belongs to the certificate."""
    cert, key = args.tls_cert_file, args.tls_key_file
    if bool(cert) != bool(key):
        raise ConfigError(f"--tls-cert-file / {ENV['tls_cert_file']} and --tls-key-file / {ENV['tls_key_file']} go "
                          "together: give both or neither")
    if not cert:
        return
    try:
        tls_files.read_key_pair(cert, key, cert_setting=f"--tls-cert-file / {ENV['tls_cert_file']}",
                                key_setting=f"--tls-key-file / {ENV['tls_key_file']}")
    except tls_files.TlsFileError as exc:
        raise ConfigError(str(exc)) from None
    if args.tls_reload_interval_s <= 0:
        raise ConfigError("--tls-reload-interval-s must be > 0")


def read_api_key(path: str | None) -> str | None:
    """The key in ``path`` (surrounding whitespace stripped), None without a path."""
    if not path:
        return None
    try:
        with open(path) as f:
            key = f.read().strip()
    except OSError as exc:
        raise ConfigError(f"--api-key-file / {ENV['api_key_file']}: cannot read {path}: {exc.strerror or exc}") from None
    if not key:
        raise ConfigError(f"--api-key-file / {ENV['api_key_file']}: {path} is empty")
    return key


def config_from(args: argparse.Namespace) -> ServeConfig:
    if not args.runtime_spec:
        raise ConfigError(f"the runtime spec is missing: give --runtime-spec JSON or set {ENV['runtime_spec']}")
    spec = parse_runtime_spec(args.runtime_spec)
    command: Sequence[str] = launcher.SGLANG_COMMAND
    if args.engine_command:
        try:
            command = json.loads(args.engine_command)
        except ValueError as exc:
            raise ConfigError(f"--engine-command / {ENV['engine_command']} is not a JSON list: {exc}") from None
        if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
            raise ConfigError(f"--engine-command / {ENV['engine_command']} must be a JSON list of strings")
    for name in ("port", "adapter_port", "tls_port"):
        if not 1 <= getattr(args, name) <= 65535:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(args, name)} is out of range; valid: 1..65535")
    if args.port == args.adapter_port:
        raise ConfigError(f"--adapter-port must differ from --port ({args.port})")
    if args.tls_cert_file and args.tls_port in (args.port, args.adapter_port):
        raise ConfigError(f"--tls-port {args.tls_port} must differ from --port and --adapter-port")
    check_tls(args)
    if args.drain_deadline_s < 0 or args.stop_grace_s <= 0:
        raise ConfigError("--drain-deadline-s must be >= 0 and --stop-grace-s > 0")
    return ServeConfig(spec=spec, replica_id=args.replica_id, host=args.host, port=args.port,
                       adapter_port=args.adapter_port, engine_command=resolve_engine_command(command),
                       cache_dir=args.cache_dir or None, drain_deadline_s=args.drain_deadline_s,
                       stop_grace_s=args.stop_grace_s, api_key=read_api_key(args.api_key_file),
                       tls_cert_file=args.tls_cert_file or None, tls_key_file=args.tls_key_file or None,
                       tls_port=args.tls_port, tls_reload_interval_s=args.tls_reload_interval_s)


class PodAdapter:
    """One engine in the foreground, the adapter's HTTP side beside it. ``run()`` returns the exit
    code: the engine's own when it ended by itself (128+N for signal N), 0 after a drain or stop."""

    def __init__(self, config: ServeConfig, *, clock: clock_mod.Clock | None = None):
        self.config = config
        # The API key goes to the engine in a private --config file (never its command line or env),
        # in a directory of this process's own, removed at exit.
        self._secrets_dir = tempfile.mkdtemp(prefix="meridian-engine-") if config.api_key else None
        config_path = os.path.join(self._secrets_dir, "engine.yaml") if self._secrets_dir else None
        # With TLS the engine is reachable on loopback only: the relay is the replica's one open port.
        engine_host = "127.0.0.1" if config.tls_cert_file else config.host
        self.plan = launcher.build_command(config.spec, host=engine_host, port=config.port,
                                           engine_command=config.engine_command, cache_dir=config.cache_dir,
                                           api_key=config.api_key, config_path=config_path)
        self._clock = clock or clock_mod.SystemClock()
        self._probe_host = "127.0.0.1" if engine_host in ("0.0.0.0", "::", "") else engine_host
        self._base = f"http://{self._probe_host}:{config.port}"
        self.phase = "config"
        self._phase_t = self._clock.monotonic()
        self._engine: handle.EngineHandle | None = None
        self._session: aiohttp.ClientSession | None = None
        self._drain: asyncio.Task | None = None
        self._drain_deadline_s = config.drain_deadline_s
        self.drain_result: dict | None = None  # what the drain did, once done (also in /healthz)
        self._cut = asyncio.Event()  # SIGTERM during a drain: the kubelet's grace period is over
        self._stopping = False
        self.relay: tls_relay.TlsRelay | None = None
        self.registry = prom.CollectorRegistry()
        self._phase_seconds = prom.Gauge("meridian_replica_phase_seconds", "Seconds spent in each start-up phase.",
                                         ["phase"], registry=self.registry)
        self._draining = prom.Gauge("meridian_replica_draining", "1 once a drain began.", registry=self.registry)

    def _enter(self, phase: str, **fields: object) -> None:
        now = self._clock.monotonic()
        self._phase_seconds.labels(self.phase).set(now - self._phase_t)
        extra = "".join(f" {k}={v}" for k, v in fields.items())
        log.info("event=phase replica=%s phase=%s previous=%s seconds=%.2f%s", self.config.replica_id, phase,
                 self.phase, now - self._phase_t, extra)
        self.phase, self._phase_t = phase, now

    # ----- HTTP side
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/drain", self._get_drain)
        app.router.add_get("/healthz", self._get_healthz)
        app.router.add_get("/metrics", self._get_metrics)
        app.router.add_get("/engine/metrics", self._get_engine_metrics)
        return app

    async def _get_drain(self, request: web.Request) -> web.Response:
        raw = request.query.get("deadline_s")
        try:
            deadline_s = self.config.drain_deadline_s if raw is None else float(raw)
            if deadline_s < 0:
                raise ValueError
        except ValueError:
            return web.json_response({"error": f"deadline_s must be a number >= 0, got {raw!r}"}, status=400)
        result = await asyncio.shield(self.drain(deadline_s, explicit=raw is not None))
        return web.json_response(result)

    async def _get_healthz(self, request: web.Request) -> web.Response:
        running = self._engine is not None and not self._engine.exited
        body = {"phase": self.phase, "engine_pid": self._engine.pid if self._engine else None,
                "drain": self.drain_result}
        return web.json_response(body, status=200 if running else 503)

    async def _get_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=prom.generate_latest(self.registry), headers={"Content-Type": prom.CONTENT_TYPE_LATEST})

    async def _get_engine_metrics(self, request: web.Request) -> web.Response:
        """The engine's own /metrics (open in SGLang too), for the agent's load scraper when the
        engine listens on loopback behind the TLS port."""
        assert self._session is not None
        try:
            async with self._session.get(self._base + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as resp:
                return web.Response(body=await resp.read(), status=resp.status,
                                    content_type=resp.content_type, charset=resp.charset)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return web.json_response({"error": f"engine /metrics unreachable: {exc}"}, status=502)

    # ----- drain
    def drain(self, deadline_s: float, *, explicit: bool = True) -> asyncio.Task:
        """Start (or join) the one drain; the task's result describes it. An explicit deadline (the
        agent's, from its drain directive) replaces the running drain's; a call without one (the
        preStop hook) joins it as it is."""
        if self._drain is None:
            self._drain_deadline_s = deadline_s
            self._drain = asyncio.create_task(self._run_drain(), name="drain")
        elif explicit and deadline_s != self._drain_deadline_s:
            log.info("event=drain_deadline replica=%s deadline_s=%g previous_s=%g", self.config.replica_id, deadline_s,
                     self._drain_deadline_s)
            self._drain_deadline_s = deadline_s
        return self._drain

    async def _run_drain(self) -> dict:
        deadline_s = self._drain_deadline_s
        t0 = self._clock.monotonic()
        was_ready = self.phase == "ready"
        self._stopping = True
        self._draining.set(1)
        self._enter("draining", deadline_s=f"{deadline_s:g}")
        outstanding, deadline_hit = 0, False
        engine = self._engine
        if engine is not None and not engine.exited and was_ready:
            outstanding, deadline_hit = await self._wait_idle(t0)
        killed = await engine.terminate(self.config.stop_grace_s, 5.0) if engine is not None else False
        result = {"outstanding_at_term": outstanding, "deadline_hit": deadline_hit, "killed": killed,
                  "duration_s": round(self._clock.monotonic() - t0, 3)}
        self._enter("stopped", **{k: v for k, v in result.items() if k != "duration_s"})
        self.drain_result = result
        return result

    async def _wait_idle(self, t0: float) -> tuple[int, bool]:
        assert self._session is not None
        zeros, outstanding = 0, -1
        url = self._base + "/metrics"
        while True:
            try:
                async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    snap = scraper.parse(await resp.text())
                outstanding = int(snap.total(scraper.RUNNING) + snap.total(scraper.QUEUED))
            except (aiohttp.ClientError, asyncio.TimeoutError, scraper.ScrapeError) as exc:
                outstanding = -1
                log.warning("event=drain_scrape_failed replica=%s error=%r", self.config.replica_id, str(exc))
            # Two idle readings in a row: a request between accept and the scheduler is counted one poll later.
            zeros = zeros + 1 if outstanding == 0 else 0
            if zeros >= 2:
                return 0, False
            remaining = self._drain_deadline_s - (self._clock.monotonic() - t0)
            if remaining <= 0 or self._cut.is_set():
                return outstanding, True
            await waits.event_set(self._cut, min(self.config.probe_interval_s, remaining))  # cut, or the poll period

    # ----- the engine
    async def _start_up(self) -> None:
        engine = self._engine
        assert engine is not None and self._session is not None
        port_open = False
        while not engine.exited and not self._stopping:
            if not port_open and await probe.port_open(self._probe_host, self.config.port):
                port_open = True
                self._enter("warmup")
            if port_open:
                status, _ = await probe.http_status(self._session, self._base + "/health",
                                                    timeout_s=self.config.health_timeout_s)
                if status == 200 and not self._stopping:
                    self._enter("ready")
                    return
            await self._clock.sleep(self.config.probe_interval_s)

    async def run(self, stop: asyncio.Event | None = None) -> int:
        """Spawn, serve, wait for the engine to end; ``stop`` set means SIGTERM (drain, then exit)."""
        stop = stop or asyncio.Event()
        self._session = aiohttp.ClientSession()
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            self._enter("spawn", argv=" ".join(self.plan.redacted_argv()))
            for path, text in self.plan.secret_files.items():
                process.write_private_file(path, text)
            # The engine's output passes through the tail to the container's stdout, so a secret it
            # prints (SGLang logs its server arguments) is replaced by *** first.
            proc, stream = await process.spawn(self.plan.argv, self.plan.full_env(), survive_supervisor_exit=False,
                                               log_path=None)
            tail = process.LogTail(replica_id=self.config.replica_id, secrets=(self.config.api_key or "",),
                                   echo=sys.stdout)
            self._engine = handle.EngineHandle(proc, self._clock, tail)
            if stream is not None:
                self._engine.follow_stream(stream)
            # The adapter port opens once there is an engine to drain (preStop may come at any time after).
            await web.TCPSite(runner, self.config.host, self.config.adapter_port).start()
            if self.config.tls_cert_file and self.config.tls_key_file:
                tls = tls_files.ServerTls(self.config.tls_cert_file, self.config.tls_key_file,
                                          reload_interval_s=self.config.tls_reload_interval_s)
                self.relay = tls_relay.TlsRelay(self._base, tls, host=self.config.host, port=self.config.tls_port)
                await self.relay.start()
            self._enter("load", pid=proc.pid)
            starting = asyncio.create_task(self._start_up(), name="start-up")
            stopper = asyncio.create_task(stop.wait(), name="stop")
            waiters: set[asyncio.Future[Any]] = {self._engine.exit_task, stopper}
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            starting.cancel()
            if stopper.done() and not self._engine.exited:
                if self._drain is not None:
                    # SIGTERM while a drain waits: the kubelet's grace period ended; stop the engine now.
                    log.warning("event=drain_cut replica=%s: SIGTERM during the drain", self.config.replica_id)
                    self._cut.set()
                await self.drain(self.config.drain_deadline_s, explicit=False)
            stopper.cancel()
            code = await self._engine.exit_task
            if self._drain is not None:
                await self._drain
                # preStop returned: the kubelet's SIGTERM follows at once. Wait for it (a little), so
                # the container ends by our own exit 0, not by a signal arriving mid-shutdown.
                await waits.event_set(stop, self.config.stop_grace_s)
                return 0
            self._enter("stopped", exit_code=code)
            return code if code >= 0 else 128 - code
        finally:
            if self._engine is not None and not self._engine.exited:
                await self._engine.kill(5.0)
            if self._engine is not None:
                await self._engine.stop_following()
            if self.relay is not None:
                await self.relay.stop()
            await runner.cleanup()
            await self._session.close()
            if self._secrets_dir:
                shutil.rmtree(self._secrets_dir, ignore_errors=True)


async def serve(adapter: PodAdapter) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGINT, task.cancel)
    try:
        return await adapter.run(stop)
    except asyncio.CancelledError:
        log.warning("event=interrupted replica=%s", adapter.config.replica_id)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime_adapter serve",
                                     description="Run one replica's engine inside a pod: SGLang's flags from the "
                                                 "RuntimeSpec, /drain for the preStop hook, exit with the engine.")
    add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr, force=True,
                        format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")
    t0 = time.monotonic()
    try:
        adapter = PodAdapter(config_from(args))  # builds the command line: a bad spec fails before anything starts
    except (ConfigError, launcher.LaunchError) as exc:
        log.error("event=config_error error=%r", str(exc))
        print(f"runtime_adapter serve: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    log.info("event=config replica=%s seconds=%.2f", adapter.config.replica_id, time.monotonic() - t0)
    code = asyncio.run(serve(adapter))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the engine is gone: a late SIGTERM must not change the exit code
    return code
