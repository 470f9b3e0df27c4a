"""Why demand stays unplaced, in words an operator can act on, naming the constraint:
"no H100 within 80 ms of ap-south under team quota (research: 64/64 GPUs)".

Two cases. Nothing survived the filters: the filter verdicts say why (GPU type, placement, policy,
excluded pools, latency), keeping only pools with a usable GPU type when there are any. Candidates
exist but the plan did not use them: the ledger of the plan says which shared limit each candidate
hits (pool capacity, team or cloud quota, budget, max_replicas, spot share), and the most common one
is named; otherwise isolation or the time limit is."""

from __future__ import annotations

import collections
from collections.abc import Collection

from scheduler.solver import candidates as cand_mod
from scheduler.solver import filters, ledger, problem

def _near(view: object, types: Collection[str], region: str, budget_ms: float) -> str:
    """ "no H100 within 80 ms of ap-south" when the SLA caps RTT, else "no H100 for ap-south"."""
    sla = view.demand.spec.sla  # type: ignore[attr-defined]
    if sla.max_rtt_ms is not None or budget_ms < 200:
        return f"no {_types(types)} within {budget_ms:.0f} ms of {region}"
    return f"no {_types(types)} for {region}"


def _types(view_types: Collection[str]) -> str:
    return "/".join(sorted(view_types)) or "GPU"


def no_candidates(c: cand_mod.Candidates, d: int, region: str) -> tuple[str, str]:
    """Explain a (deployment, region) with no arc left after filtering."""
    view, rej = c.views[d], c.rejections(d)
    types = [t for t in view.units_by_type]
    if not c.pair_survivors[d]:
        if rej.errors:
            return "error", f"cannot evaluate pools: {rej.errors[0]}"
        beyond_type = {k: v for k, v in rej.pair.items() if k != "gpu_type"}
        if not beyond_type:
            unfit = "; ".join(sorted(set(view.unfit_by_type.values())))[:300]
            detail = f" ({unfit})" if unfit else ""
            allowed = _types(types) if types else _types(view.unfit_by_type)
            return "gpu_type", f"no pool offers a GPU type that holds {view.name} (allowed: {allowed}){detail}"
        constraint, items = max(beyond_type.items(), key=lambda kv: (len(kv[1]), kv[0]))
        examples = "; ".join(sorted({reason for _, reason in items})[:3])
        return constraint, (f"no {_types(types)} pool usable for {view.name}: {len(items)} rejected by "
                            f"{constraint} ({examples})")
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
        return "latency", (f"prefill of {view.name} on {_types({o.gpu_type for o in survivors})} plus the "
                           f"{c.cycle.ttft_headroom_ms:g} ms headroom exceeds its TTFT p99 "
                           f"{view.demand.spec.sla.ttft_p99_ms:g} ms from any region{where}")
    return "latency", (f"no {_types({o.gpu_type for o in survivors})} within {budget:.0f} ms of {region} "
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


def unplaced(c: cand_mod.Candidates, book: ledger.Ledger, d: int, region: str, replicas: float,
             isolation_off: bool) -> problem.Unplaced:
    has_arcs = any(c.arcs[a].region == region for a in c.arcs_by_d[d])
    constraint, reason = (blocked(c, book, d, region, isolation_off) if has_arcs
                          else no_candidates(c, d, region))
    name = c.views[d].name
    return problem.Unplaced(name, region, round(replicas, 2), constraint,
                            f"{replicas:g} replica(s) of {name} for {region} unplaced: {reason}")
