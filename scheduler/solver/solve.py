"""``solve``: filters and scores build the candidates, one CP-SAT model decides globally.

Pipeline: candidates (filter and score plugins) -> deployments that cannot meet isolation with the
candidates they have are set aside, with the reason -> the integer program (formulation) -> the LP
relaxation with GLOP (a lower bound; rounded, a hint when there is no current placement) -> CP-SAT,
hinted with the current placement (warm start), within the time limit -> the split back to member
pools, the honest cost, and an explanation for every unplaced demand.

Incremental re-solve: with a current placement that serves most deployments exactly as they now
ask, only the deployments that changed get variables; the others stay where they are and their
usage is taken off the shared limits. When that leaves demand unplaced, a full solve follows."""

from __future__ import annotations

import logging
import math
import time

from scheduler.solver import candidates as cand_mod
from scheduler.solver import evaluate, explain, formulation, framework, greedy, ledger, linear, problem

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
    start = time.perf_counter()
    deadline = start + time_limit_s
    if current is not None and settings.incremental != "never":
        changed = changed_deployments(prob, current, settings)
        share = len(changed) / max(1, len(prob.deployments)) if changed is not None else 1.0
        if changed is not None and (settings.incremental == "always" or share <= settings.incremental_max_share):
            result = _solve(prob, settings, current, deadline, start, changed)
            blocked = [u for u in result.unplaced if u.constraint not in _FILTER_CONSTRAINTS]
            if result.status in (problem.SolveStatus.OPTIMAL, problem.SolveStatus.FEASIBLE) and (
                    not blocked or settings.incremental == "always" or time.perf_counter() > deadline - 0.5):
                return result
            log.info("solver incremental=fallback reason=%s", "unplaced" if blocked else result.status.value)
    return _solve(prob, settings, current, deadline, start, None)


_FILTER_CONSTRAINTS = {"gpu_type", "placement", "policy", "excluded", "latency", "spot", "error"}


def changed_deployments(prob: problem.PlacementProblem, current: problem.Placement,
                        settings: problem.SolverSettings) -> set[int] | None:
    """Indices of deployments whose current replicas do not serve their demand as it is now (short,
    a whole replica over, on a pool that no longer qualifies); None when ``current`` has no serving
    map (the solver cannot tell which region each replica serves)."""
    if current.replicas and not current.serving:
        return None
    offers = {p.key: p for p in prob.pools}
    cycle = framework.Cycle(prob.policy, prob.latency_map, prob.excluded_pools)
    filters = framework.make_filters(settings.filters)
    serving: dict[str, list[tuple[str, str, int]]] = {}
    for (d, region, key), n in current.serving.items():
        if n > 0:
            serving.setdefault(d, []).append((region, key, n))
    out = set()
    for d, demand in enumerate(prob.deployments):
        entries = serving.get(demand.name, [])
        if not entries:
            if demand.demand_replicas > 0:
                out.add(d)
            continue
        view = cand_mod.make_view(demand, prob.policy)
        covered: dict[str, int] = {}
        smallest: dict[str, int] = {}
        ok = True
        for region, key, n in entries:
            offer = offers.get(key)
            if offer is None or key in prob.excluded_pools:
                ok = False
                break
            for plugin in filters:
                if not plugin.filter(framework.Candidate(cycle, view, offer, region if plugin.per_region else "")).ok:
                    ok = False
                    break
            if not ok:
                break
            units = view.units_by_type.get(offer.gpu_type, 1.0)
            if offer.tier.value == "spot":
                units *= settings.spot_capacity_credit
            cov = formulation.coverage(units)
            smallest[region] = min(smallest.get(region, cov), cov)
            covered[region] = covered.get(region, 0) + n * cov
        total = sum(n for _, _, n in entries)
        wanted = {r: w * formulation.SCALE for r, w in demand.replicas_by_region.items() if w > 0}
        isolation = max(demand.spec.placement.min_distinct_clouds, demand.spec.placement.min_distinct_regions)
        if (not ok or any(covered.get(r, 0) < w for r, w in wanted.items())
                or any(r not in wanted for r in covered)
                or (total > isolation and any(covered[r] - wanted.get(r, 0) >= smallest[r] for r in covered))
                or total > demand.spec.scaling.max_replicas):
            out.add(d)
    return out


