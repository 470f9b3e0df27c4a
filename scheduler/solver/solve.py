"""``solve``: filters and scores build the candidates, one integer program decides globally.

Pipeline: candidates (filter and score plugins) -> deployments that cannot meet isolation with the
candidates they have are set aside, with the reason -> the integer program (formulation) -> the LP
relaxation with GLOP (a lower bound; when there is no current placement, the start by an LP dive)
-> the search, by backend (``backends``: ``search``: on a model of at most ``restrict_above_pairs``
pairs one CP-SAT search of the whole model, hinted with the start (the current placement when
there is one: warm start); on a larger one, steps that re-solve a few competing deployments at a
time with the rest held (``neighbourhood``), from the start, until the time limit (without a
CP-SAT solution in time, the feasible start is the plan); ``mip``: HiGHS on the whole model from
the start; ``portfolio``: the search, then HiGHS from its plan, the better kept) -> the split back to member pools -> the last check (``validate``:
whatever path produced it, a plan that breaks a hard constraint is repaired, never returned as
is) -> the honest cost, and an explanation for every unplaced demand.

Incremental re-solve: with a current placement that serves most deployments exactly as they now
ask, only the deployments that changed get variables; the others stay where they are and their
usage is taken off the shared limits (unless their replicas break the problem as it is now: a pool
or a limit that shrank; those are re-solved too). When that leaves demand unplaced, a full solve
follows."""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping

from scheduler.solver import candidates as cand_mod
from scheduler.solver import (backends, dive, evaluate, explain, formulation, framework, greedy, ledger, linear,
                              neighbourhood, problem, starts, validate)

log = logging.getLogger("meridian.scheduler.solver")


def solve(prob: problem.PlacementProblem, *, time_limit_s: float = 10.0,
          current: problem.Placement | None = None,
          settings: problem.SolverSettings | None = None) -> problem.PlacementResult:
    """The cheapest placement that serves the demand within every constraint, or the best found
    within ``time_limit_s`` (seconds, > 0). Never raises for an unplaceable deployment: its demand
    is returned in ``unplaced`` with the constraint that stops it."""
    if not time_limit_s > 0:
        raise ValueError(f"time_limit_s must be > 0 seconds, got {time_limit_s}")
    settings = settings or problem.SolverSettings()
    backends.get(settings.backend)  # an unknown name fails here, naming the setting
    start = time.perf_counter()
    deadline = start + time_limit_s
    if current is not None and settings.incremental != "never":
        changed = changed_deployments(prob, current, settings)
        if changed is not None:
            changed |= _kept_conflicts(prob, current, changed, settings)
        share = len(changed) / max(1, len(prob.deployments)) if changed is not None else 1.0
        if changed is not None and (settings.incremental == "always" or share <= settings.incremental_max_share):
            result = _solve(prob, settings, current, deadline, start, changed)
            names = {prob.deployments[d].name for d in changed}
            blocked = [u for u in (*result.unplaced, *result.uncovered)
                       if u.constraint not in problem.STRUCTURAL and u.deployment in names]
            # A repaired plan means the kept replicas no longer fit the problem (a pool or a limit
            # shrank): a full solve may place better what the repair dropped.
            repaired = bool(result.stats.get("repaired_replicas"))
            if result.status in (problem.SolveStatus.OPTIMAL, problem.SolveStatus.FEASIBLE) and (
                    not (blocked or repaired) or settings.incremental == "always"
                    or time.perf_counter() > deadline - 0.5):
                return result
            log.info("solver incremental=fallback reason=%s",
                     "repaired" if repaired else "unplaced" if blocked else result.status.value)
    return _solve(prob, settings, current, deadline, start, None)


