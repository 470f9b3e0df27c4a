"""The emulator's HTTP server: SGLang's status endpoints, auth, start-up phases, graceful exit,
and the fault-injection admin endpoint. Generation endpoints live in ``handlers``.

Start-up follows SGLang: the port stays closed while the "weights load" (``startup_delay_s``),
then the server listens with status Starting (/health, /health_generate and /ready answer 503)
while a warm-up generate runs, then Up ("The server is fired up and ready to roll!"). SIGTERM sets
graceful exit: health and ready answer 503, requests are still accepted, and the process exits
once nothing is in flight (SGLang waits without a limit; the supervisor escalates to SIGKILL)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import signal
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pydantic
from aiohttp import web

from meridian import capacity
from runtime_adapter import clock as clock_mod
from runtime_adapter.emulator import config as config_mod
from runtime_adapter.emulator import engine as engine_mod
from runtime_adapter.emulator import handlers, protocol
from runtime_adapter.emulator import metrics as metrics_mod

log = logging.getLogger("runtime_adapter.emulator")

# Weights stream from local disk at about this rate, plus a fixed init (CUDA context, KV alloc).
LOAD_BYTES_PER_S = 2.0 * 1024**3
LOAD_FIXED_S = 3.0
OPEN_PATH_PREFIXES = ("/health", "/ready", "/metrics")
FATAL_EXIT_CODE = 134
# Handlers still open at shutdown get this long to finish (their requests are aborted first).
SHUTDOWN_TIMEOUT_S = 5.0
# --enable-ssl-refresh: how often the certificate files are checked (SGLang watches them with inotify).
SSL_REFRESH_INTERVAL_S = 1.0


class ConfigError(ValueError):
    """The emulator cannot serve this configuration (e.g. the model does not fit the GPUs)."""


class StartupFailed(RuntimeError):
    """The emulated model load failed (fault ``fail_startup``)."""


class EmulatorServer:
    """One emulated SGLang server. ``clock`` drives the engine and timing; ``rng`` the error-rate
    fault; ``exit_process`` is what a crash fault calls (``os._exit`` in a real process)."""

    def __init__(self, config: config_mod.EmulatorConfig, *, clock: clock_mod.Clock | None = None,
                 rng: random.Random | None = None, exit_process: Callable[[int], None] = os._exit) -> None:
        self.config = config
        self.clock = clock or clock_mod.SystemClock()
        self.rng = rng or random.Random()
        self.exit_process = exit_process
        try:
            self.perf = capacity.replica_perf(config.architecture, config.gpu_type, config.tp_size,
                                              config.quantization or None, config.mem_fraction_static)
        except capacity.DoesNotFit as exc:
            raise ConfigError(f"--model-path {config.model_path} with --tp-size {config.tp_size} on "
                              f"{config.gpu_type}: {exc}") from exc
        self.context_len = config.effective_context_length
        self.max_running_requests = config.max_running_requests or engine_mod.default_max_running_requests(
            self.perf, self.context_len)
        self.faults = config.faults
        self.engine = engine_mod.Engine(
            self.perf, max_running_requests=self.max_running_requests,
            max_queued_requests=config.max_queued_requests, chunked_prefill_size=config.chunked_prefill_size,
            enable_prefix_cache=not config.disable_radix_cache, speedup=config.speedup,
            slowdown=lambda: self.faults.slowdown_factor, hang=lambda: self.faults.hang, clock=self.clock)
        self.metrics = metrics_mod.EmulatorMetrics(self.engine, config.model_name, self.context_len)
        self.engine.observer = self.metrics
        self.status = "Starting"
        self.gracefully_exit = False
        self.generation_requests = 0
        self.in_flight = 0
        self.startup_time = time.time()
        self.url = ""
        self.port = config.port
        self._runner: web.AppRunner | None = None
        self._engine_task: asyncio.Task[None] | None = None
        self._ssl_task: asyncio.Task[None] | None = None
        # request_log_dir: one line (the X-Request-Id) per answered generation request, written
        # as it happens (line-buffered) so a killed replica's record survives it.
        self.request_log = None
        self.ssl_context: ssl.SSLContext | None = None
        self.idle = asyncio.Event()

    @property
    def load_delay_s(self) -> float:
        """Model seconds the weights take to load (``startup_delay_s`` or from the weights size)."""
        if self.config.startup_delay_s is not None:
            return self.config.startup_delay_s
        return LOAD_FIXED_S + self.perf.weights_gib * 1024**3 / self.config.tp_size / LOAD_BYTES_PER_S

    def real_s(self, model_s: float) -> float:
        return model_s / self.config.speedup

    # ----- lifecycle ------------------------------------------------------------------------------
    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth_middleware], client_max_size=64 * 1024**2)
        r = app.router
        r.add_get("/health", self.health_generate)
        r.add_get("/health_generate", self.health_generate)
        r.add_get("/ready", self.ready)
        r.add_get("/model_info", self.model_info)
        r.add_get("/get_model_info", self.model_info)
        r.add_get("/server_info", self.server_info)
        r.add_get("/get_server_info", self.server_info)
        r.add_get("/v1/models", self.models)
        r.add_get("/v1/models/{model:.*}", self.model)
        r.add_get("/v1/loads", self.loads)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_route("POST", "/flush_cache", self.flush_cache)
        if self.config.enable_metrics:
            r.add_get("/metrics", self.metrics_endpoint)
        gen = handlers.Handlers(self)
        for method in ("POST", "PUT"):
            r.add_route(method, "/generate", gen.generate)
        r.add_post("/v1/chat/completions", gen.chat)
        r.add_post("/v1/completions", gen.completions)
        r.add_post("/v1/embeddings", gen.embeddings)
        r.add_get("/_emulator/faults", self.get_faults)
        r.add_post("/_emulator/faults", self.set_faults)
        return app

    async def start(self) -> None:
        """Load (port closed), listen, warm up, Up. Raises StartupFailed for the fault."""
        cfg = self.config
        log.info("Load weight begin. avail mem=%.2f GB (emulated %s x%d, %s)", self.perf.weights_gib, cfg.gpu_type,
                 cfg.tp_size, cfg.model_path)
        if self.faults.fail_startup:
            log.error("RuntimeError: CUDA error: out of memory (emulated fault fail_startup)")
            raise StartupFailed("emulated fault fail_startup: model load failed")
        t0 = time.monotonic()
        await self.clock.sleep(self.real_s(self.load_delay_s))
        load_s = time.monotonic() - t0
        self.metrics.set_startup_phase("load_weight", load_s)
        log.info("Load weight end. type=%s, mem usage=%.2f GB. KV cache: max_total_num_tokens=%d, "
                 "max_running_requests=%d, context_len=%d", cfg.model_path, self.perf.weights_gib,
                 self.perf.kv_budget_tokens, self.max_running_requests, self.context_len)
        self._engine_task = asyncio.create_task(self.engine.run(), name="emulator-engine")
        if cfg.request_log_dir:
            os.makedirs(cfg.request_log_dir, exist_ok=True)
            self.request_log = open(os.path.join(cfg.request_log_dir, f"replica-{os.getpid()}-{id(self):x}.log"),
                                    "a", buffering=1)
        # Handler cancellation: a client that closes its connection aborts its request, as in SGLang.
        self._runner = web.AppRunner(self.build_app(), access_log=None, handle_signals=False,
                                      shutdown_timeout=SHUTDOWN_TIMEOUT_S, handler_cancellation=True)
        await self._runner.setup()
        if cfg.ssl_certfile:
            self.ssl_context = self._ssl_context()
            log.info("SSL enabled: certfile=%s, keyfile=%s", cfg.ssl_certfile, cfg.ssl_keyfile)
            if cfg.enable_ssl_refresh:
                self._ssl_task = asyncio.create_task(self._refresh_ssl(), name="emulator-ssl-refresh")
                log.info("SSL certificate auto-refresh enabled.")
        site = web.TCPSite(self._runner, cfg.host, cfg.port, reuse_address=True, ssl_context=self.ssl_context)
        await site.start()
        server = site._server
        if server is not None and getattr(server, "sockets", None):
            self.port = server.sockets[0].getsockname()[1]
        host = "127.0.0.1" if cfg.host in ("0.0.0.0", "") else cfg.host
        scheme = "https" if self.ssl_context is not None else "http"
        self.url = f"{scheme}://{host}:{self.port}"
        log.info("Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", scheme, cfg.host, self.port)
        t1 = time.monotonic()
        if not cfg.skip_server_warmup:
            await self._warmup()
        self.metrics.set_startup_phase("tokenizer_e2e", time.monotonic() - t1)
        self.status = "Up"
        log.info("The server is fired up and ready to roll!")

    def _ssl_context(self) -> ssl.SSLContext:
        """As uvicorn builds it for SGLang: the server pair, the CA bundle loaded, no client certificate
        required."""
        cfg = self.config
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cfg.ssl_certfile, cfg.ssl_keyfile)
        if cfg.ssl_ca_certs:
            ctx.load_verify_locations(cfg.ssl_ca_certs)
        return ctx

    async def _refresh_ssl(self) -> None:
        """--enable-ssl-refresh: reload the pair in place when the files change (new connections get it)."""
        cfg = self.config

        def signature() -> tuple:
            return tuple((st.st_ino, st.st_size, st.st_mtime_ns)
                         for st in (os.stat(p) for p in (cfg.ssl_certfile, cfg.ssl_keyfile) if p))

        last = signature()
        while True:
            await asyncio.sleep(SSL_REFRESH_INTERVAL_S)
            try:
                now = signature()
                if now == last or self.ssl_context is None:
                    continue
                self.ssl_context.load_cert_chain(cfg.ssl_certfile, cfg.ssl_keyfile)
            except (OSError, ssl.SSLError) as exc:
                log.warning("SSL certificate refresh failed (will retry): %r", exc)
                continue
            last = now
            log.info("SSL certificate and key reloaded.")

    async def _warmup(self) -> None:
        req = engine_mod.GenRequest(rid="warmup", prompt=["The", " capital", " city", " of", " France", " is"],
                                    max_new_tokens=8, stop_after=8, finish_type="length", seed=0, log_metrics=False)
        self.engine.submit(req)
        await self.clock.sleep(self.real_s(self.config.warmup_s))
        while not req.finished:
            await req.progress.wait()
            req.progress.clear()

    async def close(self) -> None:
        if self._ssl_task is not None:
            self._ssl_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ssl_task
        self.engine.close()
        if self._engine_task is not None:
            self._engine_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._engine_task
        if self._runner is not None:
            await self._runner.cleanup()
        if self.request_log is not None:
            self.request_log.close()
            self.request_log = None

    def begin_graceful_exit(self) -> None:
        """SIGTERM: stop answering health/ready 200, keep serving, exit when idle."""
        if not self.gracefully_exit:
            log.info("Received sigterm. Gracefully exit: waiting for %d in-flight requests.", self.outstanding)
        self.gracefully_exit = True
        self.check_idle()

    @property
    def outstanding(self) -> int:
        return max(self.engine.outstanding, self.in_flight)

    def check_idle(self) -> None:
        if self.gracefully_exit and self.outstanding == 0:
            self.idle.set()

    # ----- faults ---------------------------------------------------------------------------------
    def count_generation_request(self) -> None:
        """Called once per client generation request: the crash-after-N fault fires here."""
        self.generation_requests += 1
        n = self.faults.crash_after_requests
        if n and self.generation_requests >= n:
            log.error("Emulated fault: crashing on request %d (crash_after_requests=%d)", self.generation_requests, n)
            for handler in logging.getLogger().handlers:
                handler.flush()
            self.exit_process(FATAL_EXIT_CODE)

    def injected_error(self) -> bool:
        return self.faults.error_rate > 0 and self.rng.random() < self.faults.error_rate

    async def get_faults(self, request: web.Request) -> web.Response:
        return protocol.json_response(self.faults.model_dump())

    async def set_faults(self, request: web.Request) -> web.Response:
        """Merge the posted fields into the current faults (400 naming the field when invalid)."""
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object of fault fields")
            self.faults = config_mod.FaultConfig(**{**self.faults.model_dump(), **body})
        except pydantic.ValidationError as exc:
            return protocol.json_response({"error": protocol.validation_message(exc)}, status=400)
        except ValueError as exc:
            return protocol.json_response({"error": str(exc)}, status=400)
        log.warning("event=faults_changed faults=%s", self.faults.model_dump())
        return protocol.json_response(self.faults.model_dump())

    # ----- status endpoints -----------------------------------------------------------------------
    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        key = self.config.api_key
        if key and not request.path.startswith(OPEN_PATH_PREFIXES) and request.method != "OPTIONS":
            parts = request.headers.get("Authorization", "").split(" ", 1)
            if len(parts) != 2 or parts[0].lower() != "bearer" or not secrets.compare_digest(parts[1], key):
                return protocol.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def health_generate(self, request: web.Request) -> web.Response:
        """503 while starting or exiting; otherwise a 1-token generate: 200 once the engine shows
        output (SGLang polls every 1 s), 503 after ``health_timeout_s``."""
        if self.gracefully_exit or self.status == "Starting":
            return web.Response(status=503)
        tic = self.clock.monotonic()
        req = engine_mod.GenRequest(rid=f"HEALTH_CHECK_{uuid.uuid4().hex}", prompt=[0], max_new_tokens=1,
                                    stop_after=1, finish_type="length", seed=0, log_metrics=False)
        with contextlib.suppress(engine_mod.QueueFull):
            self.engine.submit(req)
        deadline = tic + self.real_s(self.config.health_timeout_s)
        try:
            while self.clock.monotonic() < deadline:
                await self.clock.sleep(min(self.real_s(1.0), max(0.0, deadline - self.clock.monotonic())))
                if self.engine.last_output_s > tic or req.finished:
                    self.status = "Up"
                    return web.Response(status=200)
        finally:
            self.engine.abort(req, "health check done")
        log.error("Health check failed. Server couldn't get a response from detokenizer for last %g seconds.",
                  self.config.health_timeout_s)
        self.status = "UnHealthy"
        return web.Response(status=503)

    async def ready(self, request: web.Request) -> web.Response:
        up = self.status == "Up" and not self.gracefully_exit
        return web.Response(status=200 if up else 503)

    async def model_info(self, request: web.Request) -> web.Response:
        arch = self.config.architecture
        return protocol.json_response({
            "model_path": self.config.model_path, "served_model_name": self.config.model_name,
            "tokenizer_path": self.config.model_path, "is_generation": not self.config.embedding,
            "preferred_sampling_params": None, "weight_version": protocol.WEIGHT_VERSION, "load_format": "auto",
            "reasoning_parser": None, "tool_call_parser": None, "disaggregation_mode": "null",
            "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": "emulated", "architectures": ["EmulatedForCausalLM" if not arch.is_embedding else "EmulatedModel"],
        })

    async def server_info(self, request: web.Request) -> web.Response:
        cfg = self.config.model_dump(exclude={"faults"})
        cfg["served_model_name"] = self.config.model_name
        cfg["context_length"] = self.context_len
        cfg["max_running_requests"] = self.max_running_requests
        cfg["api_key"] = None if self.config.api_key is None else "<redacted>"
        s = self.engine.stats()
        return protocol.json_response({
            **cfg,
            "max_total_num_tokens": self.perf.kv_budget_tokens,
            "startup_time": self.startup_time,
            "internal_states": [{"last_gen_throughput": s.gen_throughput, "memory_usage": {
                "weight": self.perf.weights_gib, "kvcache": self.perf.kv_budget_tokens * self.perf.kv_bytes_per_token / 1024**3},
                "effective_max_running_requests_per_dp": self.max_running_requests}],
            "version": protocol.VERSION,
            "frontend": "python",
            "emulator": {"gpu_type": self.config.gpu_type, "speedup": self.config.speedup,
                         "prefill_tokens_per_s": self.perf.prefill_tokens_per_s,
                         "faults": self.faults.model_dump()},
        })

    async def models(self, request: web.Request) -> web.Response:
        card = protocol.model_card(self.config.model_name, int(self.startup_time), self.context_len)
        return protocol.json_response({"object": "list", "data": [card]})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.config.model_name:
            return protocol.json_response({"error": {"message": f"The model '{name}' does not exist",
                                                "type": "invalid_request_error", "param": "model",
                                                "code": "model_not_found"}}, status=404)
        return protocol.json_response(protocol.model_card(name, int(self.startup_time), self.context_len))

    async def loads(self, request: web.Request) -> web.Response:
        s = self.engine.stats()
        load = {
            "timestamp": time.time(), "dp_rank": 0, "num_running_reqs": s.running, "num_waiting_reqs": s.waiting,
            "num_waiting_uncached_tokens": s.waiting_uncached_tokens, "num_used_tokens": s.kv_used_tokens,
            "num_total_tokens": s.kv_budget_tokens, "num_active_tokens": s.kv_used_tokens,
            "num_prealloc_ready_tokens": 0, "max_total_num_tokens": s.kv_budget_tokens,
            "max_running_requests": s.max_running_requests, "token_usage": s.kv_used_tokens / max(1, s.kv_budget_tokens),
            "gen_throughput": s.gen_throughput, "cache_hit_rate": s.cache_hit_rate,
            "utilization": s.running / max(1, s.max_running_requests),
            "total_prefill_uncached_tokens": 0, "total_prefill_busy_us": 0, "decode_moments": None,
        }
        return protocol.json_response({
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), "version": protocol.VERSION,
            "accelerator": f"NVIDIA {self.config.gpu_type} (emulated)", "num_accelerators": self.config.tp_size,
            "loads": [load],
        })

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.engine.outstanding:
            return web.Response(status=400, text="Cache not flushed. Please check backend logs for more details. "
                                                 "(When there are running or waiting requests, the operation will not be performed.)\n")
        self.engine.flush_cache()
        return web.Response(text="Cache flushed.\nPlease check backend logs for more details. (When there are running "
                                 "or waiting requests, the operation will not be performed.)\n")

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


@contextlib.asynccontextmanager
async def serve(config: config_mod.EmulatorConfig, **kwargs: Any) -> AsyncIterator[EmulatorServer]:
    """Run an emulator in this process (tests): started and Up inside the block, closed after.
    ``config.port`` 0 picks a free port; read ``server.url``."""
    server = EmulatorServer(config, **kwargs)
    try:
        await server.start()
        yield server
    finally:
        await server.close()


async def run_process(config: config_mod.EmulatorConfig) -> int:
    """The emulator as its own process: SIGTERM -> graceful exit, SIGINT -> stop now."""
    loop = asyncio.get_running_loop()
    server = EmulatorServer(config)
    stop_now = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, server.begin_graceful_exit)
    loop.add_signal_handler(signal.SIGINT, stop_now.set)
    try:
        await server.start()
    except StartupFailed:
        await server.close()
        return 1
    waiters = [asyncio.ensure_future(server.idle.wait()), asyncio.ensure_future(stop_now.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for w in waiters:
        w.cancel()
    log.info("Gracefully exiting: no request in flight." if server.idle.is_set() else "Interrupted: exiting now.")
    await server.close()
    return 0
