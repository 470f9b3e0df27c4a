"""The placement as one integer program over the candidate pairs and arcs.

Variables: x[p] replicas of a deployment on a pool group (pair p); m[d,r] a covered client region left
without a replica within its SLA's reach (binary); u[d,r] demand left unserved
(hundredths of a reference replica); a replica may serve several client regions, as the
latency-aware router sends each region to nearby replicas, so demand is met by Hall's condition
(below) and ``flows.assign`` finds which replicas serve which region; deployments with more than
HALL_MAX_REGIONS regions use flow variables f[a] per (pair, region) instead; nodes[g] nodes running in group g; y/z binaries for isolation; v[p] replicas changed
against the current placement (churn); s[d] shortfall below what a deployment serves now
(priority protection).

Minimise  sum_g price_g * nodes_g                       (hourly cost; nodes_min are paid anyway, so
                                                          reserved and minimum nodes cost nothing extra)
        + sum_p score_p * x_p                           (latency, spot risk: score plugins, averaged
                                                          over the regions a replica can serve)
        + replica_usd * sum_p x_p                        (no spare replicas on nodes paid anyway)
        + churn * |x_p - current_p|                     (replicas started or stopped)
        + W_d / 100 * u_dr                              (unserved demand, W_d grows with priority)
        + W_d * (1 + D_d) * m_dr                        (an uncovered region: more than all of d's demand
                                                          D_d, in reference replicas, left unserved)
        + W_d * h_dr                                    (a hedged region one preemption would uncover)
        + P_d / 100 * s_d                               (displacing a class its betters may not preempt)
subject to
  demand        for every set S of the deployment's regions (Hall):
                sum_{p reaching S} min(cov_p, D_S) x_p + sum_{r in S} u_dr >= D_S = 100 * wanted_S
                (cov: reference replicas per replica x 100; capping at D_S is valid for integer x
                and tightens the LP), plus mixed-integer rounding cuts of those rows in the LP
  pool GPUs     sum_p packed_p x_p <= capacity_g;  gpus_per_node * nodes_g >= sum_p packed_p x_p
  quotas        team GPUs (all and per type) <= quota; cloud nodes' GPUs (all, per type) <= quota
  budgets       team: sum price_per_gpu * gpus * x <= budget; fleet: sum price_g nodes_g <= budget
  coverage      for every covered region r of d: sum_{p within r's SLA} x_p + m_dr >= 1 (a replica within
                reach, even where d's demand alone asks for fewer replicas than regions)
  hedge         (spot.hedge) for every covered region r of d: sum_{p within r's SLA} w_p k_p + 2 h_dr >= 2,
                w_p = 1 on spot, 2 otherwise; k_p = x_p where a replica fills its node, else a binary
                b_p <= x_p (replicas that may share a node count once: one preemption takes them all):
                an on-demand replica or two spot replicas on two nodes, or h_dr = 1 at hedge_weight
                (below an uncovered region)
  replicas      sum_p x_p <= max_replicas
  spot share    sum_p w_p (den is_spot_p - num) x_p <= 0 with w_p = round(10^4 capacity_p) and share =
                num/den: spot capacity <= share x all capacity in the exact integers every check uses
                (capacity: reference replicas without the spot credit)
  spot spread   per region R with spot pairs: sum_p w_p (den' is_spot_in_R_p - num') x_p <= 0 with
                max_share_per_region = num'/den' (only where it is below the spot share)
  isolation     a deployment with any replica uses >= min_distinct_clouds clouds and
                >= min_distinct_regions regions (y, z binaries; z = 0 leaves all its demand unserved)

Deployments in ``fixed`` (incremental re-solve) get no variables: their usage is subtracted from
the shared limits."""

from __future__ import annotations

import dataclasses
import fractions
import itertools
import math
from collections.abc import Iterable, Mapping

from meridian import fleet
from scheduler.solver import candidates as cand_mod
from scheduler.solver import linear, problem