def _kept_conflicts(prob: problem.PlacementProblem, current: problem.Placement, changed: set[int],
                    settings: problem.SolverSettings) -> set[int]:
    """Deployments an incremental re-solve may not keep as they are although their demand did
    not change: their replicas, with the others kept, break a hard constraint of the problem as it
    is now (a pool that shrank, a quota or budget that was lowered). Per violation: the deployment
    itself, or every kept deployment on that pool, of that team, in that cloud, or in the fleet.
    Without them the kept replicas only use less of every limit, so what remains is valid."""
    index = {d.name: i for i, d in enumerate(prob.deployments)}
    names = {prob.deployments[d].name for d in changed}
    keep = {name for (name, _), n in current.replicas.items() if n > 0 and name in index and name not in names}
    if not keep:
        return set()
    kept = problem.Placement({k: n for k, n in current.replicas.items() if k[0] in keep},
                             {k: v for k, v in current.serving.items() if k[0] in keep})
    views = {d.name: cand_mod.make_view(d, prob.policy) for d in prob.deployments if d.name in keep}
    offers = {p.key: p for p in prob.pools}
    out: set[int] = set()
    found = validate.violations(prob, kept, settings, views)
    for v in found:
        for (name, key), n in kept.replicas.items():
            offer = offers.get(key)
            if n > 0 and (v.scope == "fleet" or (v.scope == "deployment" and name == v.subject)
                          or (v.scope == "pool" and key == v.subject)
                          or (v.scope == "team" and prob.deployments[index[name]].team == v.subject)
                          or (v.scope == "cloud" and offer is not None and offer.cloud == v.subject)):
                out.add(index[name])
    if found:
        log.info("solver incremental=resolve deployments=%d violations=%d first=%r", len(out), len(found),
                 found[0].detail)
    return out


def changed_deployments(prob: problem.PlacementProblem, current: problem.Placement,
                        settings: problem.SolverSettings) -> set[int] | None:
    """Indices of deployments whose current replicas do not serve their demand as it is now (a
    region short, a whole replica spare, a pool that no longer qualifies); None when ``current``
    has no serving map (the solver cannot tell which region each replica serves)."""
    if current.replicas and not current.serving:
        return None
    offers = {p.key: p for p in prob.pools}
    cycle = framework.Cycle.of(prob, settings)
    filters = framework.make_filters(settings.filters)
    serving: dict[str, list[tuple[str, str, float]]] = {}
    for (d, region, key), units in current.serving.items():
        if units > 0:
            serving.setdefault(d, []).append((region, key, units))
    replicas: dict[str, list[tuple[str, int]]] = {}
    for (d, key), n in current.replicas.items():
        if n > 0:
            replicas.setdefault(d, []).append((key, n))
    reach: dict[tuple, bool] = {}
    out = set()
    for d, demand in enumerate(prob.deployments):
        mine = replicas.get(demand.name, [])
        planned = current.demand.get(demand.name)
        same = planned is not None and ({r: w for r, w in planned.items() if w > 0}
                                        == {r: w for r, w in demand.replicas_by_region.items() if w > 0})
        same = same and tuple(current.coverage.get(demand.name, demand.coverage)) == demand.coverage
        if not mine:
            # Demand (or a region to cover) and no replica: re-solve it even when the demand is as
            # planned, since the pools may have changed since (a cluster that reported after the
            # plan that left it unplaced); a re-solve of it alone is cheap.
            if demand.demand_replicas > 0 or demand.coverage:
                out.add(d)
            continue
        view = cand_mod.make_view(demand, prob.policy)
        wanted = {r: w * formulation.SCALE for r, w in demand.replicas_by_region.items() if w > 0}
        ok = True
        isolated = max(demand.spec.placement.min_distinct_clouds, demand.spec.placement.min_distinct_regions) > 1
        served_from: dict[str, float] = {}
        covered: dict[str, float] = {}
        for region, key, units in serving.get(demand.name, []):
            offer = offers.get(key)
            statuses = [plugin.filter(framework.Candidate(cycle, view, offer, region))
                        for plugin in filters if plugin.per_region] if offer is not None else []
            failed = [s for s in statuses if not s.ok]
            if offer is None or (failed and not (
                    settings.relax_max_rtt and all(s.relaxable for s in failed)
                    and not cand_mod.reachable(reach, cycle, filters, view, prob.pools, region))):
                ok = False
                break
            covered[region] = covered.get(region, 0.0) + units * formulation.SCALE
            served_from[key] = served_from.get(key, 0.0) + units * formulation.SCALE
        spare = False
        reaching: dict[str, set[str]] = {}  # covered region -> pools of ``mine`` within its reach
        beyond: dict[str, set[str]] = {}  # covered region -> pools of ``mine`` beyond its max_rtt_ms only
        for key, n in mine:
            offer = offers.get(key)
            if offer is None or key in prob.excluded_pools or not all(
                    plugin.filter(framework.Candidate(cycle, view, offer)).ok for plugin in filters if not plugin.per_region):
                ok = False
                break
            for region in demand.coverage:
                statuses = [plugin.filter(framework.Candidate(cycle, view, offer, region))
                            for plugin in filters if plugin.per_region]
                failed = [st for st in statuses if not st.ok]
                if not failed:
                    reaching.setdefault(region, set()).add(key)
                elif settings.relax_max_rtt and all(st.relaxable for st in failed):
                    beyond.setdefault(region, set()).add(key)
            units = view.units_by_type.get(offer.gpu_type, 1.0)
            if offer.tier.value == "spot":
                units *= settings.spot_capacity_credit
            cov = formulation.coverage(units)
            # A whole replica serving nobody is spare (unless it may be what isolation or the
            # coverage of a region needs).
            covers = any(key in keys for keys in (*reaching.values(), *beyond.values()))
            if n * cov - served_from.get(key, 0.0) >= cov and (n > 1 or not (isolated or covers)):
                spare = True
        for region, keys in beyond.items():
            # Beyond max_rtt_ms covers only where no pool is within it (searched only when needed).
            if region not in reaching and not cand_mod.reachable(reach, cycle, filters, view, prob.pools, region):
                reaching[region] = keys
        if ok and any(region not in reaching for region in demand.coverage):
            ok = False  # a covered region without a replica within its reach
        if ok and cand_mod.hedges(demand, settings.spot_hedges):
            counts = dict(mine)
            # A hedged region one preemption would uncover (its second replica lost): re-solve it.
            ok = all(_hedged_by({k: counts[k] for k in reaching[region]}, demand, offers) >= cand_mod.HEDGE_NEED
                     for region in demand.coverage)
        total = sum(n for _, n in mine)
        if planned is not None:
            # Planned for this very demand on pools that still qualify: what it serves, or leaves
            # unserved, is what the last solve chose (spare replicas for isolation or the spot
            # share, demand no pool can serve); a periodic full solve revisits it.
            if not ok or not same or total > demand.spec.scaling.max_replicas:
                out.add(d)
            continue
        if (not ok or spare or any(covered.get(r, 0.0) < w - 0.5 for r, w in wanted.items())
                or any(r not in wanted for r in covered) or total > demand.spec.scaling.max_replicas):
            out.add(d)
    return out


