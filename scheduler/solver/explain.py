"""Why demand stays unplaced, or a covered region uncovered, in words an operator can act on,
naming the constraint that binds (``problem.CONSTRAINTS``): "no H100 within 80 ms of ap-south under
team quota (research: 64/64 GPUs)", "best is H100 in asia-northeast1: 2 ms RTT + 17 ms prefill of
512 tokens + 10 ms headroom > TTFT 1 ms".

Two cases. Nothing survived the filters: ``feasibility.assess`` reads every filter verdict of every
pool and names the nearest miss (a pool that fails only the SLA: TTFT, TPOT, max_rtt_ms) or else
the most common rule (GPU type, memory, placement, policy, spot, stock-out, capacity). Candidates
exist but the plan did not use them: the ledger of the plan says which shared limit each candidate
hits (pool capacity, team or cloud quota, budget, max_replicas, spot share), and the most common one
is named; otherwise isolation or the time limit is."""

from __future__ import annotations

import collections
from collections.abc import Collection

from scheduler.solver import candidates as cand_mod
from scheduler.solver import feasibility, filters, framework, ledger, problem

def _near(view: object, types: Collection[str], region: str, budget_ms: float) -> str:
    """ "no H100 within 80 ms of ap-south" when the SLA caps RTT, else "no H100 for ap-south"."""
    sla = view.demand.spec.sla  # type: ignore[attr-defined]
    if sla.max_rtt_ms is not None or budget_ms < 200:
        return f"no {_types(types)} within {budget_ms:.0f} ms of {region}"
    return f"no {_types(types)} for {region}"


def _types(view_types: Collection[str]) -> str:
    return "/".join(sorted(view_types)) or "GPU"


def no_candidates(c: cand_mod.Candidates, d: int, region: str) -> tuple[str, str]:
    """Explain a (deployment, region) with no pool left after filtering: (constraint, reason)."""
    view, rej = c.views[d], c.rejections(d)
    if not c.pair_survivors[d]:
        if rej.errors:
            return "error", f"cannot evaluate pools: {rej.errors[0]}"
        offers = [g.offer for g in c.groups] + list(c.excluded)
        verdict = feasibility.assess(c.cycle, view, offers, framework.make_filters(c.filter_names), region,
                                     c.relax_max_rtt)
        if verdict.ok:  # unreachable: something failed for every pool
            return "error", f"no pool usable for {view.name} from {region}, though one passes every filter"
        return verdict.constraint, verdict.message.split(": ", 1)[-1]
    survivors = [c.groups[g].offer for g in c.pair_survivors[d]]
    near = sorted(rej.region.get(region, []), key=lambda it: it[2])
    budget = max(filters.rtt_budget_ms(view, o.gpu_type, c.cycle.ttft_headroom_ms) for o in survivors)
    where = ""
    if near:
        key = near[0][0]
        region_of = next((c.groups[g].offer.region for g in c.pair_survivors[d] if c.groups[g].key == key), "")
        where = f"; nearest is {key} in {region_of} at {near[0][2]:g} ms"
    if budget < 0:
        # Prefill alone (plus the headroom) takes the whole TTFT target: no distance is near enough.
        return "ttft", (f"prefill of {view.name} on {_types({o.gpu_type for o in survivors})} plus the "
                        f"{c.cycle.ttft_headroom_ms:g} ms headroom exceeds its TTFT p99 "
                        f"{view.demand.spec.sla.ttft_p99_ms:g} ms from any region{where}")
    # max_rtt_ms binds when a pool fails it alone (its TTFT would hold); else the TTFT target does.
    constraint = "max_rtt" if "max_rtt" in rej.region_codes.get(region, set()) else "ttft"
    return constraint, (f"no {_types({o.gpu_type for o in survivors})} within {budget:.0f} ms of {region} "
                        f"(SLA: RTT + prefill + {c.cycle.ttft_headroom_ms:g} ms headroom <= TTFT p99 {view.demand.spec.sla.ttft_p99_ms:g} ms"
                        f"{', max_rtt_ms ' + format(view.demand.spec.sla.max_rtt_ms, 'g') if view.demand.spec.sla.max_rtt_ms else ''})"
                        f"{where}")


def blocked(c: cand_mod.Candidates, book: ledger.Ledger, d: int, region: str,
            isolation_off: bool) -> tuple[str, str]:
    """Explain a (deployment, region) whose candidates the plan could not use enough."""
    view = c.views[d]
    arcs = [a for a in c.arcs_by_d[d] if c.arcs[a].region == region]
    pairs = sorted({c.arcs[a].p for a in arcs})
    types = {c.groups[c.arcs[a].g].offer.gpu_type for a in arcs}
    budget = max((filters.rtt_budget_ms(view, t, c.cycle.ttft_headroom_ms) for t in types), default=0.0)
    head = _near(view, types, region, budget)
    if isolation_off:
        p = view.demand.spec.placement
        return "isolation", (f"{head} meets isolation: it needs {p.min_distinct_clouds} clouds and "
                             f"{p.min_distinct_regions} regions with room at once")
    verdicts = [v for v in (book.blocker(p) for p in pairs) if v is not None]
    if not verdicts:
        return "time_limit", f"{head} was placed before the time limit (candidates have room; re-solve)"
    counts = collections.Counter(constraint for constraint, _ in verdicts)
    constraint = max(counts, key=lambda k: (counts[k], k))
    phrases = sorted({phrase for k, phrase in verdicts if k == constraint})
    detail = "; ".join(phrases[:3]) + (f"; +{len(phrases) - 3} more" if len(phrases) > 3 else "")
    if constraint == "capacity":
        holders = _higher_priority_holders(c, book, d, pairs)
        if holders:
            detail += f", held by higher-priority {', '.join(holders[:3])}"
            constraint = "priority"
    return constraint, f"{head} under {detail}"