def _solve(prob: problem.PlacementProblem, settings: problem.SolverSettings, current: problem.Placement | None,
           deadline: float, start: float, changed: set[int] | None) -> problem.PlacementResult:
    stats: dict[str, float] = {}
    t = time.perf_counter()
    only = sorted(changed) if changed is not None else None
    c = cand_mod.build(prob, settings, only)
    stats["filter_s"] = time.perf_counter() - t
    member_group = {m.key: g.index for g in c.groups for m in g.members}
    current_g: dict[tuple[int, int], int] = {}
    index = {d.name: i for i, d in enumerate(prob.deployments)}
    fixed_members: dict[tuple[str, str], int] = {}
    fixed_serving: dict[tuple[str, str, str], int] = {}
    fixed: dict[int, list[tuple[str, int, int]]] = {}
    if current is not None:
        for (name, key), n in current.replicas.items():
            if name in index and key in member_group and n > 0:
                current_g[(index[name], member_group[key])] = current_g.get((index[name], member_group[key]), 0) + n
        if changed is not None:
            for (name, region, key), n in current.serving.items():
                d = index.get(name)
                if d is None or d in changed or n <= 0 or key not in member_group:
                    continue
                fixed.setdefault(d, []).append((region, member_group[key], n))
                fixed_members[(name, key)] = fixed_members.get((name, key), 0) + n
                fixed_serving[(name, region, key)] = n

    scope = only if only is not None else range(len(c.views))
    unplaced: list[problem.Unplaced] = []
    active: list[int] = []
    for d in scope:
        view = c.views[d]
        if view.demand.demand_replicas == 0:
            continue
        reason = _isolation_impossible(c, d)
        if reason:
            for region, wanted in sorted(view.demand.replicas_by_region.items()):
                if wanted > 0:
                    unplaced.append(problem.Unplaced(view.name, region, float(wanted), "isolation",
                                                     f"{wanted} replica(s) of {view.name} for {region} unplaced: {reason}"))
            continue
        if c.arcs_by_d[d]:
            active.append(d)
    t = time.perf_counter()
    built = formulation.build(c, prob, settings, current_g if current is not None else None, fixed, active)
    stats.update(build_s=time.perf_counter() - t, variables=built.model.size, rows=len(built.model.rows),
                 arcs=len(built.x), groups=len(c.groups), pools=len(prob.pools), deployments=len(prob.deployments),
                 active=len(active))

    lower = -math.inf
    hint_counts: dict[int, int] | None = None
    if current is not None:
        hint_counts = _hint_from_current(c, built, current, index, member_group)
    if settings.lp_hint and built.x:
        t = time.perf_counter()
        lp = linear.solve_lp(built.model, time_limit_s=max(0.1, (deadline - time.perf_counter()) * 0.3))
        stats["lp_s"] = time.perf_counter() - t
        if lp.ok:
            lower = lp.objective
            stats["lp_bound"] = lp.objective
            if hint_counts is None:
                hint_counts = _best_start(prob, c, settings, active, _round_lp(c, built, lp.values))
            if len(built.x) > settings.restrict_above_arcs:
                t = time.perf_counter()
                keep = _restrict(c, built, lp.values, hint_counts, settings.arcs_per_region)
                built = formulation.build(c, prob, settings, current_g if current is not None else None, fixed,
                                          active, keep)
                stats.update(restrict_s=time.perf_counter() - t, sat_variables=built.model.size, sat_arcs=len(built.x))
    if hint_counts is None:
        hint_counts = _best_start(prob, c, settings, active, None)
    hint = _complete(c, built, hint_counts, current_g, fixed)

    t = time.perf_counter()
    remaining = deadline - time.perf_counter()
    sat = linear.solve_sat(built.model, time_limit_s=max(0.05, remaining * 0.95), workers=settings.num_search_workers,
                           relative_gap=settings.relative_gap, hint=hint, seed=settings.seed)
    stats["sat_s"] = time.perf_counter() - t
    if sat.status in ("optimal", "feasible"):
        counts = {a: sat.values[v] for a, v in built.x.items() if sat.values[v] > 0}
        status = problem.SolveStatus.OPTIMAL if sat.status == "optimal" else problem.SolveStatus.FEASIBLE
        lower = max(lower, sat.bound)
        message = ""
        iso_off = {d for d, (z, _, _) in built.iso.items() if sat.values[z] == 0}
    else:
        counts = greedy.place(prob, c, active) if changed is None else {}
        status = problem.SolveStatus.FEASIBLE if changed is None else problem.SolveStatus.NO_SOLUTION
        message = f"CP-SAT returned {sat.status} within the time limit; " + (
            "greedy plan returned" if changed is None else "incremental scope unsolved")
        iso_off = set()
    if status is problem.SolveStatus.NO_SOLUTION:
        return problem.PlacementResult(status, current or problem.Placement(), evaluate.cost_per_hour(
            prob, current or problem.Placement()), math.inf, lower, time.perf_counter() - start, tuple(unplaced),
            "incremental", message, stats)

    placement = evaluate.split(c, counts, current)
    if placement is None:
        if settings.aggregate_pools:
            log.info("solver aggregate=off reason=fragmentation")
            return _solve(prob, settings.model_copy(update={"aggregate_pools": False}), current, deadline, start, changed)
        raise RuntimeError("a solution without merged pools did not fit its pools; this is a solver bug")
    if fixed_members:
        merged = dict(placement.replicas)
        for k, n in fixed_members.items():
            merged[k] = merged.get(k, 0) + n
        merged_serving = dict(placement.serving)
        for k, n in fixed_serving.items():
            merged_serving[k] = merged_serving.get(k, 0) + n
        placement = problem.Placement(merged, merged_serving)

    book = ledger.Ledger(prob, c)
    book.add_all(counts)
    for d, entries in fixed.items():
        for _, g, n in entries:
            book.hold(d, g, n)
    covered = evaluate.covered(c, counts)
    for d, entries in fixed.items():
        for region, g, n in entries:
            units = c.views[d].units_by_type.get(c.groups[g].offer.gpu_type, 1.0)
            covered[(d, region)] = covered.get((d, region), 0) + n * formulation.coverage(units)
    for d in scope:
        if d not in active:
            if c.views[d].demand.demand_replicas and not any(u.deployment == c.views[d].name for u in unplaced):
                for region, wanted in sorted(c.views[d].demand.replicas_by_region.items()):
                    if wanted > 0:
                        unplaced.append(explain.unplaced(c, book, d, region, float(wanted), False))
            continue
        for region, wanted in sorted(c.views[d].demand.replicas_by_region.items()):
            short = wanted * formulation.SCALE - covered.get((d, region), 0)
            if wanted > 0 and short > 0:
                unplaced.append(explain.unplaced(c, book, d, region, short / formulation.SCALE, d in iso_off))
    parts = evaluate.breakdown(prob, c, settings, counts, placement, current, covered, set(active))
    elapsed = time.perf_counter() - start
    stats.update(cost_usd=parts.cost_usd, score_usd=parts.score_usd, churn_usd=parts.churn_usd,
                 unplaced_usd=parts.unplaced_usd, sat_bound=sat.bound)
    result = problem.PlacementResult(status, placement, parts.cost_usd, parts.objective, min(lower, parts.objective),
                                     elapsed, tuple(unplaced), "incremental" if changed is not None else "full",
                                     message, stats)
    log.info("solver mode=%s status=%s cost_usd_per_h=%.2f objective=%.2f bound=%.2f gap=%.4f solve_s=%.3f "
             "variables=%d unplaced=%d", result.mode, status.value, result.cost_per_hour_usd, result.objective,
             result.lower_bound, result.gap, elapsed, built.model.size, len(unplaced))
    return result


