"""The last check on every plan ``solve`` returns: each hard constraint verified on member pools,
straight from the problem, and a repair that drops what breaks one.

Why a separate check: the model, the greedy start and the ledger see merged pool groups and the
solver's own bookkeeping; the split back to member pools, the replicas an incremental re-solve keeps
and a fallback taken when time runs out are further steps where a corner case can slip in. So
whatever path produced it, a plan is checked here against the problem itself: pool capacity, the
filter plugins per (deployment, pool) and per served client region (GPU type, placement, policy,
spot, excluded pools, latency), team quotas and budgets, cloud quotas and the fleet budget on member
nodes, max_replicas, spot share (overall and per region), isolation, and a serving map within what
the replicas give and what each region wants. A plan that fails is repaired by dropping replicas (lowest priority first) and
serving until every check passes; demand that loses service is reported as unplaced with the
constraint that cost it, never returned as if served.

Coverage is checked here too (``coverage``): for every region a deployment must cover
(``DeploymentDemand.coverage``), which of the plan's pools hold a replica within that region's SLA
(the filter plugins per pair and region; beyond max_rtt_ms only where no pool is within it). A
region left without one is not a violation (limits may forbid it) but the solver names every such
region, with its cause, from this check, whatever path made the plan.

Shared limits are read as the model reads them: a pool runs max(nodes_min, ceil(GPUs used / GPUs per
node)) nodes, and the nodes_min that run anyway make a cloud quota or the fleet budget max(limit,
that floor)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping

from meridian import fleet
from scheduler.solver import candidates as cand_mod
from scheduler.solver import framework, problem

EPS = 1e-6

Pair = tuple[str, str]  # (deployment, pool key)


@dataclasses.dataclass(frozen=True)
class Violation:
    """One broken hard constraint. ``constraint`` uses the codes of ``Unplaced.constraint``;
    ``scope`` says whose limit it is ("deployment", "pool", "team", "cloud" or "fleet") and
    ``subject`` names it (deployment name, pool key, team, cloud; "" for the fleet)."""

    constraint: str
    scope: str
    subject: str
    detail: str

    @property
    def deployment(self) -> str:
        """The deployment at fault, or "" for a shared limit."""
        return self.subject if self.scope == "deployment" else ""


def _of(name: str, constraint: str, detail: str) -> Violation:
    """A violation of deployment ``name``'s own rules."""
    return Violation(constraint, "deployment", name, detail)


@dataclasses.dataclass(frozen=True)
class Repaired:
    """A plan made valid: the violations found, how many replicas were dropped, and the demand
    that lost service (reference replicas per deployment and region) with the constraint that cost it."""

    placement: problem.Placement
    found: tuple[Violation, ...]
    dropped_replicas: int
    unplaced: tuple[problem.Unplaced, ...]


def violations(prob: problem.PlacementProblem, placement: problem.Placement,
               settings: problem.SolverSettings | None = None,
               views: Mapping[str, framework.DeploymentView] | None = None) -> list[Violation]:
    """Every hard constraint ``placement`` breaks in ``prob`` (empty when it is valid).
    ``views``: deployment name -> DeploymentView when the caller has them (built otherwise)."""
    return _Plan(prob, settings or problem.SolverSettings(), _views(prob, views), placement).violations()


@dataclasses.dataclass(frozen=True)
class Reach:
    """The plan's pools that hold a replica of a deployment within a covered region's SLA
    (``strict``), or only beyond its max_rtt_ms where no pool at all is within it (``relaxed``)."""

    strict: tuple[str, ...] = ()
    relaxed: tuple[str, ...] = ()

    @property
    def covered(self) -> bool:
        return bool(self.strict)