SCALE = 100  # demand and capacity in hundredths of a reference replica
# Up to this many client regions a deployment's demand is modelled by Hall's condition (2^k - 1
# rows, no flow variables); beyond, by flow variables per (pair, region).
HALL_MAX_REGIONS = 5
CENTS = 100


@dataclasses.dataclass
class Built:
    model: linear.LinearModel
    x: dict[int, int]  # pair -> variable
    f: dict[int, int]  # arc -> variable
    u: dict[tuple[int, str], int]  # (d, region) -> variable
    miss: dict[tuple[int, str], int]  # (d, covered region) -> coverage miss variable
    wanted: dict[tuple[int, str], int]  # (d, region) -> scaled demand
    nodes: dict[int, int]  # group -> variable
    iso: dict[int, tuple[int, dict[str, int], dict[str, int]]]  # d -> (z, y by cloud, y by region)
    churn: dict[int, tuple[int, int]]  # pair -> (variable, current replicas)
    protect: dict[int, tuple[int, int]]  # d -> (variable, scaled units to keep)
    active: list[int]
    fixed_packed: dict[int, int]  # group -> GPUs held by fixed deployments
    const_nodes: dict[int, int] = dataclasses.field(default_factory=dict)  # group no variable uses -> its nodes
    unhedged: dict[tuple[int, str], int] = dataclasses.field(default_factory=dict)  # (d, region) -> hedge miss
    used: dict[int, int] = dataclasses.field(default_factory=dict)  # pair on shared nodes -> binary "in use"


def priority_weight(priority: int) -> float:
    """Multiplier of the unserved-demand penalty: 1.1 for value 10, 2 for 100, 11 for 1000."""
    return 1.0 + priority / 100.0


def coverage_weight(demand: problem.DeploymentDemand, settings: problem.SolverSettings) -> float:
    """USD/h the objective charges for one covered region left without a replica within reach: more
    than all of the deployment's demand left unserved (so within a deployment coverage comes first),
    scaled by its priority like demand."""
    return settings.unplaced_usd_per_replica * priority_weight(demand.priority) * (1 + demand.demand_replicas)


def hedge_weight(demand: problem.DeploymentDemand, settings: problem.SolverSettings) -> float:
    """USD/h the objective charges for a hedged region (``SpotRules.hedge``) that one preemption
    would leave uncovered: one reference replica of unserved demand, so a plan hedges wherever
    another replica within reach can be had, and an uncovered region still weighs more."""
    return settings.unplaced_usd_per_replica * priority_weight(demand.priority)


def coverage(units: float) -> int:
    """Scaled capacity of one replica; rounded down so a plan never claims capacity it lacks."""
    return max(1, math.floor(units * SCALE + 1e-6))


def replica_score(c: cand_mod.Candidates, p: int) -> float:
    """Score plugins' USD/h for one replica of pair ``p``: its arcs' scores (latency, spot risk)
    weighed by the demand of the client regions it can serve. The one definition the model, the
    evaluator (``evaluate.breakdown``) and so every reported objective and bound use: the model
    does not say which region each replica serves (Hall rows), so scoring the router's actual flows
    instead made a plan's reported objective 0.3-0.8% lower than the model's for the same plan."""
    wanted = c.views[c.pairs[p].d].demand.replicas_by_region
    here = [(wanted.get(c.arcs[a].region, 0), c.arcs[a].score_usd) for a in c.arcs_by_p[p]]
    total = sum(w for w, _ in here)
    return sum(w * sc for w, sc in here) / total if total > 0 else 0.0


def protect_keep(c: cand_mod.Candidates, d: int, current: Mapping[tuple[int, int], int]) -> int:
    """Scaled service of deployment ``d`` its current replicas give (on groups it may still use),
    capped at its demand: what the priority protection term keeps (``_protect``)."""
    view = c.views[d]
    keep = 0
    for (dd, g), n0 in current.items():
        if dd == d and n0 > 0:
            units = view.units_by_type.get(c.groups[g].offer.gpu_type)
            if units is not None and g in c.pair_survivors[d]:
                keep += n0 * coverage(units)
    reachable = {c.arcs[a].region for a in c.arcs_by_d[d]}
    total = sum(w * SCALE for r, w in view.demand.replicas_by_region.items() if w > 0 and r in reachable)
    return min(keep, total)