def _solve(prob: problem.PlacementProblem, settings: problem.SolverSettings, current: problem.Placement | None,
           deadline: float, start: float, changed: set[int] | None) -> problem.PlacementResult:
    stats: dict[str, float] = {}
    backend = backends.get(settings.backend)
    t = time.perf_counter()
    only = sorted(changed) if changed is not None else None
    short_fixed: dict[int, dict[str, float]] = {}
    if changed is not None and current is not None:
        # Deployments kept as they are still report the demand they leave unserved.
        short_fixed = _shortfalls(prob, current, changed)
        only = sorted(set(only or []) | set(short_fixed))
    c = cand_mod.build(prob, settings, only)
    stats["filter_s"] = time.perf_counter() - t
    member_group = {m.key: g.index for g in c.groups for m in g.members}
    members = {m.key: m for g in c.groups for m in g.members}
    index = {d.name: i for i, d in enumerate(prob.deployments)}
    current_g: dict[tuple[int, int], int] = {}
    fixed: dict[int, list[tuple[int, int]]] = {}
    fixed_members: dict[tuple[str, str], int] = {}
    fixed_serving: dict[tuple[str, str, str], float] = {}
    if current is not None:
        for (name, key), n in current.replicas.items():
            d, g = index.get(name), member_group.get(key)
            if d is None or g is None or n <= 0:
                continue
            current_g[(d, g)] = current_g.get((d, g), 0) + n
            if changed is not None and d not in changed:
                fixed.setdefault(d, []).append((g, n))
                fixed_members[(name, key)] = n
        if changed is not None:
            for (name, region, key), units in current.serving.items():
                d = index.get(name)
                if d is not None and d not in changed and key in member_group and units > 0:
                    fixed_serving[(name, region, key)] = units

    scope = sorted(changed) if changed is not None else range(len(c.views))
    unplaced: list[problem.Unplaced] = []
    active: list[int] = []
    no_isolation: set[int] = set()
    for d in scope:
        view = c.views[d]
        if view.demand.demand_replicas == 0 and not view.demand.coverage:
            continue
        reason = cand_mod.isolation_reason(c, d)
        if reason:
            no_isolation.add(d)
            for region, wanted in sorted(view.demand.replicas_by_region.items()):
                if wanted > 0:
                    unplaced.append(problem.Unplaced(view.name, region, float(wanted), "isolation",
                                                     f"{wanted} replica(s) of {view.name} for {region} unplaced: {reason}"))
            continue
        if c.arcs_by_d[d] or c.cover[d]:
            active.append(d)
    t = time.perf_counter()
    warm = current_g if current is not None else None
    built = full = formulation.build(c, prob, settings, warm, fixed, active)
    stats.update(build_s=time.perf_counter() - t, variables=built.model.size, rows=len(built.model.rows),
                 pairs=len(built.x), arcs=len(c.arcs), groups=len(c.groups), pools=len(prob.pools),
                 deployments=len(prob.deployments), active=len(active))
    restricted = False

    lower = -math.inf
    begin: greedy.Solution | None = None
    if current is not None:
        # Warm start: the current replicas where they still fit, the rest filled greedily.
        kept = starts.from_current(c, built, current, index, member_group)
        begin = starts.best_start(prob, c, settings, active, kept.counts, fixed)
    large = len(built.x) > settings.restrict_above_pairs
    local = large and settings.neighbourhood_size > 0
    wanted: dict[int, set[int]] = {}
    lp_cost: dict[int, float] = {}
    usable: set[int] | None = None
    if settings.lp_hint and built.x:
        t = time.perf_counter()
        lp = linear.solve_lp(built.model, time_limit_s=max(0.2, (deadline - time.perf_counter()) * 0.5))
        stats["lp_s"] = time.perf_counter() - t
        if lp.ok:
            lower = lp.objective
            stats["lp_bound"] = lp.objective
            if begin is None:
                t = time.perf_counter()
                begin = dive.dive(prob, c, settings, built, lp.values,
                                  t + 0.25 * (deadline - t), fixed)
                stats["dive_s"] = time.perf_counter() - t
            for p, v in built.x.items():
                if lp.values[v] > 1e-6:
                    wanted.setdefault(c.pairs[p].d, set()).add(c.pairs[p].g)
                    lp_cost[c.pairs[p].d] = (lp_cost.get(c.pairs[p].d, 0.0)
                                             + lp.values[v] * neighbourhood.replica_usd(c, p))
            if local:
                t = time.perf_counter()
                usable = starts.restrict(c, built, lp.values, begin, settings.pairs_per_region)
                stats.update(restrict_s=time.perf_counter() - t, sat_pairs=len(usable))
            elif large:
                t = time.perf_counter()
                keep = starts.restrict(c, built, lp.values, begin, settings.pairs_per_region)
                built = formulation.build(c, prob, settings, warm, fixed, active, keep, lp_cuts=False)
                restricted = True
                stats.update(restrict_s=time.perf_counter() - t, sat_variables=built.model.size, sat_pairs=len(built.x))
    if begin is None:
        begin = starts.best_start(prob, c, settings, active, None, fixed)

    remaining = deadline - time.perf_counter()
    # Leave time for the split, the flows and the explanations (about 1 s per 100k pairs).
    reserve = min(0.05 + stats["pairs"] / 100_000, 0.3 * remaining)
    job = backends.Job(prob, c, settings, full, built, restricted, local, begin, active, deadline - reserve, warm,
                       fixed, wanted, usable, lp_cost, lower, changed is not None)
    found = backend.run(job)
    sol, status, message = found.solution, found.status, found.message
    stats.update(found.stats)
    stats["backend_bound"] = found.bound
    lower = max(lower, found.bound)
    iso_off = {d for d in built.iso if not any(n > 0 for p, n in sol.counts.items() if c.pairs[p].d == d)}

    held: dict[str, int] = {}
    for (name, key), n in fixed_members.items():
        offer = members[key]
        gpus = c.views[index[name]].gpus_for(offer.gpu_type)
        held[key] = held.get(key, 0) + n * cand_mod.packed_gpus(gpus, offer.gpus_per_node)
    placement = evaluate.split(c, sol, current, held)
    if placement is None:
        if not settings.aggregate_pools:
            raise RuntimeError("a solution without merged pools did not fit its pools; this is a solver bug")
        if _time_to_resolve(deadline, start):
            log.info("solver aggregate=off reason=fragmentation")
            return _solve(prob, settings.model_copy(update={"aggregate_pools": False}), current, deadline, start, changed)
        # The replicas that fit no member pool are dropped by the repair below (reported unplaced).
        log.info("solver aggregate=kept reason=fragmentation time_left_s=%.2f", deadline - time.perf_counter())
        placement = evaluate.split(c, sol, current, held, overfill=True)
    merged = dict(placement.replicas)
    for k, n in fixed_members.items():
        merged[k] = merged.get(k, 0) + n
    merged_serving = dict(placement.serving)
    for k, v in fixed_serving.items():
        merged_serving[k] = merged_serving.get(k, 0.0) + v
    planned = {d.name: dict(d.replicas_by_region) for d in prob.deployments}
    placement = problem.Placement(merged, merged_serving, planned, {d.name: d.coverage for d in prob.deployments})
    views = {view.name: view for view in c.views}
    found = validate.violations(prob, placement, settings, views)
    if found and settings.aggregate_pools and len(c.groups) < len(members) and _time_to_resolve(deadline, start):
        # The merged model's view of member pools (nodes, capacity) did not hold for this plan
        # (without the time to re-solve, the repair below drops what breaks instead).
        log.info("solver aggregate=off reason=%s detail=%r", found[0].constraint, found[0].detail)
        return _solve(prob, settings.model_copy(update={"aggregate_pools": False}), current, deadline, start, changed)
    repaired = validate.repair(prob, placement, settings, views) if found else None
    if repaired is not None:
        # Whatever produced it, a plan that breaks a hard constraint is never returned as is.
        log.warning("solver repaired=%d violations=%d first=%r", repaired.dropped_replicas, len(repaired.found),
                    repaired.found[0].detail)
        placement = repaired.placement
        status = problem.SolveStatus.FEASIBLE
        note = (f"plan repaired: {repaired.dropped_replicas} replica(s) dropped for {len(repaired.found)} "
                f"violation(s), first: {repaired.found[0].detail}")
        message = f"{message}; {note}" if message else note
        stats["repaired_replicas"] = repaired.dropped_replicas

    book = ledger.Ledger(prob, c)
    book.add_all(sol.counts)
    for d, entries in fixed.items():
        for g, n in entries:
            book.hold(d, g, n)
    covered = evaluate.covered(c, sol.flows)
    for d in active:
        for region, wanted in sorted(c.views[d].demand.replicas_by_region.items()):
            short = wanted * formulation.SCALE - covered.get((d, region), 0)
            if wanted > 0 and short > 0:
                unplaced.append(explain.unplaced(c, book, d, region, short / formulation.SCALE, d in iso_off))
    for d in scope:
        view = c.views[d]
        if d in active or not view.demand.demand_replicas or any(u.deployment == view.name for u in unplaced):
            continue
        for region, wanted in sorted(view.demand.replicas_by_region.items()):
            if wanted > 0:
                unplaced.append(explain.unplaced(c, book, d, region, float(wanted), False))
    for d, gaps in sorted(short_fixed.items()):
        for region, short in sorted(gaps.items()):
            unplaced.append(explain.unplaced(c, book, d, region, short, False))
    if repaired is not None:
        unplaced.extend(repaired.unplaced)
    reach = validate.coverage(prob, placement, settings, views)
    uncovered = _uncovered(prob, settings, reach, views, c, book, iso_off | no_isolation)
    unhedged = _unhedged(prob, settings, placement, reach)
    parts = evaluate.breakdown(prob, c, settings, sol, placement, current, covered, set(active))
    if repaired is not None:
        # Dropped demand pays its penalty; scores of dropped replicas stay in (an upper bound).
        weight = {d.name: formulation.priority_weight(d.priority) for d in prob.deployments}
        extra = sum(settings.unplaced_usd_per_replica * weight[u.deployment] * u.replicas for u in repaired.unplaced)
        parts = dataclasses.replace(parts, unplaced_usd=parts.unplaced_usd + extra)
    elapsed = time.perf_counter() - start
    stats.update(cost_usd=parts.cost_usd, score_usd=parts.score_usd, churn_usd=parts.churn_usd,
                 unplaced_usd=parts.unplaced_usd, uncovered_usd=parts.uncovered_usd,
                 unhedged_usd=parts.unhedged_usd)
    result = problem.PlacementResult(status, placement, parts.cost_usd, parts.objective, min(lower, parts.objective),
                                     elapsed, tuple(unplaced), "incremental" if changed is not None else "full",
                                     message, stats, tuple(uncovered), tuple(unhedged))
    log.info("solver mode=%s status=%s cost_usd_per_h=%.2f objective=%.2f bound=%.2f gap=%.4f solve_s=%.3f "
             "variables=%d unplaced=%d uncovered=%d unhedged=%d", result.mode, status.value, result.cost_per_hour_usd,
             result.objective, result.lower_bound, result.gap, elapsed, built.model.size, len(unplaced), len(uncovered),
             len(unhedged))
    return result