def coverage(prob: problem.PlacementProblem, placement: problem.Placement,
             settings: problem.SolverSettings | None = None,
             views: Mapping[str, framework.DeploymentView] | None = None) -> dict[tuple[str, str], Reach]:
    """(deployment, covered region) -> the pools of ``placement`` that reach it (``Reach``), for every
    region of every deployment's ``coverage``."""
    return _Plan(prob, settings or problem.SolverSettings(), _views(prob, views), placement).coverage()


def repair(prob: problem.PlacementProblem, placement: problem.Placement,
           settings: problem.SolverSettings | None = None,
           views: Mapping[str, framework.DeploymentView] | None = None) -> Repaired:
    """``placement`` made valid by dropping replicas and serving; unchanged when already valid.

    Steps, in an order where a later one cannot break an earlier one (every limit but spot share
    and isolation only gets looser as replicas go): pairs and served regions the filters reject,
    pool capacity, max_replicas, team quotas and budgets, cloud quotas and the fleet budget, spot
    share, isolation (the whole deployment goes, as the solver itself leaves it out), then serving
    down to what the remaining replicas give and the regions want."""
    plan = _Plan(prob, settings or problem.SolverSettings(), _views(prob, views), placement)
    found = tuple(plan.violations())
    if not found:
        return Repaired(placement, (), 0, ())
    fixer = _Repairer(plan)
    before = plan.served_by_region()
    fixer.run()
    after = plan.served_by_region()
    unplaced = []
    for (name, region), was in sorted(before.items()):
        lost = was - after.get((name, region), 0.0)
        if lost > 0.005 and name in plan.deps:
            why = fixer.blame.get(name, _of(name, "capacity", "serving above what its replicas give"))
            unplaced.append(problem.Unplaced(
                name, region, round(lost, 2), why.constraint,
                f"{lost:.2f} replica(s) of {name} for {region} unplaced: dropped from the plan by the "
                f"validity check ({why.detail})"))
    repaired = problem.Placement(dict(plan.replicas), dict(plan.serving), placement.demand, placement.coverage)
    return Repaired(repaired, found, fixer.dropped, tuple(unplaced))


def _views(prob: problem.PlacementProblem,
           views: Mapping[str, framework.DeploymentView] | None) -> Mapping[str, framework.DeploymentView]:
    if views is not None:
        return views
    return {d.name: cand_mod.make_view(d, prob.policy) for d in prob.deployments}