def _isolation_impossible(c: cand_mod.Candidates, d: int) -> str:
    p = c.views[d].demand.spec.placement
    offers = [c.groups[c.arcs[a].g].offer for a in c.arcs_by_d[d]]
    if not offers:
        return ""  # nothing passed the filters: the filters explain it
    clouds = sorted({o.cloud for o in offers})
    regions = sorted({o.region for o in offers})
    if len(clouds) < p.min_distinct_clouds:
        return (f"isolation needs {p.min_distinct_clouds} clouds but only "
                f"{', '.join(clouds) or 'none'} {'has' if len(clouds) == 1 else 'have'} a compatible pool within the SLA")
    if len(regions) < p.min_distinct_regions:
        return (f"isolation needs {p.min_distinct_regions} regions but only {len(regions)} "
                f"({', '.join(regions) or 'none'}) have a compatible pool within the SLA")
    return ""


def _best_start(prob: problem.PlacementProblem, c: cand_mod.Candidates, settings: problem.SolverSettings,
                active: list[int], prefer: dict[int, int] | None) -> dict[int, int]:
    """The better (by objective) of two feasible greedy repairs of ``prefer``: priority order and
    most-constrained-first order."""
    best, best_value = {}, math.inf
    for order_by in ("constrained", "priority"):
        counts = greedy.place(prob, c, active, prefer=prefer, order_by=order_by)
        placement = evaluate.split(c, counts, None)
        if placement is None:
            continue
        value = evaluate.breakdown(prob, c, settings, counts, placement, None, evaluate.covered(c, counts),
                                   set(active)).objective
        if value < best_value:
            best, best_value = counts, value
    return best