def _unhedged(prob: problem.PlacementProblem, settings: problem.SolverSettings, placement: problem.Placement,
              reach: Mapping[tuple[str, str], validate.Reach]) -> list[problem.Unhedged]:
    """Every covered region of a hedged deployment (``placement.spot.hedge``) that the final plan
    reaches with spot replicas one preemption can take at once (one replica, or several that may
    share a node), and no on-demand one; a region with no replica is uncovered, reported as such."""
    offers = {p.key: p for p in prob.pools}
    out = []
    for dep in prob.deployments:
        if not cand_mod.hedges(dep, settings.spot_hedges):
            continue
        for region in dep.coverage:
            r = reach.get((dep.name, region))
            near = {} if r is None else {k: n for k in (*r.strict, *r.relaxed)
                                         if k in offers and (n := placement.replicas.get((dep.name, k), 0)) > 0}
            if not near or _hedged_by(near, dep, offers) >= cand_mod.HEDGE_NEED:
                continue
            where = ", ".join(f"{n} on {k}" for k, n in sorted(near.items()))
            out.append(problem.Unhedged(dep.name, region, (
                f"{region} of {dep.name} is reached only by spot replicas one preemption can take at once ({where}): "
                f"it is uncovered until a replacement is ready; no second node or on-demand replica within reach fit "
                f"the plan's limits (pool sizes, scaling.max_replicas {dep.spec.scaling.max_replicas}, quotas, "
                f"budgets)")))
    return out