class _Plan:
    """A mutable copy of a placement and its usage of every limit, recomputed on demand."""

    def __init__(self, prob: problem.PlacementProblem, settings: problem.SolverSettings,
                 views: Mapping[str, framework.DeploymentView], placement: problem.Placement):
        self.prob, self.settings, self.views = prob, settings, views
        self.offers = {p.key: p for p in prob.pools}
        self.deps = {d.name: d for d in prob.deployments}
        self.replicas: dict[Pair, int] = {k: n for k, n in placement.replicas.items() if n > 0}
        self.serving: dict[tuple[str, str, str], float] = {k: v for k, v in placement.serving.items() if v > 0}
        self.policy = prob.policy
        self.cycle = framework.Cycle.of(prob, settings)
        plugins = framework.make_filters(settings.filters)
        self.pair_filters = [f for f in plugins if not f.per_region]
        self.region_filters = [f for f in plugins if f.per_region]
        self.memo: dict[tuple, framework.Status] = {}
        self._reachable: dict[tuple, bool] = {}

    def known(self, name: str, key: str) -> bool:
        return name in self.deps and name in self.views and key in self.offers

    def gpus(self, name: str, key: str) -> int:
        return self.views[name].gpus_for(self.offers[key].gpu_type)

    def packed(self, name: str, key: str) -> int:
        return cand_mod.packed_gpus(self.gpus(name, key), self.offers[key].gpus_per_node)

    def units(self, name: str, key: str) -> float:
        """Reference replicas one replica gives (the solver's figure: spot at its capacity credit)."""
        offer = self.offers[key]
        units = self.views[name].units_by_type.get(offer.gpu_type, 1.0)
        return units * (self.settings.spot_capacity_credit if offer.tier is fleet.Tier.SPOT else 1.0)

    def capacity(self, name: str, key: str) -> float:
        """What one replica weighs in the spot share cap (DeploymentView.capacity)."""
        view = self.views.get(name)
        return view.capacity(self.offers[key].gpu_type) if view is not None else 1.0

    def spot_share(self, name: str) -> float:
        view = self.views[name]
        return view.spot_max_share if view.spot_allowed else 0.0

    def verdict(self, plugins: Iterable[framework.Filter], name: str, key: str, region: str) -> framework.Status:
        """The first failing filter's status for (deployment, pool, region), memoised by plugin key."""
        view, offer = self.views[name], self.offers[key]
        for i, plugin in enumerate(plugins):
            memo_key = (i, plugin.per_region, key, region, cand_mod.plugin_key(plugin, view))
            status = self.memo.get(memo_key)
            if status is None:
                status = self.memo[memo_key] = plugin.filter(framework.Candidate(self.cycle, view, offer, region))
            if not status.ok:
                return status
        return framework.OK

    # -- usage -----------------------------------------------------------------------------------
    def by_deployment(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (name, key), n in self.replicas.items():
            if self.known(name, key):
                out.setdefault(name, {})[key] = n
        return out

    def pool_packed(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (name, key), n in self.replicas.items():
            if self.known(name, key):
                out[key] = out.get(key, 0) + n * self.packed(name, key)
        return out

    def nodes(self, packed: Mapping[str, int]) -> dict[str, int]:
        """Nodes each non-excluded pool runs."""
        return {key: max(o.pool.nodes_min, math.ceil(packed.get(key, 0) / o.gpus_per_node))
                for key, o in self.offers.items() if key not in self.prob.excluded_pools}

    def served_by_pair(self) -> dict[Pair, float]:
        out: dict[Pair, float] = {}
        for (name, _, key), v in self.serving.items():
            out[(name, key)] = out.get((name, key), 0.0) + v
        return out

    def served_by_region(self) -> dict[Pair, float]:
        out: dict[Pair, float] = {}
        for (name, region, _), v in self.serving.items():
            out[(name, region)] = out.get((name, region), 0.0) + v
        return out

    # -- checks ----------------------------------------------------------------------------------
    def pair_violations(self) -> list[tuple[Pair, Violation]]:
        out = []
        for name, key in sorted(self.replicas):
            if not self.known(name, key):
                out.append(((name, key), _of(name, "error", f"{name} on {key}: not in the problem")))
                continue
            status = self.verdict(self.pair_filters, name, key, "")
            if not status.ok:
                out.append(((name, key), _of(name, status.constraint or "error", f"{name} on {key}: {status.reason}")))
        return out

    def within_reach(self, name: str, key: str, region: str) -> str:
        """"strict" when a replica of ``name`` on pool ``key`` is within ``region``'s SLA, "relaxed"
        when only beyond max_rtt_ms and no pool is within it (the solver may serve it so), else ""."""
        if not self.known(name, key) or not self.verdict(self.pair_filters, name, key, "").ok:
            return ""
        status = self.verdict(self.region_filters, name, key, region)
        if status.ok:
            return "strict"
        if status.relaxable and self.settings.relax_max_rtt and not cand_mod.reachable(
                self._reachable, self.cycle, self.pair_filters + self.region_filters, self.views[name],
                self.prob.pools, region):
            return "relaxed"
        return ""

    def coverage(self) -> dict[tuple[str, str], Reach]:
        mine = self.by_deployment()
        out = {}
        for name, dep in sorted(self.deps.items()):
            if name not in self.views:
                continue
            keys = [k for k in sorted(mine.get(name, {}))
                    if self.known(name, k) and self.verdict(self.pair_filters, name, k, "").ok]
            for region in dep.coverage:
                statuses = {k: self.verdict(self.region_filters, name, k, region) for k in keys}
                strict = tuple(k for k, st in statuses.items() if st.ok)
                relaxed: tuple[str, ...] = ()
                beyond = [k for k, st in statuses.items() if not st.ok and st.relaxable]
                # Beyond max_rtt_ms counts only where no pool at all is within it (asked only then:
                # the whole-fleet search is the costly part).
                if not strict and beyond and self.settings.relax_max_rtt and not cand_mod.reachable(
                        self._reachable, self.cycle, self.pair_filters + self.region_filters, self.views[name],
                        self.prob.pools, region):
                    relaxed = tuple(beyond)
                out[(name, region)] = Reach(strict, relaxed)
        return out

    def serving_violations(self) -> list[tuple[tuple[str, str, str], Violation]]:
        out = []
        for name, region, key in sorted(self.serving):
            if (name, key) not in self.replicas or not self.known(name, key):
                out.append(((name, region, key), _of(name, "capacity", f"{name} serves {region} from {key} "
                                                                       "without replicas there")))
                continue
            if not self.settings.demand_region_filters:
                continue  # the cost floor's relaxation: demand may be served from any pool
            status = self.verdict(self.region_filters, name, key, region)
            if not status.ok and status.relaxable and self.settings.relax_max_rtt and not cand_mod.reachable(
                    self._reachable, self.cycle, self.pair_filters + self.region_filters, self.views[name],
                    self.prob.pools, region):
                continue  # no pool is within max_rtt_ms of the region: the solver may serve it from beyond
            if not status.ok:
                out.append(((name, region, key), _of(name, status.constraint or "error",
                                                     f"{name} serves {region} from {key}: {status.reason}")))
        return out

    def pool_violations(self) -> list[tuple[str, Violation]]:
        out = []
        for key, used in sorted(self.pool_packed().items()):
            cap = self.offers[key].gpus_capacity
            if used > cap:
                out.append((key, Violation("capacity", "pool", key, f"pool {key} holds {used} GPUs > capacity {cap}")))
        return out

    def team_violations(self) -> list[tuple[str, str, Violation]]:
        """(team, GPU type, "" for all types or "$" for the budget, violation) per team limit exceeded."""
        if self.policy is None:
            return []
        gpus: dict[tuple[str, str], int] = {}
        usd: dict[str, float] = {}
        for (name, key), n in self.replicas.items():
            if not self.known(name, key):
                continue
            team, offer, g = self.deps[name].team, self.offers[key], self.gpus(name, key)
            for k in ((team, ""), (team, offer.gpu_type)):
                gpus[k] = gpus.get(k, 0) + n * g
            usd[team] = usd.get(team, 0.0) + n * g * offer.price_per_gpu_hour_usd
        out = []
        for team in self.policy.teams:
            for gpu_type, quota in [("", team.max_gpus), *team.max_gpus_by_type.items()]:
                used = gpus.get((team.name, gpu_type), 0)
                if quota is not None and used > quota:
                    what = f"{team.name} {gpu_type}".strip()
                    why = Violation("team_quota", "team", team.name, f"team quota ({what}: {used}/{quota} GPUs)")
                    out.append((team.name, gpu_type, why))
            spent, budget = usd.get(team.name, 0.0), team.budget_per_hour_usd
            if budget is not None and spent > budget + EPS:
                why = Violation("budget", "team", team.name, f"team budget ({team.name}: ${spent:.2f} of ${budget:g}/h)")
                out.append((team.name, "$", why))
        return out

    def fleet_violations(self) -> list[tuple[str, str, Violation]]:
        """(cloud, GPU type or "", violation) per cloud quota exceeded; ("", "", ...) for the fleet budget."""
        if self.policy is None:
            return []
        nodes = self.nodes(self.pool_packed())
        out = []
        for cloud in self.policy.clouds:
            for gpu_type, quota in [("", cloud.max_gpus), *cloud.max_gpus_by_type.items()]:
                if quota is None:
                    continue
                keys = [k for k in nodes
                        if self.offers[k].cloud == cloud.name and gpu_type in ("", self.offers[k].gpu_type)]
                used = sum(nodes[k] * self.offers[k].gpus_per_node for k in keys)
                floor = sum(self.offers[k].pool.nodes_min * self.offers[k].gpus_per_node for k in keys)
                if used > max(quota, floor):
                    what = f"{cloud.name} {gpu_type}".strip()
                    why = Violation("cloud_quota", "cloud", cloud.name, f"cloud quota ({what}: {used}/{quota} GPUs)")
                    out.append((cloud.name, gpu_type, why))
        budget = self.policy.budget_per_hour_usd
        if budget is not None:
            total = sum(n * self.offers[k].price_per_node_hour_usd for k, n in nodes.items())
            floor = sum(self.offers[k].pool.nodes_min * self.offers[k].price_per_node_hour_usd for k in nodes)
            if total > max(budget, floor) + EPS:
                out.append(("", "", Violation("budget", "fleet", "", f"fleet budget (${total:.2f} of ${budget:g}/h)")))
        return out

    def deployment_violations(self) -> list[Violation]:
        out = []
        for name, mine in sorted(self.by_deployment().items()):
            total = sum(mine.values())
            spec = self.deps[name].spec
            if total > spec.scaling.max_replicas:
                out.append(_of(name, "max_replicas", f"max_replicas ({total} > {spec.scaling.max_replicas})"))
            capacity = {k: n * self.capacity(name, k) for k, n in mine.items()}
            spot = sum(u for k, u in capacity.items() if self.offers[k].tier is fleet.Tier.SPOT)
            share = self.spot_share(name)
            view = self.views[name]
            weights = {k: n * view.spot_weight(self.offers[k].gpu_type) for k, n in mine.items()}
            if not view.spot_share_ok(sum(w for k, w in weights.items() if self.offers[k].tier is fleet.Tier.SPOT),
                                      sum(weights.values())):
                out.append(_of(name, "spot", f"spot share cap ({spot:.2f} of {sum(capacity.values()):.2f} reference "
                                             f"replicas of capacity on spot > {share:.0%})"))
            if view.spot_region_binds:
                total = sum(weights.values())
                for region, here in sorted(self.spot_by_region(name, weights).items()):
                    if not view.spot_region_ok(here, total):
                        out.append(_of(name, "spot", f"spot share cap per region ({here / framework.SPOT_SCALE:.2f} "
                                                     f"of {total / framework.SPOT_SCALE:.2f} reference replicas of "
                                                     f"capacity on spot in {region} > "
                                                     f"{view.spot_region_max_share:.0%})"))
            rules = spec.placement
            clouds = {self.offers[k].cloud for k in mine}
            regions = {self.offers[k].region for k in mine}
            if len(clouds) < rules.min_distinct_clouds or len(regions) < rules.min_distinct_regions:
                out.append(_of(name, "isolation", f"isolation ({len(clouds)} cloud(s) and {len(regions)} region(s); "
                                                  f"needs {rules.min_distinct_clouds} and {rules.min_distinct_regions})"))
        return out

    def spot_by_region(self, name: str, weights: Mapping[str, int]) -> dict[str, int]:
        """Region -> spot share weights of ``name``'s spot replicas there (``weights``: pool key -> weights)."""
        out: dict[str, int] = {}
        for k, w in weights.items():
            offer = self.offers[k]
            if offer.tier is fleet.Tier.SPOT:
                out[offer.region] = out.get(offer.region, 0) + w
        return out

    def serving_capacity_violations(self) -> list[Violation]:
        """Serving above what a pair's replicas give, or above what a region wants."""
        out = []
        for (name, key), served in sorted(self.served_by_pair().items()):
            n = self.replicas.get((name, key), 0)
            if n and self.known(name, key) and served > n * self.units(name, key) + EPS:
                out.append(_of(name, "capacity", f"{name} on {key} serves {served:.2f} reference replicas, "
                                                 f"more than its {n} replica(s) give"))
        for (name, region), served in sorted(self.served_by_region().items()):
            dep = self.deps.get(name)
            wanted = dep.replicas_by_region.get(region, 0) if dep is not None else 0
            if served > wanted + EPS:
                out.append(_of(name, "capacity", f"{name} serves {served:.2f} in {region}, wanted {wanted}"))
        return out

    def violations(self) -> list[Violation]:
        return ([v for _, v in self.pair_violations()] + [v for _, v in self.serving_violations()]
                + [v for _, v in self.pool_violations()] + [v for *_, v in self.team_violations()]
                + [v for *_, v in self.fleet_violations()] + self.deployment_violations()
                + self.serving_capacity_violations())


class _Repairer:
    """Drops replicas from a _Plan until it breaks nothing; remembers why each deployment lost some."""

    def __init__(self, plan: _Plan):
        self.plan = plan
        self.blame: dict[str, Violation] = {}
        self.dropped = 0

    def run(self) -> None:
        plan = self.plan
        for _ in range(3):  # one pass suffices by the order of the steps; the rest is a guard
            for pair, why in plan.pair_violations():
                self.cut(pair, why, plan.replicas.get(pair, 0))
            for key, why in plan.serving_violations():
                del plan.serving[key]
                self.blame.setdefault(key[0], why)
            for key, why in plan.pool_violations():
                self.shed(why, lambda k=key: plan.pool_packed().get(k, 0) > plan.offers[k].gpus_capacity,
                          lambda k=key: [p for p in plan.replicas if p[1] == k])
            for why in self.of_kind("max_replicas"):
                self.shed(why, lambda w=why: self.still(w), lambda w=why: [p for p in plan.replicas if p[0] == w.subject])
            self.teams()
            self.fleet()
            for why in self.of_kind("spot"):
                self.shed(why, lambda w=why: self.still(w), lambda w=why: self.spot_victims(w.subject))
            for why in self.of_kind("isolation"):
                for pair in [p for p in plan.replicas if p[0] == why.deployment]:
                    self.cut(pair, why, plan.replicas[pair])
            self.fit_serving()
            if not plan.violations():
                return
        # Unreachable by construction; an empty plan breaks nothing, so it is the safe answer.
        for pair in list(plan.replicas):
            self.cut(pair, _of(pair[0], "error", "the plan could not be repaired"), plan.replicas[pair])
        plan.serving.clear()

    def spot_victims(self, name: str) -> list[Pair]:
        """The spot replicas of ``name`` to shed first: those in the regions above the per-region
        spot cap (shedding elsewhere would only raise their share), else all of them."""
        plan = self.plan
        view = plan.views[name]
        spot = [p for p in plan.replicas if p[0] == name and plan.known(*p) and plan.offers[p[1]].tier is fleet.Tier.SPOT]
        if view.spot_region_binds:
            weights = {k: n * view.spot_weight(plan.offers[k].gpu_type) for (d, k), n in plan.replicas.items()
                       if d == name and plan.known(d, k)}
            total = sum(weights.values())
            over = {r for r, w in plan.spot_by_region(name, weights).items() if not view.spot_region_ok(w, total)}
            if over:
                return [p for p in spot if plan.offers[p[1]].region in over]
        return spot

    def of_kind(self, constraint: str) -> list[Violation]:
        return [v for v in self.plan.deployment_violations() if v.constraint == constraint]

    def still(self, why: Violation) -> bool:
        """Whether the deployment still breaks the rule ``why`` names."""
        return any(v.constraint == why.constraint and v.subject == why.subject for v in self.plan.deployment_violations())

    def cut(self, pair: Pair, why: Violation, n: int = 1) -> None:
        """Drop ``n`` replicas of ``pair`` (serving there shrinks with them)."""
        plan = self.plan
        have = plan.replicas.get(pair, 0)
        n = min(n, have)
        if n <= 0:
            return
        if n == have:
            del plan.replicas[pair]
        else:
            plan.replicas[pair] = have - n
        self.dropped += n
        self.blame.setdefault(pair[0], why)
        self.fit_serving({pair})

    def shed(self, why: Violation, broken: Callable[[], bool], pairs: Callable[[], list[Pair]]) -> None:
        """One replica at a time from ``pairs()`` (the victim order) while ``broken()``."""
        while broken():
            victim = self.victim(pairs())
            if victim is None:
                return
            self.cut(victim, why)

    def victim(self, pairs: Iterable[Pair]) -> Pair | None:
        """Which replica goes first: lowest priority, then the pair with the most capacity serving
        nobody, then the priciest GPUs, then by name (deterministic)."""
        plan = self.plan
        served = plan.served_by_pair()
        ranked = sorted((plan.deps[d].priority,
                         -(plan.replicas[(d, k)] * plan.units(d, k) - served.get((d, k), 0.0)),
                         -plan.gpus(d, k) * plan.offers[k].price_per_gpu_hour_usd, d, k)
                        for d, k in pairs if plan.replicas.get((d, k), 0) > 0 and plan.known(d, k))
        return (ranked[0][3], ranked[0][4]) if ranked else None

    def teams(self) -> None:
        plan = self.plan
        while found := plan.team_violations():
            team, gpu_type, why = found[0]
            victim = self.victim(p for p in plan.replicas if plan.known(*p) and plan.deps[p[0]].team == team
                                 and gpu_type in ("", "$", plan.offers[p[1]].gpu_type))
            if victim is None:
                return
            self.cut(victim, why)

    def fleet(self) -> None:
        """Cloud quotas and the fleet budget count nodes: empty the node that holds the fewest GPUs."""
        plan = self.plan
        while found := plan.fleet_violations():
            cloud, gpu_type, why = found[0]
            packed = plan.pool_packed()
            nodes = plan.nodes(packed)
            keys = [k for k, n in nodes.items() if n > plan.offers[k].pool.nodes_min and packed.get(k, 0) > 0
                    and cloud in ("", plan.offers[k].cloud) and gpu_type in ("", plan.offers[k].gpu_type)]
            if not keys:
                return
            gpn = {k: plan.offers[k].gpus_per_node for k in keys}
            key = min(keys, key=lambda k: (packed[k] - (nodes[k] - 1) * gpn[k], k))
            while plan.nodes(plan.pool_packed())[key] == nodes[key]:
                victim = self.victim(p for p in plan.replicas if p[1] == key)
                if victim is None:
                    return
                self.cut(victim, why)

    def fit_serving(self, pairs: set[Pair] | None = None) -> None:
        """Serving scaled down to what each pair's replicas give and each region wants."""
        plan = self.plan
        served = plan.served_by_pair()
        for pair, total in served.items():
            if pairs is not None and pair not in pairs:
                continue
            name, key = pair
            n = plan.replicas.get(pair, 0)
            cap = n * plan.units(name, key) if n and plan.known(name, key) else 0.0
            if total > cap + EPS:
                self._scale([k for k in plan.serving if k[0] == name and k[2] == key], cap / total)
        if pairs is not None:
            return
        for (name, region), total in plan.served_by_region().items():
            dep = plan.deps.get(name)
            wanted = dep.replicas_by_region.get(region, 0) if dep is not None else 0
            if total > wanted + EPS:
                self._scale([k for k in plan.serving if k[0] == name and k[1] == region], wanted / total)

    def _scale(self, keys: list[tuple[str, str, str]], factor: float) -> None:
        for k in keys:
            value = self.plan.serving[k] * factor
            if value > EPS:
                self.plan.serving[k] = value
            else:
                del self.plan.serving[k]