def _higher_priority_holders(c: cand_mod.Candidates, book: ledger.Ledger, d: int, pairs: list[int]) -> list[str]:
    groups = {c.pairs[p].g for p in pairs}
    mine = c.views[d].demand.priority
    names = set()
    for p, n in book.counts.items():
        pair = c.pairs[p]
        if n > 0 and pair.g in groups and c.views[pair.d].demand.priority > mine:
            names.add(c.views[pair.d].name)
    return sorted(names)


def served_beyond(prob: problem.PlacementProblem, name: str, region: str, pool: str) -> problem.Uncovered:
    """A covered region served from ``pool`` beyond max_rtt_ms because no pool is within it (for a
    deployment whose candidates were not built: an incremental re-solve kept it)."""
    dep = next(x for x in prob.deployments if x.name == name)
    offer = next((p for p in prob.pools if p.key == pool), None)
    try:
        rtt = f" at {prob.latency_map.rtt_ms(region, offer.region):g} ms" if offer is not None else ""
    except KeyError:
        rtt = ""
    return problem.Uncovered(name, region, "max_rtt", f"{region} of {name} served from {pool}{rtt} beyond max_rtt_ms "
                                                      f"{dep.spec.sla.max_rtt_ms:g}: no pool is within it", pool)


def uncovered(c: cand_mod.Candidates, book: ledger.Ledger, d: int, region: str, isolation_off: bool,
              served_from: str = "") -> problem.Uncovered:
    """Explain a covered region the plan leaves without a replica within its SLA's reach (or, with
    ``served_from``, serves only beyond max_rtt_ms because no pool is within it)."""
    view = c.views[d]
    name = view.name
    if served_from:
        _, why = no_candidates(c, d, region) if c.pair_survivors[d] else ("", "")
        return problem.Uncovered(name, region, "max_rtt", f"{region} of {name} served from {served_from} beyond "
                                                          f"max_rtt_ms {view.demand.spec.sla.max_rtt_ms:g}: no pool "
                                                          f"is within it ({why})", served_from)
    pairs = c.cover[d].get(region, [])
    if not pairs:
        constraint, why = no_candidates(c, d, region)
        return problem.Uncovered(name, region, constraint, f"no replica of {name} within reach of {region}: {why}")
    types = {c.groups[c.pairs[p].g].offer.gpu_type for p in pairs}
    if isolation_off:
        rules = view.demand.spec.placement
        return problem.Uncovered(name, region, "isolation", f"no replica of {name} within reach of {region}: it needs "
                                                            f"{rules.min_distinct_clouds} clouds and "
                                                            f"{rules.min_distinct_regions} regions with room at once")
    verdicts = [v for v in (book.blocker(p) for p in pairs) if v is not None]
    if not verdicts:
        return problem.Uncovered(name, region, "time_limit", f"no replica of {name} within reach of {region}: the "
                                                             f"{len(pairs)} {_types(types)} pool(s) that would cover "
                                                             "it have room (re-solve)")
    counts = collections.Counter(constraint for constraint, _ in verdicts)
    constraint = max(counts, key=lambda k: (counts[k], k))
    phrases = sorted({phrase for k, phrase in verdicts if k == constraint})
    detail = "; ".join(phrases[:3]) + (f"; +{len(phrases) - 3} more" if len(phrases) > 3 else "")
    if constraint == "capacity":
        holders = _higher_priority_holders(c, book, d, pairs)
        if holders:
            detail += f", held by higher-priority {', '.join(holders[:3])}"
            constraint = "priority"
    return problem.Uncovered(name, region, constraint, f"no replica of {name} within reach of {region}: the "
                                                       f"{len(pairs)} {_types(types)} pool(s) that would cover it "
                                                       f"are blocked by {detail}")


def unplaced(c: cand_mod.Candidates, book: ledger.Ledger, d: int, region: str, replicas: float,
             isolation_off: bool) -> problem.Unplaced:
    has_arcs = any(c.arcs[a].region == region for a in c.arcs_by_d[d])
    constraint, reason = (blocked(c, book, d, region, isolation_off) if has_arcs
                          else no_candidates(c, d, region))
    name = c.views[d].name
    return problem.Unplaced(name, region, round(replicas, 2), constraint,
                            f"{replicas:g} replica(s) of {name} for {region} unplaced: {reason}")