@dataclasses.dataclass
class Held:
    """What replicas held out of a model take off its shared limits: node GPUs per group (``packed``),
    GPUs per (team, GPU type, or "" for all types) and cents per hour per team. Cents are kept as
    exact fractions of the floats they come from, so a ``Held`` kept up to date by adding and
    taking off deployments (the neighbourhood search, every step) is exactly the total a fresh sum
    gives, and a budget's rounding never depends on the order of the steps."""

    packed: dict[int, int] = dataclasses.field(default_factory=dict)
    team_gpus: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    team_cents: dict[str, fractions.Fraction] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, c: cand_mod.Candidates, fixed: Mapping[int, Iterable[tuple[int, int]]]) -> Held:
        """The total of ``fixed`` (deployment -> [(group, replicas)])."""
        held = cls()
        for d, entries in fixed.items():
            held.add(c, d, entries)
        return held

    def add(self, c: cand_mod.Candidates, d: int, entries: Iterable[tuple[int, int]], sign: int = 1) -> None:
        """Add deployment ``d``'s replicas ``entries`` [(group, replicas)] (``sign`` -1: take them off)."""
        view = c.views[d]
        team = view.demand.team
        for g, n in entries:
            if not n:
                continue
            offer = c.groups[g].offer
            gpus = view.gpus_for(offer.gpu_type)
            k = sign * n
            self.packed[g] = self.packed.get(g, 0) + k * cand_mod.packed_gpus(gpus, offer.gpus_per_node)
            for key in ((team, ""), (team, offer.gpu_type)):
                self.team_gpus[key] = self.team_gpus.get(key, 0) + k * gpus
            self.team_cents[team] = (self.team_cents.get(team, fractions.Fraction(0))
                                     + k * gpus * fractions.Fraction(offer.price_per_gpu_hour_usd * CENTS))

    def without(self, c: cand_mod.Candidates, by_d: Mapping[int, Iterable[tuple[int, int]]]) -> Held:
        """A copy with the replicas ``by_d`` (deployment -> [(group, replicas)]) taken off."""
        out = Held(dict(self.packed), dict(self.team_gpus), dict(self.team_cents))
        for d, entries in by_d.items():
            out.add(c, d, entries, -1)
        return out