def _restrict(c: cand_mod.Candidates, built: formulation.Built, lp_values: list[float],
              hint_counts: dict[int, int], per_region: int) -> set[int]:
    """Arcs CP-SAT keeps on a large instance: every arc the LP optimum uses (so the restricted LP
    is as good as the full one), the hint's arcs, the ``per_region`` cheapest per (deployment,
    region), and the cheapest arc per cloud and per region for deployments that need isolation."""
    keep = {a for a, v in built.x.items() if lp_values[v] > 1e-6 or hint_counts.get(a, 0) > 0}
    by_key: dict[tuple[int, str], list[int]] = {}
    for a in built.x:
        by_key.setdefault((c.arcs[a].d, c.arcs[a].region), []).append(a)
    for arcs in by_key.values():
        keep.update(sorted(arcs, key=lambda a: (greedy.unit_price(c, a), a))[:per_region])
    for d in built.iso:
        cheapest: dict[tuple[str, str], int] = {}
        for a in sorted((a for a in c.arcs_by_d[d] if a in built.x), key=lambda a: (greedy.unit_price(c, a), a)):
            offer = c.groups[c.arcs[a].g].offer
            for key in (("cloud", offer.cloud), ("region", offer.region)):
                cheapest.setdefault(key, a)
        keep.update(cheapest.values())
    return keep


