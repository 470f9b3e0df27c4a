"""The admin API: authenticated HTTP/JSON on aiohttp.

Every ``/v1/`` route needs ``Authorization: Bearer <token>`` (the admin token; compared as a hash).
``/healthz`` and ``/metrics`` are open, as a load balancer and Prometheus expect.

    POST   /v1/apply                 {"files": [{"name": "x.yaml", "text": "..."}], "allow_unmet_sla": false}
    GET    /v1/specs[?kind=KIND]
    GET    /v1/specs/{kind}/{name}    (a ModelDeployment also carries its "rollout", or null, and its
                                      "sla" per client region: scheduler.control.sla)
    DELETE /v1/specs/{kind}/{name}
    POST   /v1/plan                  same body as apply (empty files: plan the stored specs)
    GET    /v1/status

A rejected apply or delete answers 422 with every problem (file, line, path, message) and stores
nothing; so does an apply that leaves a deployment's SLA unmeetable from a client region by any
declared capacity (``scheduler.solver.feasibility``), unless ``allow_unmet_sla`` accepts it (then
each such region is a warning). Any node (leader or standby) accepts applies; they go to the shared
store."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping

import prometheus_client
from aiohttp import web

from meridian import spec
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler import rollout
from scheduler.admin import dryrun, specs
from scheduler.control import loop as loop_mod
from scheduler.control import planner
from scheduler.control import sla as sla_mod
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


async def _files(request: web.Request, options: dict | None = None) -> list[tuple[str, str]] | web.Response:
    """The body's files; ``options`` receives the body's other fields (e.g. ``allow_unmet_sla``)."""
    try:
        body = await request.json()
    except ValueError:
        return _error(400, 'body must be JSON: {"files": [{"name": "...", "text": "..."}]}')
    if options is not None and isinstance(body, dict):
        options.update({k: v for k, v in body.items() if k != "files"})
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
    options: dict = {}
    files = await _files(request, options)
    if isinstance(files, web.Response):
        return files
    if not files:
        return _error(400, "no files given")
    allow = options.get("allow_unmet_sla", False)
    if not isinstance(allow, bool):
        return _error(400, '"allow_unmet_sla" must be true or false')
    stored = await ctx.spec_store.all()
    try:
        proposal = specs.propose(stored, files)
    except spec.SpecError as exc:
        log.info("event=apply_rejected files=%s issues=%d", [n for n, _ in files], len(exc.issues))
        return _issues(exc)
    if not proposal.submitted:
        return _error(400, "the files contain no documents")
    unmet = await asyncio.to_thread(specs.unmet_sla, stored, proposal, ctx.loop.solver_settings)
    if unmet and not allow:
        log.info("event=apply_rejected files=%s reason=unmet_sla regions=%d", [n for n, _ in files], len(unmet))
        return web.json_response({"error": f"{len(unmet)} client region(s) whose SLA no declared capacity can meet; "
                                           f"nothing was changed (allow_unmet_sla accepts them)",
                                  "issues": [i.to_dict() for i in unmet]}, status=422)
    done = await ctx.spec_store.apply(proposal.submitted, ctx.clock.now())
    warnings = await specs.token_warnings(proposal.submitted, ctx.tokens, ctx.env)
    warnings += [f"accepted an unmet SLA: {i}" for i in unmet]
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
        item["sla"] = await _sla_view(ctx, name)
    return web.json_response(item)


async def _sla_view(ctx: AdminContext, name: str) -> dict | None:
    """The deployment's SLA per client region (``scheduler.control.sla``): coverage from the leader's
    plan and live fleet, measured TTFT from the routers' reports in the store (any node has those)."""
    view = ctx.loop.specs
    if name not in view.deployments:
        try:
            view = planner.SpecView.of(records.spec_set(await ctx.spec_store.all()), -1)
        except spec.SpecError as exc:
            return {"error": f"the stored specs do not validate: {exc.issues[0]}"}
    doc = view.deployments.get(name)
    if doc is None:
        return None
    now = ctx.clock.now()
    demand = await ctx.traffic.demand(now, ctx.loop.config.demand_max_age_s)
    plan = ctx.loop.plan if ctx.is_leader() else None
    snapshot = ctx.loop.fleet.snapshot(now)
    return sla_mod.status(name, doc, plan=plan.result if plan else None, prob=plan.problem if plan else None,
                          replicas=snapshot.replicas(), demand=demand, latency_map=view.latency_map,
                          settings=sla_mod.status_settings(ctx.loop.solver_settings), basis="leader" if plan is not None else
                          ("leader, before its first plan" if ctx.is_leader() else "standby"))


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
    report["changes"] = specs.actions(stored, proposal.submitted, dry_run=True)
    return web.json_response(report)


async def status(request: web.Request) -> web.Response:
    return web.json_response(await request.app[CTX].status())


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
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app