def build(c: cand_mod.Candidates, prob: problem.PlacementProblem, settings: problem.SolverSettings,
          current: Mapping[tuple[int, int], int] | None, fixed: Mapping[int, list[tuple[int, int]]] | Held,
          active: list[int], subset: set[int] | None = None, lp_cuts: bool = True,
          protect_weight: Mapping[int, float] | None = None) -> Built:
    """The model for the ``active`` deployments. ``current``: (deployment, group) -> replicas now,
    or None for a first placement (no churn to count); ``fixed``: deployment -> [(group, replicas)]
    kept as they are, or their ``Held`` total (a caller that builds many models keeps it up to date); ``subset``: the pairs to use (default: all);
    ``lp_cuts``: add the LP-only cuts (a model only CP-SAT solves needs none); ``protect_weight``:
    ``protect_weights(prob)``, when the caller builds many models of one problem.

    Demand of a region with no arc at all gets no variable: it is unplaced whatever the plan, so it
    is left out of the objective (and of the bound) rather than added to both as a constant."""
    with_churn = current is not None and settings.churn_usd_per_replica > 0
    current = current or {}
    m = linear.LinearModel()
    groups, arcs, pairs, views = c.groups, c.arcs, c.pairs, c.views
    b = Built(m, {}, {}, {}, {}, {}, {}, {}, {}, {}, active, {})
    held_total = fixed if isinstance(fixed, Held) else Held.of(c, fixed)
    b.fixed_packed.update((g, n) for g, n in held_total.packed.items() if n)

    if protect_weight is None:
        protect_weight = protect_weights(prob)
    for d in active:
        _deployment(b, c, d, settings, current, with_churn, subset, lp_cuts)
        if d in protect_weight:
            _protect(b, c, d, current, settings.unplaced_usd_per_replica * protect_weight[d] / SCALE)

    # Shared limits: pool GPUs and nodes.
    pairs_by_g: dict[int, list[int]] = {}
    for p in b.x:
        pairs_by_g.setdefault(pairs[p].g, []).append(p)
    for g, group in enumerate(groups):
        mine = pairs_by_g.get(g, [])
        held = b.fixed_packed.get(g, 0)
        if not mine and not held and group.nodes_min == 0:
            continue
        gpn = group.offer.gpus_per_node
        if not mine:
            # No variable may use the group: its nodes are the fewest that hold what runs there
            # (the optimum of the variable they would be), a constant. A neighbourhood step holds
            # nearly every group so, and its model shrinks to the groups it can change.
            b.const_nodes[g] = max(group.nodes_min, math.ceil(held / gpn))
            m.constant += group.offer.price_per_node_hour_usd * b.const_nodes[g]
            continue
        hi_nodes = max(group.nodes_min, math.ceil(max(group.offer.gpus_capacity, held) / gpn))
        nodes = m.var(group.nodes_min, hi_nodes, group.offer.price_per_node_hour_usd)
        b.nodes[g] = nodes
        idx = [b.x[p] for p in mine]
        coef = [pairs[p].gpus_packed for p in mine]
        if idx:
            m.row(idx, coef, hi=max(0, group.offer.gpus_capacity - held))
        m.row(idx + [nodes], [-k for k in coef] + [gpn], lo=held)
    _quotas(b, c, prob, held_total.team_gpus, held_total.team_cents)
    return b


