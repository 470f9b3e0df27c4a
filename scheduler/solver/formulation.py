"""The placement as one integer program over the candidate arcs.

Variables: x[a] replicas on arc a = (deployment, client region, pool group); u[d,r] unserved demand
(hundredths of a reference replica); nodes[g] nodes running in group g; y/z binaries for isolation;
v[d,g] replicas changed against the current placement (churn); s[d] shortfall below what a
deployment serves now (priority protection).

Minimise  sum_g price_g * nodes_g                       (hourly cost; nodes_min are paid anyway, so
                                                          reserved and minimum nodes cost nothing extra)
        + sum_a score_a * x_a                           (latency, spot risk: score plugins)
        + churn * (|n_dg - current_dg|)                 (replicas started or stopped)
        + W_d / 100 * u_dr                              (unserved demand, W_d grows with priority)
        + P_d / 100 * s_d                               (displacing a class its betters may not preempt)
subject to
  demand        sum_a min(cov_a, D) x_a + u_dr >= D = 100 * wanted_dr   (cov: capacity in reference replicas x 100)
  pool GPUs     sum_a packed_a x_a <= capacity_g;  gpus_per_node * nodes_g >= sum_a packed_a x_a
  quotas        team GPUs (all and per type) <= quota; cloud nodes' GPUs (all, per type) <= quota
  budgets       team: sum price_per_gpu * gpus * x <= budget; fleet: sum price_g nodes_g <= budget
  replicas      sum_a x_a <= max_replicas
  spot share    100 * spot replicas <= floor(100 * share) * all replicas
  isolation     a deployment with any replica uses >= min_distinct_clouds clouds and
                >= min_distinct_regions regions (y, z binaries)

Deployments in ``fixed`` (incremental re-solve) get no variables: their usage is subtracted from
the shared limits."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from meridian import fleet
from scheduler.solver import candidates as cand_mod
from scheduler.solver import linear, problem

SCALE = 100  # demand and coverage in hundredths of a reference replica
CENTS = 100


@dataclasses.dataclass
class Built:
    model: linear.LinearModel
    x: dict[int, int]  # arc index -> variable
    u: dict[tuple[int, str], int]  # (d, region) -> variable
    wanted: dict[tuple[int, str], int]  # (d, region) -> scaled demand
    nodes: dict[int, int]  # group -> variable
    iso: dict[int, tuple[int, dict[str, int], dict[str, int]]]  # d -> (z, y by cloud, y by region)
    churn: dict[tuple[int, int], tuple[int, int]]  # (d, g) -> (variable, current replicas)
    protect: dict[int, tuple[int, int]]  # d -> (variable, scaled units to keep)
    active: list[int]
    fixed_packed: dict[int, int]  # group -> GPUs held by fixed deployments


def priority_weight(priority: int) -> float:
    """Multiplier of the unserved-demand penalty: 1.1 for value 10, 2 for 100, 11 for 1000."""
    return 1.0 + priority / 100.0


def coverage(units: float) -> int:
    """Scaled capacity of one replica; rounded down so a plan never claims capacity it lacks."""
    return max(1, math.floor(units * SCALE + 1e-6))


def build(c: cand_mod.Candidates, prob: problem.PlacementProblem, settings: problem.SolverSettings,
          current: Mapping[tuple[int, int], int] | None, fixed: Mapping[int, list[tuple[str, int, int]]],
          active: list[int], subset: set[int] | None = None) -> Built:
    """The model for the ``active`` deployments; ``current`` (deployment, group) -> replicas now, or
    None for a first placement (no churn to count); ``subset``: the arcs to use (default: all).

    Demand of a region with no arc at all gets no variable: it is unplaced whatever the plan, so it
    is left out of the objective (and of the bound) rather than added to both as a constant."""
    with_churn = current is not None and settings.churn_usd_per_replica > 0
    current = current or {}
    m = linear.LinearModel()
    groups, arcs, views = c.groups, c.arcs, c.views
    b = Built(m, {}, {}, {}, {}, {}, {}, {}, active, {})
    fixed_team_gpus: dict[tuple[str, str], int] = {}  # (team, gpu type or "") -> GPUs
    fixed_team_cents: dict[str, float] = {}
    for d, entries in fixed.items():
        team = views[d].demand.team
        for _, g, n in entries:
            gt = groups[g].offer.gpu_type
            gpus = views[d].gpus_for(gt)
            b.fixed_packed[g] = b.fixed_packed.get(g, 0) + n * cand_mod.packed_gpus(gpus, groups[g].offer.gpus_per_node)
            for key in ((team, ""), (team, gt)):
                fixed_team_gpus[key] = fixed_team_gpus.get(key, 0) + n * gpus
            fixed_team_cents[team] = fixed_team_cents.get(team, 0.0) + n * gpus * groups[g].offer.price_per_gpu_hour_usd * CENTS

    # Per-arc variables and per-deployment constraints.
    protect_weight = _protect_weights(prob)
    for d in active:
        view = views[d]
        scaling = view.demand.spec.scaling
        placement = view.demand.spec.placement
        iso_extra = max(placement.min_distinct_clouds, placement.min_distinct_regions)
        weight = settings.unplaced_usd_per_replica * priority_weight(view.demand.priority) / SCALE
        mine = [a for a in c.arcs_by_d[d] if subset is None or a in subset]
        reachable = {arcs[a].region for a in c.arcs_by_d[d]}
        for region, wanted in sorted(view.demand.replicas_by_region.items()):
            if wanted > 0 and region in reachable:
                b.wanted[(d, region)] = wanted * SCALE
                b.u[(d, region)] = m.var(0, wanted * SCALE, weight)
        current_groups = {g for (dd, g), n in current.items() if dd == d and n > 0}
        for a in mine:
            arc = arcs[a]
            wanted = view.demand.replicas_by_region.get(arc.region, 0)
            group = groups[arc.g]
            cap = max(0, group.offer.gpus_capacity - b.fixed_packed.get(arc.g, 0)) // arc.gpus_packed
            ub = min(scaling.max_replicas, cap, math.ceil(wanted / arc.units) + iso_extra)
            churn_new = settings.churn_usd_per_replica if with_churn and arc.g not in current_groups else 0.0
            b.x[a] = m.var(0, max(0, ub), arc.score_usd + churn_new)
        xs = [b.x[a] for a in mine]
        by_region: dict[str, list[int]] = {}
        for a in mine:
            by_region.setdefault(arcs[a].region, []).append(a)
        for region, wanted in sorted(view.demand.replicas_by_region.items()):
            if (d, region) not in b.u:
                continue
            chosen = by_region.get(region, [])
            need = b.wanted[(d, region)]
            # Coefficients capped at the demand: valid for integer replicas (one replica that covers
            # it all is enough) and it closes most of the LP's gap (no tenth of a big replica).
            covs = [min(need, coverage(arcs[a].units)) for a in chosen]
            m.row([b.x[a] for a in chosen] + [b.u[(d, region)]], covs + [1], lo=need)
            _mir_cuts(m, [b.x[a] for a in chosen], covs, b.u[(d, region)], need)
        if xs:
            m.row(xs, [1] * len(xs), hi=scaling.max_replicas)
        spot = [b.x[a] for a in mine if groups[arcs[a].g].offer.tier is fleet.Tier.SPOT]
        if spot and view.spot_max_share < 1.0:
            share = math.floor(view.spot_max_share * SCALE + 1e-9)
            coef = {x: -share for x in xs}
            for x in spot:
                coef[x] += SCALE
            m.row(list(coef), list(coef.values()), hi=0)
        _isolation(b, c, d)
        if with_churn:
            _churn(b, c, d, current, settings)
        if d in protect_weight:
            _protect(b, c, d, current, settings.unplaced_usd_per_replica * protect_weight[d] / SCALE)

    # Shared limits: pool GPUs and nodes.
    arcs_by_g: dict[int, list[int]] = {}
    for a in b.x:
        arcs_by_g.setdefault(arcs[a].g, []).append(a)
    for g, group in enumerate(groups):
        idx = [b.x[a] for a in arcs_by_g.get(g, [])]
        coef = [arcs[a].gpus_packed for a in arcs_by_g.get(g, [])]
        held = b.fixed_packed.get(g, 0)
        if not idx and not held and group.nodes_min == 0:
            continue
        gpn = group.offer.gpus_per_node
        hi_nodes = max(group.nodes_min, math.ceil(max(group.offer.gpus_capacity, held) / gpn))
        nodes = m.var(group.nodes_min, hi_nodes, group.offer.price_per_node_hour_usd)
        b.nodes[g] = nodes
        if idx:
            m.row(idx, coef, hi=max(0, group.offer.gpus_capacity - held))
        m.row(idx + [nodes], [-k for k in coef] + [gpn], lo=held)
    _quotas(b, c, prob, fixed_team_gpus, fixed_team_cents)
    return b


def _mir_cuts(m: linear.LinearModel, xs: list[int], covs: list[int], u: int, need: int,
              most: int = 4) -> None:
    """Mixed-integer rounding cuts of one demand row ``sum cov_j x_j + u >= need`` (x integer, u
    continuous), one per divisor delta among the row's coverages: with b = need/delta,
    f = ceil(b) - b > 0 and f_j = ceil(cov_j/delta) - cov_j/delta,
        sum_j (ceil(cov_j/delta) - max(0, f_j - f)/(1 - f)) x_j + u/(delta (1 - f)) >= ceil(b).
    Example: 3 units from replicas worth 2.36 each -> at least 2 replicas, not 1.27."""
    for delta in sorted(set(covs), reverse=True)[:most]:
        b = need / delta
        f = math.ceil(b) - b
        if f < 1e-6 or f > 1 - 1e-6:
            continue
        coef = []
        for cov in covs:
            q = cov / delta
            fj = math.ceil(q) - q
            coef.append(math.ceil(q) - max(0.0, fj - f) / (1 - f))
        m.cut(xs + [u], coef + [1.0 / (delta * (1 - f))], math.ceil(b))


def _arcs_of(b: Built, c: cand_mod.Candidates, d: int) -> list[int]:
    return [a for a in c.arcs_by_d[d] if a in b.x]


def _isolation(b: Built, c: cand_mod.Candidates, d: int) -> None:
    placement = c.views[d].demand.spec.placement
    if placement.min_distinct_clouds <= 1 and placement.min_distinct_regions <= 1:
        return
    m = b.model
    z = m.var(0, 1)
    ys: dict[str, dict[str, int]] = {"cloud": {}, "region": {}}
    for kind, need in (("cloud", placement.min_distinct_clouds), ("region", placement.min_distinct_regions)):
        if need <= 1:
            continue
        members: dict[str, list[int]] = {}
        for a in _arcs_of(b, c, d):
            offer = c.groups[c.arcs[a].g].offer
            members.setdefault(offer.cloud if kind == "cloud" else offer.region, []).append(b.x[a])
        for place, idx in members.items():
            y = m.var(0, 1)
            big = min(sum(m.ub[i] for i in idx), c.views[d].demand.spec.scaling.max_replicas)
            m.row(idx + [y], [1] * len(idx) + [-big], hi=0)  # any replica here -> y = 1
            m.row(idx + [y], [1] * len(idx) + [-1], lo=0)  # y = 1 -> a replica here
            m.row([y, z], [1, -1], hi=0)  # y -> z
            ys[kind][place] = y
        m.row(list(ys[kind].values()) + [z], [1] * len(ys[kind]) + [-need], lo=0)
    # Not placed (z = 0) means all its demand is unserved; this cut keeps the LP from serving the
    # demand while ignoring isolation (z fractional).
    for (dd, region), u in b.u.items():
        if dd == d:
            m.row([u, z], [1, b.wanted[(dd, region)]], lo=b.wanted[(dd, region)])
    b.iso[d] = (z, ys["cloud"], ys["region"])


def _churn(b: Built, c: cand_mod.Candidates, d: int, current: Mapping[tuple[int, int], int],
           settings: problem.SolverSettings) -> None:
    m = b.model
    for (dd, g), n0 in current.items():
        if dd != d or n0 <= 0:
            continue
        idx = [b.x[a] for a in _arcs_of(b, c, d) if c.arcs[a].g == g]
        if not idx:
            continue  # the pool no longer qualifies: the replicas go whatever the plan
        v = m.var(0, max(n0, sum(m.ub[i] for i in idx)), settings.churn_usd_per_replica)
        m.row(idx + [v], [1] * len(idx) + [1], lo=n0)  # v >= n0 - n
        m.row(idx + [v], [-1] * len(idx) + [1], lo=-n0)  # v >= n - n0
        b.churn[(d, g)] = (v, n0)


def _protect_weights(prob: problem.PlacementProblem) -> dict[int, float]:
    """Deployments that some higher class present may not preempt, with the penalty that keeps
    their current service: above the unserved-demand weight of every such class."""
    policy = prob.policy
    if policy is None:
        return {}
    preempts = {cls.name: set(cls.preempts) for cls in policy.priority_classes}
    out: dict[int, float] = {}
    for d, dep in enumerate(prob.deployments):
        threats = [o.priority for o in prob.deployments if o.priority > dep.priority
                   and dep.priority_class not in preempts.get(o.priority_class, set())]
        if threats:
            out[d] = 2.0 * priority_weight(max(threats))
    return out


def _protect(b: Built, c: cand_mod.Candidates, d: int, current: Mapping[tuple[int, int], int],
             usd_per_unit: float) -> None:
    view = c.views[d]
    keep = 0
    for (dd, g), n0 in current.items():
        if dd == d and n0 > 0:
            units = view.units_by_type.get(c.groups[g].offer.gpu_type)
            if units is not None and g in c.pair_survivors[d]:
                keep += n0 * coverage(units)
    keep = min(keep, view.demand.demand_replicas * SCALE)
    arcs = _arcs_of(b, c, d)
    if keep <= 0 or not arcs:
        return
    m = b.model
    s = m.var(0, keep, usd_per_unit)
    m.row([b.x[a] for a in arcs] + [s], [min(keep, coverage(c.arcs[a].units)) for a in arcs] + [1], lo=keep)
    b.protect[d] = (s, keep)


def _quotas(b: Built, c: cand_mod.Candidates, prob: problem.PlacementProblem,
            fixed_team_gpus: Mapping[tuple[str, str], int], fixed_team_cents: Mapping[str, float]) -> None:
    policy = prob.policy
    if policy is None:
        return
    m, arcs, groups, views = b.model, c.arcs, c.groups, c.views
    by_team: dict[str, list[int]] = {}
    for a in b.x:
        by_team.setdefault(views[arcs[a].d].demand.team, []).append(a)
    for team in policy.teams:
        members = by_team.get(team.name, [])
        if team.max_gpus is not None and members:
            left = team.max_gpus - fixed_team_gpus.get((team.name, ""), 0)
            m.row([b.x[a] for a in members], [arcs[a].gpus for a in members], hi=max(0, left))
        for gpu_type, quota in team.max_gpus_by_type.items():
            typed = [a for a in members if groups[arcs[a].g].offer.gpu_type == gpu_type]
            if typed:
                left = quota - fixed_team_gpus.get((team.name, gpu_type), 0)
                m.row([b.x[a] for a in typed], [arcs[a].gpus for a in typed], hi=max(0, left))
        if team.budget_per_hour_usd is not None and members:
            cents = [math.ceil(arcs[a].gpus * groups[arcs[a].g].offer.price_per_gpu_hour_usd * CENTS) for a in members]
            left = team.budget_per_hour_usd * CENTS - fixed_team_cents.get(team.name, 0.0)
            m.row([b.x[a] for a in members], cents, hi=max(0.0, math.floor(left)))
    for cloud in policy.clouds:
        in_cloud = [g for g in b.nodes if groups[g].offer.cloud == cloud.name]
        limits = [("", cloud.max_gpus)] + list(cloud.max_gpus_by_type.items())
        for gpu_type, quota in limits:
            if quota is None:
                continue
            chosen = [g for g in in_cloud if gpu_type in ("", groups[g].offer.gpu_type)]
            if chosen:
                # Nodes that must run anyway (nodes_min) cannot be a quota violation of the plan.
                floor = sum(groups[g].nodes_min * groups[g].offer.gpus_per_node for g in chosen)
                m.row([b.nodes[g] for g in chosen], [groups[g].offer.gpus_per_node for g in chosen],
                      hi=max(quota, floor))
    if policy.budget_per_hour_usd is not None and b.nodes:
        chosen = list(b.nodes)
        cents = [math.ceil(groups[g].offer.price_per_node_hour_usd * CENTS) for g in chosen]
        sunk = sum(cc * groups[g].nodes_min for cc, g in zip(cents, chosen, strict=True))
        m.row([b.nodes[g] for g in chosen], cents, hi=max(math.floor(policy.budget_per_hour_usd * CENTS), sunk))
