"""The admin API: authenticated HTTP/JSON on aiohttp.

Every ``/v1/`` route needs ``Authorization: Bearer <token>`` (the admin token; compared as a hash).
``/healthz`` and ``/metrics`` are open, as a load balancer and Prometheus expect.

    POST   /v1/apply                 {"files": [{"name": "x.yaml", "text": "..."}]}
    GET    /v1/specs[?kind=KIND]
    GET    /v1/specs/{kind}/{name}    (a ModelDeployment also carries its "rollout", or null)
    DELETE /v1/specs/{kind}/{name}
    POST   /v1/plan                  same body as apply (empty files: plan the stored specs)
    GET    /v1/status
    GET    /v1/cost[?floor=wait]     the bill now and since this node leads, the cost floor (admin/cost.py)

A rejected apply or delete answers 422 with every problem (file, line, path, message) and stores
nothing. Any node (leader or standby) accepts applies; they go to the shared store."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping

import prometheus_client
from aiohttp import web

from meridian import spec
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler import rollout
from scheduler.admin import cost as cost_api
from scheduler.admin import dryrun, specs
from scheduler.control import billing, planner
from scheduler.control import loop as loop_mod
from scheduler.server import auth
from scheduler.state import base, records

log = logging.getLogger("meridian.scheduler.admin")
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_FILES = 200


@dataclasses.dataclass
class AdminContext:
    spec_store: records.SpecStore
    traffic: records.TrafficLog
    loop: loop_mod.ControlLoop
    tokens: auth.TokenBook
    admin_auth: auth.AdminAuth
    metrics: metrics_mod.SchedulerMetrics
    clock: clock_mod.Clock
    status: Callable[[], Awaitable[dict]]
    is_leader: Callable[[], bool]
    solve_time_limit_s: float
    meter: billing.CostMeter
    floors: cost_api.FloorCache
    env: Mapping[str, str] | None = None


CTX = web.AppKey("ctx", AdminContext)


def _error(status: int, message: str, **extra) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


@web.middleware
async def _auth(request: web.Request, handler):
    if not request.path.startswith("/v1/"):
        return await handler(request)
    ctx = request.app[CTX]
    if not ctx.admin_auth.check(request.headers.get("Authorization")):
        ctx.metrics.auth_failures.labels("admin", "bad_token").inc()
        log.warning("event=admin_refused path=%s peer=%s", request.path, request.remote)
        return web.json_response({"error": "a valid admin bearer token is required"}, status=401,
                                 headers={"WWW-Authenticate": 'Bearer realm="meridian"'})
    try:
        return await handler(request)
    except base.StateError as exc:
        ctx.metrics.errors.labels("admin_state").inc()
        log.error("event=admin_state_error path=%s error=%r", request.path, str(exc))
        return _error(503, f"state store unavailable: {exc}")


async def _files(request: web.Request) -> list[tuple[str, str]] | web.Response:
    try:
        body = await request.json()
    except ValueError:
        return _error(400, 'body must be JSON: {"files": [{"name": "...", "text": "..."}]}')
    files = body.get("files") if isinstance(body, dict) else None
    if not isinstance(files, list) or len(files) > MAX_FILES or not all(
            isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("text"), str) for f in files):
        return _error(400, f'"files" must be a list (at most {MAX_FILES}) of {{"name": str, "text": str}}')
    names = [f["name"] for f in files]
    if len(set(names)) != len(names):
        return _error(400, "file names must be unique")
    return [(f["name"], f["text"]) for f in files]


def _issues(exc: spec.SpecError) -> web.Response:
    return web.json_response({"error": f"{len(exc.issues)} problem(s); nothing was changed",
                              "issues": [i.to_dict() for i in exc.issues]}, status=422)


async def apply(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    files = await _files(request)
    if isinstance(files, web.Response):
        return files
    if not files:
        return _error(400, "no files given")
    stored = await ctx.spec_store.all()
    try:
        proposal = specs.propose(stored, files)
    except spec.SpecError as exc:
        log.info("event=apply_rejected files=%s issues=%d", [n for n, _ in files], len(exc.issues))
        return _issues(exc)
    if not proposal.submitted:
        return _error(400, "the files contain no documents")
    done = await ctx.spec_store.apply(proposal.submitted, ctx.clock.now())
    warnings = await specs.token_warnings(proposal.submitted, ctx.tokens, ctx.env)
    ctx.loop.wake("specs applied")
    log.info("event=applied documents=%s", [f"{k}/{n}:{a}" for k, n, a in done])
    return web.json_response({"applied": [{"kind": k, "name": n, "action": a} for k, n, a in done],
                              "generation": await ctx.spec_store.generation(), "warnings": warnings})


async def list_specs(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    kind = request.query.get("kind")
    try:
        kind = specs.canonical_kind(kind) if kind else None
    except specs.UnknownKind as exc:
        return _error(400, str(exc))
    items = [specs.item(s) for s in await ctx.spec_store.all() if kind in (None, s.kind)]
    return web.json_response({"items": items, "generation": await ctx.spec_store.generation()})


async def get_spec(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    try:
        kind = specs.canonical_kind(request.match_info["kind"])
    except specs.UnknownKind as exc:
        return _error(400, str(exc))
    name = request.match_info["name"]
    found = await ctx.spec_store.get(kind, name)
    if found is None:
        return _error(404, f"no {kind} named {name!r}")
    item = specs.item(found)
    if kind == "ModelDeployment":
        item["rollout"] = await _rollout_view(ctx, name)
    return web.json_response(item)


async def _rollout_view(ctx: AdminContext, name: str) -> dict | None:
    """The deployment's rollout as stored (so any node, leader or standby, answers the same)."""
    raw = await records.RolloutLog(ctx.spec_store.store).get(name)
    if raw is None:
        return None
    try:
        return rollout.view.view(rollout.RolloutState.from_json(raw))
    except ValueError as exc:
        ctx.metrics.errors.labels("rollout_record").inc()
        log.error("event=rollout_record_unreadable deployment=%s error=%r", name, str(exc))
        return {"error": f"the stored rollout record cannot be read: {exc}"}