def _deployment(b: Built, c: cand_mod.Candidates, d: int, settings: problem.SolverSettings,
                current: Mapping[tuple[int, int], int], with_churn: bool, subset: set[int] | None,
                lp_cuts: bool) -> None:
    m, arcs, pairs, view = b.model, c.arcs, c.pairs, c.views[d]
    scaling = view.demand.spec.scaling
    placement = view.demand.spec.placement
    # Beyond demand a pair may need a replica for isolation or coverage, and a second for a hedge.
    iso_extra = max(placement.min_distinct_clouds, placement.min_distinct_regions) + int(c.hedged(d))
    weight = settings.unplaced_usd_per_replica * priority_weight(view.demand.priority) / SCALE
    my_pairs = [p for p in c.pairs_by_d[d] if subset is None or p in subset]
    reachable = {arcs[a].region for a in c.arcs_by_d[d]}
    for region, wanted in sorted(view.demand.replicas_by_region.items()):
        if wanted > 0 and region in reachable:
            b.wanted[(d, region)] = wanted * SCALE
            b.u[(d, region)] = m.var(0, wanted * SCALE, weight)
    regions = sorted(r for (dd, r) in b.wanted if dd == d)
    total = sum(b.wanted[(d, r)] for r in regions)
    cov = {p: coverage(pairs[p].units) for p in my_pairs}
    reach = {p: {arcs[a].region for a in c.arcs_by_p[p]} for p in my_pairs}
    hall = len(regions) <= HALL_MAX_REGIONS
    for p in my_pairs:
        pair = pairs[p]
        cap = max(0, c.groups[pair.g].offer.gpus_capacity - b.fixed_packed.get(pair.g, 0)) // pair.gpus_packed
        ub = min(scaling.max_replicas, cap, math.ceil(total / cov[p]) + iso_extra)
        churn_new = settings.churn_usd_per_replica if with_churn and current.get((d, pair.g), 0) == 0 else 0.0
        b.x[p] = m.var(0, max(0, ub), settings.replica_usd_per_hour + churn_new + replica_score(c, p))
    if hall:
        # Hall's condition: for every set S of regions, replicas that reach S hold S's demand.
        # With a few regions this is exact (max-flow min-cut) and needs no flow variables.
        for size in range(1, len(regions) + 1):
            for subset_regions in itertools.combinations(regions, size):
                want = set(subset_regions)
                need = sum(b.wanted[(d, r)] for r in subset_regions)
                serving = [p for p in my_pairs if reach[p] & want]
                us = [b.u[(d, r)] for r in subset_regions]
                capped = [min(need, cov[p]) for p in serving]
                m.row([b.x[p] for p in serving] + us, capped + [1] * len(us), lo=need)
                if lp_cuts:
                    _mir_cuts(m, [b.x[p] for p in serving], capped, us, need)
    else:
        mine = [a for a in c.arcs_by_d[d] if arcs[a].p in cov]
        by_region: dict[str, list[int]] = {}
        for a in mine:
            arc = arcs[a]
            b.f[a] = m.var(0, min(b.wanted[(d, arc.region)], cov[arc.p] * m.ub[b.x[arc.p]]))
            by_region.setdefault(arc.region, []).append(a)
        for p in my_pairs:
            flows = [b.f[a] for a in c.arcs_by_p[p] if a in b.f]
            m.row(flows + [b.x[p]], [1] * len(flows) + [-cov[p]], hi=0)
        for region, chosen in sorted(by_region.items()):
            need = b.wanted[(d, region)]
            m.row([b.f[a] for a in chosen] + [b.u[(d, region)]], [1] * len(chosen) + [1], lo=need)
            serving = sorted({arcs[a].p for a in chosen})
            capped = [min(need, cov[p]) for p in serving]
            m.row([b.x[p] for p in serving] + [b.u[(d, region)]], capped + [1], lo=need)
        us = [b.u[(d, r)] for r in regions]
        capped = [min(total, cov[p]) for p in my_pairs]
        m.row([b.x[p] for p in my_pairs] + us, capped + [1] * len(us), lo=total)
        if lp_cuts:
            _mir_cuts(m, [b.x[p] for p in my_pairs], capped, us, total)
    # Coverage: a replica within each covered region's reach, or the region counts as uncovered.
    miss_usd = coverage_weight(view.demand, settings)
    for region, reach_pairs in sorted(c.cover[d].items()):
        near = [b.x[p] for p in reach_pairs if p in b.x]
        miss = b.miss[(d, region)] = m.var(0, 1, miss_usd)
        m.row(near + [miss], [1] * (len(near) + 1), lo=1)
    if c.hedged(d):
        _hedge(b, c, d, settings)
    xs = [b.x[p] for p in my_pairs]
    if xs:
        m.row(xs, [1] * len(xs), hi=scaling.max_replicas)
    is_spot = {p: c.groups[pairs[p].g].offer.tier is fleet.Tier.SPOT for p in my_pairs}
    if any(is_spot.values()) and view.spot_max_share < 1.0:
        # Spot capacity <= share x all capacity (capacity, not replicas: see DeploymentView.capacity),
        # in the integers every other check of the cap uses (DeploymentView.spot_coefficient), so
        # the model and the rules agree exactly (a plan at the cap, 1 spot + 1 on-demand at 0.5, is
        # inside both).
        coef = [view.spot_coefficient(c.groups[pairs[p].g].offer.gpu_type, is_spot[p]) for p in my_pairs]
        m.row(xs, coef, hi=0)
    if any(is_spot.values()) and view.spot_region_binds:
        # Spot capacity in each region <= max_share_per_region x all capacity (a preemption wave or
        # an outage there leaves the rest), in the same exact integers as the checks.
        for region in sorted({c.groups[pairs[p].g].offer.region for p in my_pairs if is_spot[p]}):
            coef = [view.spot_region_coefficient(c.groups[pairs[p].g].offer.gpu_type,
                                                 is_spot[p] and c.groups[pairs[p].g].offer.region == region)
                    for p in my_pairs]
            m.row(xs, coef, hi=0)
    _isolation(b, c, d, my_pairs)
    if with_churn:
        _churn(b, c, d, my_pairs, current, settings)