def _hedged_by(near: Mapping[str, int], dep: problem.DeploymentDemand, offers: Mapping[str, problem.PoolOffer]) -> int:
    """What replicas ``near`` (member pool key -> replicas, all within a region's reach) give its hedge."""
    return sum(cand_mod.hedge_count(offers[k], dep.spec.resources.gpus_for(offers[k].gpu_type), n)
               for k, n in near.items())


def _uncovered(prob: problem.PlacementProblem, settings: problem.SolverSettings,
               reach: Mapping[tuple[str, str], validate.Reach], views, c: cand_mod.Candidates, book: ledger.Ledger,
               isolation_off: set[int]) -> list[problem.Uncovered]:
    """Every covered region the final plan leaves without a replica within its SLA's reach (or
    serves only beyond max_rtt_ms), each explained: read from the last check's coverage (``reach``),
    so it holds whichever path made the plan (a deployment kept by an incremental re-solve is
    explained from candidates built for it here)."""
    index = {d.name: i for i, d in enumerate(prob.deployments)}
    missing = [(name, region, r) for (name, region), r in sorted(reach.items()) if not r.covered]
    if not missing:
        return []
    # Served beyond max_rtt_ms needs no candidates to explain; the rest of a deployment the model
    # did not build (kept by an incremental re-solve) gets them built here.
    unbuilt = sorted({index[name] for name, _, r in missing if not c.built(index[name]) and not r.relaxed})
    extra = cand_mod.build(prob, settings, unbuilt) if unbuilt else None
    extra_book = ledger.Ledger(prob, extra) if extra is not None else None
    out = []
    for name, region, r in missing:
        d = index[name]
        if r.relaxed and not c.built(d):
            out.append(explain.served_beyond(prob, name, region, r.relaxed[0]))
            continue
        here, ledger_here = (c, book) if c.built(d) else (extra, extra_book)
        out.append(explain.uncovered(here, ledger_here, d, region, d in isolation_off, r.relaxed[0] if r.relaxed else ""))
    return out


def _time_to_resolve(deadline: float, start: float) -> bool:
    """Whether at least half the time limit is left for a re-solve of the unmerged model. With less
    it returned little more than a greedy plan (11,000 $/h against 7,100 at 500 x 300), so a merged
    plan that does not hold on member pools is repaired instead."""
    return deadline - time.perf_counter() > 0.5 * (deadline - start)


def _shortfalls(prob: problem.PlacementProblem, current: problem.Placement,
                changed: set[int]) -> dict[int, dict[str, float]]:
    """Unchanged deployments whose current serving leaves demand unserved: d -> region -> replicas."""
    served: dict[tuple[str, str], float] = {}
    for (name, region, _), units in current.serving.items():
        served[(name, region)] = served.get((name, region), 0.0) + units
    out: dict[int, dict[str, float]] = {}
    for d, dep in enumerate(prob.deployments):
        if d in changed:
            continue
        for region, wanted in dep.replicas_by_region.items():
            short = wanted - served.get((dep.name, region), 0.0)
            if wanted > 0 and short > 0.005:
                out.setdefault(d, {})[region] = round(short, 2)
    return out