async def delete_spec(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    try:
        kind = specs.canonical_kind(request.match_info["kind"])
    except specs.UnknownKind as exc:
        return _error(400, str(exc))
    name = request.match_info["name"]
    stored = await ctx.spec_store.all()
    if not any((s.kind, s.name) == (kind, name) for s in stored):
        return _error(404, f"no {kind} named {name!r}")
    try:
        specs.propose(stored, [], removed=frozenset({(kind, name)}))
    except spec.SpecError as exc:
        return _issues(exc)
    await ctx.spec_store.delete(kind, name)
    ctx.loop.wake("spec deleted")
    log.info("event=deleted kind=%s name=%s", kind, name)
    return web.json_response({"deleted": {"kind": kind, "name": name},
                              "generation": await ctx.spec_store.generation()})


async def plan(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    files = await _files(request)
    if isinstance(files, web.Response):
        return files
    stored = await ctx.spec_store.all()
    try:
        proposal = specs.propose(stored, files)
    except spec.SpecError as exc:
        return _issues(exc)
    hypothetical = planner.SpecView.of(proposal.merged, -1)
    report = await dryrun.plan_report(ctx.loop, hypothetical, traffic=ctx.traffic, now_s=ctx.clock.now(),
                                      leader=ctx.is_leader(), time_limit_s=ctx.solve_time_limit_s)
    report["changes"] = specs.actions(stored, proposal.submitted)
    return web.json_response(report)


async def status(request: web.Request) -> web.Response:
    return web.json_response(await request.app[CTX].status())


async def get_cost(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    wait = request.query.get("floor", "")
    if wait not in ("", "wait"):
        return _error(400, f"floor={wait!r}: the only value is 'wait' (wait for the cost floor's solve)")
    now = ctx.clock.now()
    leader = ctx.is_leader()
    # A standby knows no fleet (an empty bill) and its loop does not follow the specs: the floor is
    # that of the specs as stored. Only the leader reads the traffic (its read prunes stale reports).
    specs_now = ctx.loop.specs if leader else await cost_api.stored_specs(ctx.spec_store, ctx.loop.specs)
    fleet_bill = billing.bill_now(ctx.loop.fleet.snapshot(now), specs_now)
    tokens = billing.tokens_per_s(await ctx.traffic.demand(now, ctx.loop.config.demand_max_age_s)) if leader else {}
    floor = await ctx.floors.wait(specs_now) if wait == "wait" else ctx.floors.get(specs_now)
    return web.json_response(cost_api.document(
        fleet_bill, ctx.meter.window(now) if leader else None, tokens, now_s=now, leader=leader, floor=floor,
        scale_down_delay_s=ctx.loop.config.pool_scale_down_delay_s))


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True, "leader": request.app[CTX].is_leader()})


async def metrics(request: web.Request) -> web.Response:
    body = request.app[CTX].metrics.exposition()
    return web.Response(body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST})


def build_app(ctx: AdminContext) -> web.Application:
    app = web.Application(middlewares=[_auth], client_max_size=MAX_BODY_BYTES)
    app[CTX] = ctx
    app.router.add_post("/v1/apply", apply)
    app.router.add_get("/v1/specs", list_specs)
    app.router.add_get("/v1/specs/{kind}/{name}", get_spec)
    app.router.add_delete("/v1/specs/{kind}/{name}", delete_spec)
    app.router.add_post("/v1/plan", plan)
    app.router.add_get("/v1/status", status)
    app.router.add_get("/v1/cost", get_cost)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app