def _hedge(b: Built, c: cand_mod.Candidates, d: int, settings: problem.SolverSettings) -> None:
    """Each covered region keeps an on-demand replica or two spot replicas on two nodes within reach."""
    m = b.model
    usd = hedge_weight(c.views[d].demand, settings)
    need = cand_mod.HEDGE_NEED
    for region, reach_pairs in sorted(c.cover[d].items()):
        counted, worths = [], []
        for p in reach_pairs:
            if p not in b.x:
                continue
            worth, per_replica = c.hedge_worth(p)
            if not per_replica and p not in b.used:
                b.used[p] = m.var(0, 1)
                m.row([b.x[p], b.used[p]], [1, -1], lo=0)  # in use -> a replica there
            counted.append(b.x[p] if per_replica else b.used[p])
            worths.append(worth)
        h = b.unhedged[(d, region)] = m.var(0, 1, usd)
        m.row(counted + [h], worths + [need], lo=need)


def _mir_cuts(m: linear.LinearModel, xs: list[int], covs: list[int], us: list[int], need: int,
              most: int = 4) -> None:
    """Mixed-integer rounding cuts of a cover row ``sum cov_j x_j + sum u >= need`` (x integer, u
    continuous), one per divisor delta among the row's coefficients: with b = need/delta,
    f = ceil(b) - b > 0 and f_j = ceil(cov_j/delta) - cov_j/delta,
        sum_j (ceil(cov_j/delta) - max(0, f_j - f)/(1 - f)) x_j + sum u/(delta (1 - f)) >= ceil(b).
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
        m.cut(xs + us, coef + [1.0 / (delta * (1 - f))] * len(us), math.ceil(b))


def _isolation(b: Built, c: cand_mod.Candidates, d: int, my_pairs: list[int]) -> None:
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
        for p in my_pairs:
            offer = c.groups[c.pairs[p].g].offer
            members.setdefault(offer.cloud if kind == "cloud" else offer.region, []).append(b.x[p])
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


def _churn(b: Built, c: cand_mod.Candidates, d: int, my_pairs: list[int], current: Mapping[tuple[int, int], int],
           settings: problem.SolverSettings) -> None:
    m = b.model
    for p in my_pairs:
        n0 = current.get((d, c.pairs[p].g), 0)
        if n0 <= 0:
            continue  # new pairs pay churn on x directly
        x = b.x[p]
        v = m.var(0, max(n0, m.ub[x]), settings.churn_usd_per_replica)
        m.row([x, v], [1, 1], lo=n0)  # v >= n0 - x
        m.row([x, v], [-1, 1], lo=-n0)  # v >= x - n0
        b.churn[p] = (v, n0)


def protect_weights(prob: problem.PlacementProblem) -> dict[int, float]:
    """Deployments that some higher class present may not preempt, with the penalty that keeps
    their current service: above the unserved-demand weight of every such class."""
    policy = prob.policy
    if policy is None:
        return {}
    preempts = {cls.name: set(cls.preempts) for cls in policy.priority_classes}
    # The classes present, each with its highest value: a few, so this is linear in deployments.
    present: dict[str, int] = {}
    for o in prob.deployments:
        present[o.priority_class] = max(present.get(o.priority_class, o.priority), o.priority)
    out: dict[int, float] = {}
    for d, dep in enumerate(prob.deployments):
        threats = [value for cls, value in present.items() if value > dep.priority
                   and dep.priority_class not in preempts.get(cls, set())]
        if threats:
            out[d] = 2.0 * priority_weight(max(threats))
    return out


def _protect(b: Built, c: cand_mod.Candidates, d: int, current: Mapping[tuple[int, int], int],
             usd_per_unit: float) -> None:
    keep = protect_keep(c, d, current)
    us = [u for (dd, _), u in b.u.items() if dd == d]
    if keep <= 0 or not us:
        return
    # Served = demand - unserved, so "served + s >= keep" reads "s >= keep - demand + sum u".
    m = b.model
    s = m.var(0, keep, usd_per_unit)
    total = sum(w for (dd, _), w in b.wanted.items() if dd == d)
    m.row(us + [s], [-1] * len(us) + [1], lo=keep - total)
    b.protect[d] = (s, keep)


def _quotas(b: Built, c: cand_mod.Candidates, prob: problem.PlacementProblem,
            fixed_team_gpus: Mapping[tuple[str, str], int],
            fixed_team_cents: Mapping[str, fractions.Fraction]) -> None:
    policy = prob.policy
    if policy is None:
        return
    m, pairs, groups, views = b.model, c.pairs, c.groups, c.views
    by_team: dict[str, list[int]] = {}
    for p in b.x:
        by_team.setdefault(views[pairs[p].d].demand.team, []).append(p)
    for team in policy.teams:
        members = by_team.get(team.name, [])
        if team.max_gpus is not None and members:
            left = team.max_gpus - fixed_team_gpus.get((team.name, ""), 0)
            m.row([b.x[p] for p in members], [pairs[p].gpus for p in members], hi=max(0, left))
        for gpu_type, quota in team.max_gpus_by_type.items():
            typed = [p for p in members if groups[pairs[p].g].offer.gpu_type == gpu_type]
            if typed:
                left = quota - fixed_team_gpus.get((team.name, gpu_type), 0)
                m.row([b.x[p] for p in typed], [pairs[p].gpus for p in typed], hi=max(0, left))
        if team.budget_per_hour_usd is not None and members:
            cents = [math.ceil(pairs[p].gpus * groups[pairs[p].g].offer.price_per_gpu_hour_usd * CENTS) for p in members]
            left = fractions.Fraction(team.budget_per_hour_usd * CENTS) - fixed_team_cents.get(team.name, 0)
            m.row([b.x[p] for p in members], cents, hi=max(0, math.floor(left)))
    # Groups with constant nodes (const_nodes) count in these rows as constants off the limit.
    for cloud in policy.clouds:
        in_cloud = [g for g in b.nodes if groups[g].offer.cloud == cloud.name]
        const = [g for g in b.const_nodes if groups[g].offer.cloud == cloud.name]
        limits = [("", cloud.max_gpus)] + list(cloud.max_gpus_by_type.items())
        for gpu_type, quota in limits:
            if quota is None:
                continue
            chosen = [g for g in in_cloud if gpu_type in ("", groups[g].offer.gpu_type)]
            held = [g for g in const if gpu_type in ("", groups[g].offer.gpu_type)]
            if chosen or held:
                # Nodes that must run anyway (nodes_min) cannot be a quota violation of the plan.
                floor = sum(groups[g].nodes_min * groups[g].offer.gpus_per_node for g in chosen + held)
                taken = sum(b.const_nodes[g] * groups[g].offer.gpus_per_node for g in held)
                m.row([b.nodes[g] for g in chosen], [groups[g].offer.gpus_per_node for g in chosen],
                      hi=max(quota, floor) - taken)
    if policy.budget_per_hour_usd is not None and (b.nodes or b.const_nodes):
        chosen = list(b.nodes)

        def cents_of(g: int) -> int:
            return math.ceil(groups[g].offer.price_per_node_hour_usd * CENTS)

        cents = [cents_of(g) for g in chosen]
        sunk = sum(cents_of(g) * groups[g].nodes_min for g in chosen + list(b.const_nodes))
        taken = sum(cents_of(g) * n for g, n in b.const_nodes.items())
        m.row([b.nodes[g] for g in chosen], cents, hi=max(math.floor(policy.budget_per_hour_usd * CENTS), sunk) - taken)