def _hint_from_current(c: cand_mod.Candidates, built: formulation.Built, current: problem.Placement,
                       index: dict[str, int], member_group: dict[str, int]) -> dict[int, int]:
    arc_of = {(c.arcs[a].d, c.arcs[a].region, c.arcs[a].g): a for a in built.x}
    counts: dict[int, int] = {}
    if current.serving:
        for (name, region, key), n in current.serving.items():
            d, g = index.get(name), member_group.get(key)
            a = arc_of.get((d, region, g)) if d is not None and g is not None else None
            if a is not None and n > 0:
                counts[a] = counts.get(a, 0) + n
        return counts
    for (name, key), n in current.replicas.items():
        d, g = index.get(name), member_group.get(key)
        if d is None or g is None or n <= 0:
            continue
        options = [a for a in built.x if c.arcs[a].d == d and c.arcs[a].g == g]
        if options:
            best = max(options, key=lambda a: c.views[d].demand.replicas_by_region.get(c.arcs[a].region, 0))
            counts[best] = counts.get(best, 0) + n
    return counts


def _round_lp(c: cand_mod.Candidates, built: formulation.Built, values: list[float]) -> dict[int, int]:
    """Floor the LP's replicas, then cover each region's shortfall on its arcs with the largest
    fractional parts: a near-feasible hint CP-SAT repairs in its first moments."""
    counts: dict[int, int] = {}
    frac: dict[tuple[int, str], list[tuple[float, int]]] = {}
    cov: dict[tuple[int, str], int] = {}
    for a, v in built.x.items():
        x = values[v]
        whole = math.floor(x + 1e-6)
        if whole:
            counts[a] = whole
        arc = c.arcs[a]
        cov[(arc.d, arc.region)] = cov.get((arc.d, arc.region), 0) + whole * formulation.coverage(arc.units)
        if x - whole > 1e-6:
            frac.setdefault((arc.d, arc.region), []).append((x - whole, a))
    for key, wanted in built.wanted.items():
        short = wanted - cov.get(key, 0) - round(values[built.u[key]])
        for _, a in sorted(frac.get(key, []), reverse=True):
            if short <= 0:
                break
            counts[a] = counts.get(a, 0) + 1
            short -= formulation.coverage(c.arcs[a].units)
    return counts


def _complete(c: cand_mod.Candidates, built: formulation.Built, counts: dict[int, int],
              current: dict[tuple[int, int], int], fixed: dict[int, list[tuple[str, int, int]]]) -> dict[int, int]:
    """A value for every variable, consistent with ``counts``, so CP-SAT starts from a full point."""
    m = built.model
    hint: dict[int, int] = {}
    n_dg: dict[tuple[int, int], int] = {}
    cov: dict[tuple[int, str], int] = {}
    packed: dict[int, int] = dict(built.fixed_packed)
    for a, v in built.x.items():
        n = min(counts.get(a, 0), m.ub[v])
        hint[v] = n
        arc = c.arcs[a]
        n_dg[(arc.d, arc.g)] = n_dg.get((arc.d, arc.g), 0) + n
        cov[(arc.d, arc.region)] = cov.get((arc.d, arc.region), 0) + n * formulation.coverage(arc.units)
        packed[arc.g] = packed.get(arc.g, 0) + n * arc.gpus_packed
    for key, u in built.u.items():
        hint[u] = max(0, built.wanted[key] - cov.get(key, 0))
    for g, v in built.nodes.items():
        group = c.groups[g]
        hint[v] = max(group.nodes_min, math.ceil(packed.get(g, 0) / group.offer.gpus_per_node))
    for d, (z, by_cloud, by_region) in built.iso.items():
        placed = {c.groups[g].offer.cloud for (dd, g), n in n_dg.items() if dd == d and n > 0}
        regions = {c.groups[g].offer.region for (dd, g), n in n_dg.items() if dd == d and n > 0}
        hint[z] = 1 if placed else 0
        for cloud, y in by_cloud.items():
            hint[y] = 1 if cloud in placed else 0
        for region, y in by_region.items():
            hint[y] = 1 if region in regions else 0
    for (d, g), (v, n0) in built.churn.items():
        hint[v] = abs(n_dg.get((d, g), 0) - n0)
    for d, (s, keep) in built.protect.items():
        total = sum(cov.get((d, r), 0) for r in c.views[d].demand.replicas_by_region)
        hint[s] = max(0, keep - total)
    return hint
