"""The admin API: authenticated HTTP/JSON on aiohttp.

Every ``/v1/`` route needs ``Authorization: Bearer <token>``; the token (compared as a hash) names
a principal with a role, and ``scheduler.admin.access.authorize`` decides what it may do (401: no
or unknown token; 403: the role may not, with the reason and what it may do). ``/healthz`` and
``/metrics`` are open, as a load balancer and Prometheus expect.

    POST   /v1/apply                 {"files": [{"name": "x.yaml", "text": "..."}], "allow_unmet_sla": false}
    GET    /v1/specs[?kind=KIND]
    GET    /v1/specs/{kind}/{name}    (a ModelDeployment also carries its "rollout", or null, its
                                      "sla" per client region: scheduler.control.sla, and the
                                      leader's last "autoscaling" decision, or null)
    DELETE /v1/specs/{kind}/{name}
    POST   /v1/plan                  same body as apply (empty files: plan the stored specs)
    GET    /v1/status
    GET    /v1/whoami                the caller's principal: name, role, teams, what it may do
    GET    /v1/cost[?floor=wait]     the bill now and since this node leads, the cost floor (admin/cost.py)
    GET    /v1/events[?after=SEQ&limit=N]  recent events (stock-outs, preemptions, lost clusters, rollouts:
                                      scheduler.control.journal), oldest first

``/dashboard`` serves the web dashboard's static files without a token (scheduler.admin.dashboard);
the page then calls the ``/v1/`` routes with one.

A rejected apply or delete answers 422 with every problem (file, line, path, message) and stores
nothing; a refused one (403) stores nothing either; so does an apply that leaves a deployment's SLA
unmeetable from a client region by any declared capacity (``scheduler.solver.feasibility``), unless
``allow_unmet_sla`` accepts it (then each such region is a warning). What ``meridian validate``
warns of in the submitted documents is returned among the warnings too. Any node (leader or standby)
accepts applies; they go to the shared store. Bodies are bounded (``MAX_BODY_BYTES``, ``MAX_FILES``,
and the spec loader's per-file limits); an oversized or malformed body gets a 4xx JSON answer naming
the limit."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping

import prometheus_client
from aiohttp import web

from meridian import spec
from scheduler import clock as clock_mod
from scheduler import metrics as metrics_mod
from scheduler import rollout
from scheduler.admin import access, dashboard, dryrun, specs
from scheduler.admin import cost as cost_api
from scheduler.control import billing, planner
from scheduler.control import journal as journal_mod
from scheduler.control import loop as loop_mod
from scheduler.control import sla as sla_mod
from scheduler.server import auth
from scheduler.state import base, records

log = logging.getLogger("meridian.scheduler.admin")
MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_FILES = 200
PRINCIPAL = web.RequestKey("principal", access.Principal)  # the authenticated caller


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
    journal: journal_mod.Journal = dataclasses.field(default_factory=journal_mod.Journal)


CTX = web.AppKey("ctx", AdminContext)


def _error(status: int, message: str, **extra) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


@web.middleware
async def _auth(request: web.Request, handler):
    if not request.path.startswith("/v1/"):
        return await handler(request)
    ctx = request.app[CTX]
    principal = ctx.admin_auth.identify(request.headers.get("Authorization"))
    if principal is None:
        ctx.metrics.auth_failures.labels("admin", "bad_token").inc()
        log.warning("event=admin_refused reason=bad_token path=%s peer=%s", request.path, request.remote)
        return web.json_response({"error": "a valid admin bearer token is required"}, status=401,
                                 headers={"WWW-Authenticate": 'Bearer realm="meridian"'})
    request[PRINCIPAL] = principal
    try:
        return await handler(request)
    except base.StateError as exc:
        ctx.metrics.errors.labels("admin_state").inc()
        log.error("event=admin_state_error path=%s error=%r", request.path, str(exc))
        return _error(503, f"state store unavailable: {exc}")


def _principal(request: web.Request) -> access.Principal:
    return request[PRINCIPAL]


def _forbidden(request: web.Request, verb: str, refusals: list[str]) -> web.Response:
    """403 naming every refused document, the principal and what its role may do; counted and logged."""
    ctx, who = request.app[CTX], _principal(request)
    ctx.metrics.auth_failures.labels("admin", "forbidden").inc()
    log.warning("event=admin_forbidden principal=%s role=%s verb=%s path=%s refused=%d detail=%r", who.name,
                who.role.value, verb, request.path, len(refusals), refusals[0])
    return web.json_response({"error": "; ".join(refusals) + "; nothing was changed", "principal": who.name,
                              "role": who.role.value, "may": access.may(who), "refused": refusals}, status=403)


def _refusals(who: access.Principal, verb: str, documents: list[tuple[str, str, str | None]],
              stored: list[records.StoredSpec]) -> list[str]:
    """Why ``who`` may not ``verb`` each of ``documents`` (kind, name, team), checked against the
    document's team and, when it replaces one, the stored document's team."""
    teams = {(s.kind, s.name): _stored_team(s) for s in stored}
    out = []
    for kind, name, team in documents:
        for side in (team, teams.get((kind, name), team)):
            decision = access.authorize(who, verb, kind, side)
            if not decision:
                where = "" if side == team else f" (the stored {kind}/{name} is team {side!r})"
                out.append(f"{kind}/{name}: {decision.reason}{where}")
                break
    return out


def _stored_team(s: records.StoredSpec) -> str | None:
    metadata = json.loads(s.body).get("metadata") or {}
    return metadata.get("team")


async def _authorized_files(request: web.Request, verb: str, files: list[tuple[str, str]],
                            stored: list[records.StoredSpec]) -> web.Response | None:
    """A 403 when the principal may not ``verb`` a document the files declare (read before
    validation, so a refusal does not depend on the document being valid), else None."""
    # Unknown kinds are left to validation, which names the valid ones.
    headers = [(h.kind, h.name, h.team) for h in await asyncio.to_thread(specs.declared, files)
               if h.kind in spec.KINDS]
    refusals = _refusals(_principal(request), verb, headers, stored)
    return _forbidden(request, verb, refusals) if refusals else None


def _authorized_docs(request: web.Request, verb: str, docs: tuple[spec.Loaded, ...],
                     stored: list[records.StoredSpec]) -> web.Response | None:
    """The same check on the validated documents (what will be stored is what was authorized)."""
    refusals = _refusals(_principal(request), verb, [(d.kind, d.name, d.doc.metadata.team) for d in docs], stored)
    return _forbidden(request, verb, refusals) if refusals else None


async def _files(request: web.Request, options: dict | None = None) -> list[tuple[str, str]] | web.Response:
    """The body's files; ``options`` receives the body's other fields (e.g. ``allow_unmet_sla``)."""
    try:
        body = await request.json()
    except web.HTTPRequestEntityTooLarge:
        request.app[CTX].metrics.limit_refusals.labels("admin", "body_bytes").inc()
        return _error(413, f"the body is larger than {MAX_BODY_BYTES} bytes; apply fewer or smaller files at once")
    except RecursionError:
        return _error(400, "body JSON is nested too deeply")
    except ValueError:
        return _error(400, 'body must be JSON: {"files": [{"name": "...", "text": "..."}]}')
    if options is not None and isinstance(body, dict):
        options.update({k: v for k, v in body.items() if k != "files"})
    files = body.get("files") if isinstance(body, dict) else None
    if isinstance(files, list) and len(files) > MAX_FILES:
        request.app[CTX].metrics.limit_refusals.labels("admin", "files").inc()
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
    refused = await _authorized_files(request, access.APPLY, files, stored)
    if refused is not None:
        return refused
    try:
        proposal = await asyncio.to_thread(specs.propose, stored, files)
    except spec.SpecError as exc:
        log.info("event=apply_rejected principal=%s files=%s issues=%d", _principal(request).name,
                 [n for n, _ in files], len(exc.issues))
        return _issues(exc)
    if not proposal.submitted:
        return _error(400, "the files contain no documents")
    refused = _authorized_docs(request, access.APPLY, proposal.submitted, stored)
    if refused is not None:
        return refused
    judged = await asyncio.to_thread(specs.judge, stored, proposal, ctx.loop.solver_settings)
    unmet = judged.unmet
    if unmet and not allow:
        log.info("event=apply_rejected principal=%s files=%s reason=unmet_sla regions=%d", _principal(request).name,
                 [n for n, _ in files], len(unmet))
        return web.json_response({"error": f"{len(unmet)} client region(s) whose SLA no declared capacity can meet; "
                                           f"nothing was changed (allow_unmet_sla accepts them)",
                                  "issues": [i.to_dict() for i in unmet]}, status=422)
    done = await ctx.spec_store.apply(proposal.submitted, ctx.clock.now())
    warnings = await specs.token_warnings(proposal.submitted, ctx.tokens, ctx.env)
    warnings += [f"accepted an unmet SLA: {i}" for i in unmet] + judged.warnings
    ctx.loop.wake("specs applied")
    log.info("event=applied principal=%s documents=%s", _principal(request).name,
             [f"{k}/{n}:{a}" for k, n, a in done])
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
        # The autoscaler's last decision (the leader's; null on a standby or before its first tick).
        decision = ctx.loop.autoscaler.decisions.get(name) if ctx.is_leader() else None
        item["autoscaling"] = decision.view() if decision is not None else None
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
    target = next((s for s in stored if (s.kind, s.name) == (kind, name)), None)
    if target is None:
        return _error(404, f"no {kind} named {name!r}")
    refusals = _refusals(_principal(request), access.DELETE, [(kind, name, _stored_team(target))], stored)
    if refusals:
        return _forbidden(request, access.DELETE, refusals)
    try:
        await asyncio.to_thread(specs.propose, stored, [], frozenset({(kind, name)}))
    except spec.SpecError as exc:
        return _issues(exc)
    await ctx.spec_store.delete(kind, name)
    ctx.loop.wake("spec deleted")
    log.info("event=deleted principal=%s kind=%s name=%s", _principal(request).name, kind, name)
    return web.json_response({"deleted": {"kind": kind, "name": name},
                              "generation": await ctx.spec_store.generation()})


async def plan(request: web.Request) -> web.Response:
    ctx = request.app[CTX]
    files = await _files(request)
    if isinstance(files, web.Response):
        return files
    stored = await ctx.spec_store.all()
    refused = await _authorized_files(request, access.PLAN, files, stored)
    if refused is not None:
        return refused
    try:
        proposal = await asyncio.to_thread(specs.propose, stored, files)
    except spec.SpecError as exc:
        return _issues(exc)
    refused = _authorized_docs(request, access.PLAN, proposal.submitted, stored)
    if refused is not None:
        return refused
    hypothetical = planner.SpecView.of(proposal.merged, -1)
    report = await dryrun.plan_report(ctx.loop, hypothetical, traffic=ctx.traffic, now_s=ctx.clock.now(),
                                      leader=ctx.is_leader(), time_limit_s=ctx.solve_time_limit_s)
    report["changes"] = specs.actions(stored, proposal.submitted, dry_run=True)
    return web.json_response(report)


async def status(request: web.Request) -> web.Response:
    return web.json_response(await request.app[CTX].status())


async def whoami(request: web.Request) -> web.Response:
    """The caller's principal and what its role may do (the CLI and the dashboard show it)."""
    return web.json_response(_principal(request).to_dict())


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


async def events(request: web.Request) -> web.Response:
    """Recent events after sequence number ``after`` (0: all the ring holds), at most ``limit`` (the
    newest), with the last sequence number to ask after next and how many the ring dropped."""
    journal = request.app[CTX].journal
    try:
        after = int(request.query.get("after", "0"))
        limit = int(request.query.get("limit", str(journal_mod.DEFAULT_CAPACITY)))
    except ValueError:
        return _error(400, "after and limit must be integers (after: a sequence number seen, limit: >= 0)")
    if after < 0 or limit < 0:
        return _error(400, f"after ({after}) and limit ({limit}) must be >= 0")
    return web.json_response({"events": [e.to_dict() for e in journal.after(after, limit)],
                              "last_seq": journal.last_seq, "dropped": journal.dropped(after),
                              "leader": request.app[CTX].is_leader()})


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
    app.router.add_get("/v1/whoami", whoami)
    app.router.add_get("/v1/cost", get_cost)
    app.router.add_get("/v1/events", events)
    dashboard.add_routes(app)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app
