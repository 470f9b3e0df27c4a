"""Wiring: one router instance (its listener, its endpoints, its background tasks).

``Router`` owns everything one instance needs (routing state, the hot-path proxy, health checks,
the route watcher, the traffic reporter, metrics, the ClientSession, the Redis client) and their
lifecycle: ``start`` serves on the configured address, ``stop`` cancels background work and closes
connections. Several instances can run in one process (tests do): each has its own registry."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import urllib.parse

import aiohttp
import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from meridian import redisconn, retrybudget
from router import auth, config as config_mod, cors, errors, health, listener, metrics, ratelimit, routes_file
from router import store, table, tls, traffic, upstream, validation, watch
from router.listener import Request
from router.proxy import Proxy
from router.responses import Response, StreamResponse

log = logging.getLogger("meridian.router")


class Router:
    def __init__(self, cfg: config_mod.RouterConfig, *, rng: random.Random | None = None,
                 metrics_registry=None):
        self.config = cfg
        self.rng = rng or random.Random()
        self.metrics = metrics.RouterMetrics(metrics_registry)
        self.latency_map = cfg.latency_map()
        self.router_id = cfg.effective_router_id
        # What https:// replicas are checked against (the system trust store without a CA file).
        self.upstream_tls = tls.ClientTls(cfg.upstream_tls_ca_file, cfg.upstream_tls_cert_file,
                                          cfg.upstream_tls_key_file, reload_interval_s=cfg.tls_reload_interval_s,
                                          on_error=self._count_error)
        self.server_tls = (tls.ServerTls(cfg.tls_cert_file, cfg.tls_key_file, reload_interval_s=cfg.tls_reload_interval_s,
                                         on_error=self._count_error) if cfg.tls_cert_file else None)
        self.state = table.RoutingState(
            default_policy=cfg.policy, policy_args=cfg.policy_args, latency_map=self.latency_map,
            unknown_rtt_ms=cfg.unknown_rtt_ms, ewma_decay_s=cfg.ewma_decay_s, default_cost_ms=cfg.default_cost_ms,
            make_pool=self._make_pool, max_in_flight_per_replica=cfg.max_in_flight_per_replica,
            queue_size_per_model=cfg.queue_size_per_model, queue_timeout_s=cfg.queue_timeout_s, rng=self.rng,
            per_try=cfg.retry.per_try())
        self.metrics.state_fn = lambda: self.state
        self.traffic = traffic.TrafficAccumulator()
        self.budget = retrybudget.RetryBudget(cfg.retry.budget_ratio, cfg.retry.budget_min_per_s, cfg.retry.budget_window_s)
        self.outlier = health.OutlierDetector(cfg.outlier.settings())
        self.session: aiohttp.ClientSession | None = None
        self.redis = None
        self.proxy: Proxy | None = None
        self.watcher: watch.RouteWatcher | None = None
        self.checker: health.ActiveChecker | None = None
        self.reporter: traffic.TrafficReporter | None = None
        self._tasks: list[asyncio.Task] = []
        self._listener: listener.Listener | None = None
        self._metrics_listener: listener.Listener | None = None
        self.port = 0
        # Exact paths -> {method: handler}; /v1/models/<name> is matched apart.
        self._routes = self._build_routes()
        self._model_methods = {"GET": self._model, "HEAD": self._model}
        self._cors = cors.Cors(cfg.cors_allow_origins, cfg.cors_max_age_s) if cfg.cors_allow_origins else None

    # ------------------------------------------------------------ construction

    def _make_pool(self, host: str, port: int, use_tls: bool, cluster_id: str = "") -> upstream.Pool:
        return upstream.Pool(host, port, connect_timeout_s=self.config.connect_timeout_s,
                             idle_timeout_s=self.config.upstream_idle_timeout_s,
                             tls=self.upstream_tls if use_tls else None,
                             server_name=self.config.upstream_server_name(cluster_id))

    def _count_error(self, component: str) -> None:
        self.metrics.background_errors[component] += 1

    def _build_routes(self) -> dict:
        routes: dict = {path: {"POST": self._inference(kind)} for path, kind in validation.PATHS.items()}
        # The proxy gives these their request id itself (and passes it to the replica).
        self._inference_handlers = {methods["POST"] for methods in routes.values()}
        for path, handler in (("/v1/models", self._models), ("/health", self._health), ("/ready", self._ready),
                              ("/metrics", self._metrics), ("/router/status", self._status)):
            routes[path] = {"GET": handler, "HEAD": handler}
        return routes

    def _inference(self, kind: validation.Kind):
        async def handle(request: Request) -> Response | StreamResponse:
            return await self.proxy.serve(request, kind)  # type: ignore[union-attr]
        return handle

    def _cors_head(self, headers) -> bytes:
        """CORS header lines for an answer to a request with ``headers`` (the listener's own refusals)."""
        origin = headers.get("Origin")
        if origin is None or self._cors is None or not self._cors.allows(origin):
            return b""
        return self._cors.head(origin)

    def _with_request_id(self, request: Request, resp: Response) -> Response:
        """Every answer the router builds itself carries ``X-Request-Id`` (the client's, or a new
        one), as inference answers do (the proxy sets theirs), so an error a client reports can be
        found in the logs."""
        if self.proxy is not None:
            resp.headers.append(("X-Request-Id", self.proxy.request_id(request)))
        return resp

    async def _dispatch(self, request: Request) -> Response | StreamResponse:
        methods = self._routes.get(request.path)
        if methods is None and request.path.startswith("/v1/models/") and len(request.path) > 11:
            # As a client library sends it: percent-encoded where the name needs it.
            request.match_info["model"] = urllib.parse.unquote(request.path[11:])
            methods = self._model_methods
        if self._cors is not None:
            origin = request.headers.get("Origin")
            if origin is not None and self._cors.allows(origin):
                if methods is not None and request.method == "OPTIONS" \
                        and "Access-Control-Request-Method" in request.headers:
                    return self._with_request_id(request, self._cors.preflight(
                        origin, methods, request.headers.get("Access-Control-Request-Headers", "")))
                request.extra_head = self._cors.head(origin)
            elif not self._cors.any:
                # The answer depends on Origin even when it carries no CORS header: a shared cache
                # must not hand it to a listed origin's page.
                request.extra_head = cors.VARY
        if methods is None:
            self.metrics.rejected[("", "not_found")] += 1
            return self._with_request_id(request, errors.ApiError(
                404, f"No such path {request.path[:200]!r}; the router serves {', '.join(sorted(self._routes))} "
                     "and /v1/models/<model>", code="not_found").response())
        handler = methods.get(request.method)
        if handler is None:
            self.metrics.rejected[("", "method_not_allowed")] += 1
            allowed = ", ".join(sorted(methods))
            resp = errors.ApiError(405, f"{request.path} takes {allowed}, not {request.method[:20]}",
                                   code="method_not_allowed").response()
            resp.headers.append(("Allow", allowed))
            return self._with_request_id(request, resp)
        if handler in self._inference_handlers:
            return await handler(request)
        return self._with_request_id(request, await handler(request))

    async def _dispatch_metrics(self, request: Request) -> Response:
        if request.path == "/metrics":
            return self._metrics_page()
        return errors.ApiError(404, "This port serves /metrics only", code="not_found").response()

    # ------------------------------------------------------------ lifecycle

    async def _setup(self) -> None:
        cfg = self.config
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, keepalive_timeout=30))
        if cfg.redis_url:
            # redis:// or redis+sentinel:// (the kernel's one Redis connection factory)
            self.redis = redisconn.connect(cfg.redis_url, timeout_s=5.0, retries=3)
        keys = None
        if cfg.api_keys_file or cfg.api_keys_in_redis:
            static = auth.load_keys_file(cfg.api_keys_file) if cfg.api_keys_file else {}
            keys = auth.KeyStore(static, self.redis if cfg.api_keys_in_redis else None, on_error=self._count_error)
        limiter = None
        if keys is not None:
            limiter = ratelimit.RateLimiter(self.redis, default_rps=cfg.default_rate_limit_rps,
                                            default_burst=cfg.default_rate_limit_burst, on_error=self._count_error)
        self.proxy = Proxy(state=self.state, config=cfg, metrics=self.metrics, traffic=self.traffic,
                           outlier=self.outlier, budget=self.budget, keys=keys, limiter=limiter,
                           known_regions=frozenset(self.latency_map.regions))
        self.proxy.start()
        lkg = None
        if cfg.lkg_store == "file":
            lkg = store.FileStore(cfg.effective_lkg_path)
        elif cfg.lkg_store == "redis":
            lkg = store.RedisStore(self.redis, self.router_id)
        if cfg.routes_file:
            self.state.apply(routes_file.load(cfg.routes_file), "static")
        if cfg.scheduler_address:
            client_tls = cfg.scheduler_tls(on_error=self._count_error)
            token = cfg.scheduler_token()
            log.info("event=scheduler_link scheduler=%s tls=%s", cfg.scheduler_address,
                     client_tls.mode if client_tls is not None else "off")
            self.watcher = watch.RouteWatcher(
                cfg.scheduler_address, router_id=self.router_id, router_region=cfg.region,
                token=token, apply=self.state.apply, current_version=lambda: self.state.version,
                store=lkg, on_connected=self._connected, on_error=self._count_error, tls=client_tls)
            await self.watcher.load_last_known_good()
            self._tasks.append(asyncio.create_task(self.watcher.run(), name="route-watch"))
            self.reporter = traffic.TrafficReporter(
                cfg.scheduler_address, self.traffic, router_id=self.router_id, router_region=cfg.region,
                token=token, interval_s=cfg.traffic_report_interval_s, on_error=self._count_error,
                tls=client_tls)
            self._tasks.append(asyncio.create_task(self.reporter.run(), name="traffic-report"))
        if cfg.health.enabled:
            self.checker = health.ActiveChecker(cfg.health.settings(), self.session,
                                                lambda: list(self.state.endpoints.values()), tls=self.upstream_tls)
            self._tasks.append(asyncio.create_task(self.checker.run(), name="health-check"))
        if cfg.upstream_tls_ca_file or cfg.upstream_tls_cert_file:
            self._tasks.append(asyncio.create_task(self.upstream_tls.watch(), name="upstream-tls-reload"))
        if self.server_tls is not None:
            self._tasks.append(asyncio.create_task(self.server_tls.watch(), name="listener-tls-reload"))

    def _bad_request(self, status: int, code: str) -> None:
        """A request the HTTP parser refused (router.listener)."""
        self.metrics.rejected[("", code or str(status))] += 1

    def _connected(self, up: bool) -> None:
        self.metrics.scheduler_connected = 1 if up else 0

    async def start(self) -> int:
        """Set up and listen; returns the bound port (useful with listen_port 0)."""
        await self._setup()
        cfg = self.config
        ssl_context = self.server_tls.context if self.server_tls is not None else None
        limits = listener.HeadLimits(cfg.max_header_line_bytes, cfg.max_headers)
        self._listener = await listener.listen(
            self._dispatch, cfg.listen_host, cfg.listen_port, ssl_context=ssl_context, reuse_port=cfg.workers > 1,
            limits=limits, max_body_bytes=cfg.max_body_bytes, on_bad_request=self._bad_request,
            keepalive_timeout_s=cfg.client_keepalive_timeout_s,
            extra_head=self._cors_head if self._cors is not None else None,
            new_id=self.proxy.new_request_id if self.proxy is not None else None)
        sockets = self._listener.sockets
        self.port = sockets[0].getsockname()[1] if sockets else cfg.listen_port
        log.info("event=router_listening router_id=%s host=%s port=%d tls=%s region=%s policy=%s models=%d",
                 self.router_id, cfg.listen_host, self.port, "on" if ssl_context else "off", cfg.region or "-",
                 cfg.policy, len(self.state.models))
        if cfg.metrics_port:
            self._metrics_listener = await listener.listen(
                self._dispatch_metrics, cfg.listen_host, cfg.metrics_port, ssl_context=ssl_context, limits=limits,
                max_body_bytes=cfg.max_body_bytes, on_bad_request=self._bad_request,
                keepalive_timeout_s=cfg.client_keepalive_timeout_s)
            log.info("event=router_metrics_listening router_id=%s host=%s port=%d", self.router_id, cfg.listen_host,
                     cfg.metrics_port)
        return self.port

    async def stop(self) -> None:
        # First the listener: no new connections; the requests being served finish (shutdown_timeout_s)
        # while routes, health checks and deadlines still run.
        if self._listener is not None:
            await self._listener.shutdown(self.config.shutdown_timeout_s)
            self._listener = None
        if self._metrics_listener is not None:
            await self._metrics_listener.shutdown(0)
            self._metrics_listener = None
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                log.debug("event=task_stopped task=%s", task.get_name())
            except Exception:  # report, but finish shutting down
                log.exception("event=task_failed_on_stop task=%s", task.get_name())
        self._tasks.clear()
        if self.proxy is not None:
            await self.proxy.stop()
        self.state.close()
        if self.session is not None:
            await self.session.close()
        if self.redis is not None:
            await self.redis.aclose()

    # ------------------------------------------------------------ small endpoints

    async def _authorize(self, request: Request) -> tuple[Response | None, object]:
        """(an error response or None, the caller's key: None when the router checks no keys)."""
        if self.proxy is None or self.proxy.keys is None:
            return None, None
        try:
            key = await self.proxy.keys.authenticate(request.headers.get("Authorization"),
                                                     request.headers.get("X-Api-Key"))
        except errors.ApiError as err:
            return err.response(), None
        return None, key

    def _model_card(self, entry) -> dict:
        created = int(self.state.table.generated_at) if self.state.table and self.state.table.generated_at else 0
        return {"id": entry.name, "object": "model", "created": created, "owned_by": "meridian",
                "root": entry.deployment, "parent": None,
                "max_model_len": entry.context_length or None}

    async def _models(self, request: Request) -> Response:
        """The served models the caller's key may use (all of them without keys); 503 while the
        router has no routing table, as inference requests get."""
        denied, key = await self._authorize(request)
        if denied is not None:
            return denied
        if self.state.table is None:
            return errors.not_ready().response()
        data = [self._model_card(e) for name, e in sorted(self.state.models.items()) if auth.may_use(key, name)]
        return Response(body=orjson.dumps({"object": "list", "data": data}), content_type="application/json")

    async def _model(self, request: Request) -> Response:
        denied, key = await self._authorize(request)
        if denied is not None:
            return denied
        if self.state.table is None:
            return errors.not_ready().response()
        name = request.match_info["model"]
        entry = self.state.models.get(name)
        if entry is None or not auth.may_use(key, name):
            return errors.model_not_found(name, [n for n in self.state.model_names if auth.may_use(key, n)]).response()
        return Response(body=orjson.dumps(self._model_card(entry)), content_type="application/json")

    async def _health(self, request: Request) -> Response:
        return Response(body=orjson.dumps({"status": "ok", "table_version": self.state.version}),
                        content_type="application/json")

    async def _ready(self, request: Request) -> Response:
        ready = self.state.table is not None
        body = {"ready": ready, "table_version": self.state.version, "source": self.state.source}
        return Response(status=200 if ready else 503, body=orjson.dumps(body), content_type="application/json")

    async def _metrics(self, request: Request) -> Response:
        """/metrics on the client port: with ``metrics_port`` set, only there (the client port faces
        clients, the metrics port the scraper); else behind the API keys when there are any, like
        every page but the probes (a scraper sends one as a bearer token)."""
        if self.config.metrics_port:
            return errors.ApiError(404, "This router serves /metrics on its metrics port, not to clients",
                                   code="not_found").response()
        denied, _key = await self._authorize(request)
        if denied is not None:
            return denied
        return self._metrics_page()

    def _metrics_page(self) -> Response:
        return Response(body=generate_latest(self.metrics.registry),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _status(self, request: Request) -> Response:
        denied, key = await self._authorize(request)
        if denied is not None:
            return denied
        now = time.monotonic()
        models = []
        for name, entry in sorted(self.state.models.items()):
            if not auth.may_use(key, name):
                continue  # a key limited to some models sees those models' replicas only
            models.append({
                "model": name, "policy": entry.policy_name, "panic": entry.panic,
                "in_flight": entry.admission.in_flight, "queued": entry.admission.queued,
                "replicas": [{
                    "replica_id": e.replica_id, "endpoint": e.url, "region": e.region, "state": e.state.value,
                    "weight": e.weight, "pending": e.pending, "cost_ms": round(e.ewma.value(now), 3),
                    "active_up": e.active_up, "ejected_for_s": round(max(0.0, e.ejected_until - now), 3),
                    "ejections": e.ejections, "requests_failed": e.failures,
                } for e in entry.endpoints],
            })
        body = {"router_id": self.router_id, "region": self.config.region, "table_version": self.state.version,
                "source": self.state.source, "retry_budget": round(self.budget.balance, 2), "models": models}
        return Response(body=orjson.dumps(body), content_type="application/json")
