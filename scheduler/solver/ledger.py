"""Running usage of every shared limit under a set of replica counts (per pair), and the answer to "what stops
one more replica here?". The greedy baseline places with it; explanations read it."""

from __future__ import annotations

import math
from collections.abc import Mapping

from meridian import fleet
from scheduler.solver import candidates as cand_mod
from scheduler.solver import problem


class Ledger:
    def __init__(self, prob: problem.PlacementProblem, c: cand_mod.Candidates):
        self.prob, self.c = prob, c
        self.policy = prob.policy
        self.packed = [0] * len(c.groups)
        self.counts: dict[int, int] = {}
        self.replicas = [0] * len(c.views)
        # Spot share weights (DeploymentView.spot_weight) per deployment: all replicas, spot ones.
        self.units = [0] * len(c.views)
        self.spot_units = [0] * len(c.views)
        self.spot_region_units: dict[tuple[int, str], int] = {}  # (deployment, region) -> spot weights there
        self.team_gpus: dict[tuple[str, str], int] = {}
        self.team_usd: dict[str, float] = {}
        self.total_usd = sum(g.nodes_min * g.offer.price_per_node_hour_usd for g in c.groups)
        self.cloud_gpus: dict[tuple[str, str], int] = {}
        for g in c.groups:
            for key in ((g.offer.cloud, ""), (g.offer.cloud, g.offer.gpu_type)):
                self.cloud_gpus[key] = self.cloud_gpus.get(key, 0) + g.nodes_min * g.offer.gpus_per_node
        self.cloud_floor = dict(self.cloud_gpus)
        self.teams = {t.name: t for t in (self.policy.teams if self.policy else [])}
        self.clouds = {cl.name: cl for cl in (self.policy.clouds if self.policy else [])}

    def nodes(self, g: int) -> int:
        group = self.c.groups[g]
        return max(group.nodes_min, math.ceil(self.packed[g] / group.offer.gpus_per_node))

    def add(self, p: int, n: int = 1) -> None:
        """Count ``n`` more replicas (negative: fewer) on pair ``p``."""
        pair = self.c.pairs[p]
        self.counts[p] = self.counts.get(p, 0) + n
        self.hold(pair.d, pair.g, n)

    def hold(self, d: int, g: int, n: int) -> None:
        """Count ``n`` replicas of deployment ``d`` in group ``g`` (also those the model does not decide: fixed ones)."""
        group = self.c.groups[g]
        view = self.c.views[d]
        team = view.demand.team
        gpus = view.gpus_for(group.offer.gpu_type)
        before = self.nodes(g)
        self.packed[g] += n * cand_mod.packed_gpus(gpus, group.offer.gpus_per_node)
        grown = self.nodes(g) - before
        self.total_usd += grown * group.offer.price_per_node_hour_usd
        for key in ((group.offer.cloud, ""), (group.offer.cloud, group.offer.gpu_type)):
            self.cloud_gpus[key] = self.cloud_gpus.get(key, 0) + grown * group.offer.gpus_per_node
        self.replicas[d] += n
        units = n * view.spot_weight(group.offer.gpu_type)
        self.units[d] += units
        if group.offer.tier is fleet.Tier.SPOT:
            self.spot_units[d] += units
            key = (d, group.offer.region)
            self.spot_region_units[key] = self.spot_region_units.get(key, 0) + units
        for key in ((team, ""), (team, group.offer.gpu_type)):
            self.team_gpus[key] = self.team_gpus.get(key, 0) + n * gpus
        self.team_usd[team] = self.team_usd.get(team, 0.0) + n * gpus * group.offer.price_per_gpu_hour_usd

    def add_all(self, counts: Mapping[int, int]) -> None:
        for p, n in counts.items():
            if n > 0:
                self.add(p, n)

    def blocker(self, p: int, spread: bool = True) -> tuple[str, str] | None:
        """(constraint, phrase) that stops one more replica on pair ``p``, or None when it fits.
        ``spread`` False leaves out the per-region spot cap, for a caller that adds a whole set it
        checked as a set: added one by one, the first spot replicas of a valid spread set break it
        (one spot replica alone is all of the capacity in its region)."""
        pair = self.c.pairs[p]
        group = self.c.groups[pair.g]
        offer = group.offer
        view = self.c.views[pair.d]
        team = view.demand.team
        if self.packed[pair.g] + pair.gpus_packed > offer.gpus_capacity:
            where = offer.key if len(group.members) == 1 else f"{offer.cloud}/{offer.region} {offer.pool.instance_type}"
            return "capacity", f"free capacity ({where} full, {self.packed[pair.g]}/{offer.gpus_capacity} GPUs)"
        quota = self.teams.get(team)
        if quota is not None:
            if quota.max_gpus is not None and self.team_gpus.get((team, ""), 0) + pair.gpus > quota.max_gpus:
                return "team_quota", f"team quota ({team}: {self.team_gpus.get((team, ''), 0)}/{quota.max_gpus} GPUs)"
            typed = quota.max_gpus_by_type.get(offer.gpu_type)
            if typed is not None and self.team_gpus.get((team, offer.gpu_type), 0) + pair.gpus > typed:
                return "team_quota", (f"team quota ({team} {offer.gpu_type}: "
                                      f"{self.team_gpus.get((team, offer.gpu_type), 0)}/{typed} GPUs)")
        new_nodes = math.ceil((self.packed[pair.g] + pair.gpus_packed) / offer.gpus_per_node) - self.nodes(pair.g)
        new_nodes = max(0, new_nodes)
        cloud = self.clouds.get(offer.cloud)
        if cloud is not None and new_nodes:
            extra = new_nodes * offer.gpus_per_node
            for gpu_type, limit in [("", cloud.max_gpus), (offer.gpu_type, cloud.max_gpus_by_type.get(offer.gpu_type))]:
                if limit is None:
                    continue
                cap = max(limit, self.cloud_floor.get((offer.cloud, gpu_type), 0))
                used = self.cloud_gpus.get((offer.cloud, gpu_type), 0)
                if used + extra > cap:
                    what = f"{offer.cloud} {gpu_type}".strip()
                    return "cloud_quota", f"cloud quota ({what}: {used}/{limit} GPUs)"
        if quota is not None and quota.budget_per_hour_usd is not None:
            cost = pair.gpus * offer.price_per_gpu_hour_usd
            if self.team_usd.get(team, 0.0) + cost > quota.budget_per_hour_usd + 1e-6:
                return "budget", (f"team budget ({team}: ${self.team_usd.get(team, 0.0):.2f} of "
                                  f"${quota.budget_per_hour_usd:g}/h)")
        if self.policy is not None and self.policy.budget_per_hour_usd is not None and new_nodes:
            if self.total_usd + new_nodes * offer.price_per_node_hour_usd > self.policy.budget_per_hour_usd + 1e-6:
                return "budget", f"fleet budget (${self.total_usd:.2f} of ${self.policy.budget_per_hour_usd:g}/h)"
        scaling = view.demand.spec.scaling
        if self.replicas[pair.d] + 1 > scaling.max_replicas:
            return "max_replicas", f"max_replicas ({scaling.max_replicas})"
        if offer.tier is fleet.Tier.SPOT and view.spot_max_share < 1.0:
            units = view.spot_weight(offer.gpu_type)
            if not view.spot_share_ok(self.spot_units[pair.d] + units, self.units[pair.d] + units):
                return "spot", f"spot share cap ({view.spot_max_share:.0%})"
        if spread and offer.tier is fleet.Tier.SPOT and view.spot_region_binds:
            units = view.spot_weight(offer.gpu_type)
            here = self.spot_region_units.get((pair.d, offer.region), 0)
            if not view.spot_region_ok(here + units, self.units[pair.d] + units):
                return "spot", f"spot share cap per region ({view.spot_region_max_share:.0%} in {offer.region})"
        return None
