"""What the fleet bills, from what the scheduler knows: the pools and replicas agents report, priced
as the solver prices them (``meridian.cost.prices``: catalog, capacity policy, reserved
commitments), each replica's owner from its ModelDeployment (served model, team), tokens served
from the routers' traffic reports. The arithmetic is ``meridian.cost``'s; this module only builds
its inputs, and ``CostMeter`` keeps the bill over time for ``GET /v1/cost``.

Pools of a lost cluster are not in the bill (the scheduler no longer hears from them; their cloud
may still bill their nodes): ``bill_now`` gives them apart, as last reported."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from meridian import catalog, cost
from scheduler.control import fleet as fleet_mod
from scheduler.control import planner
from scheduler.solver import problem
from scheduler.state import records


@dataclasses.dataclass(frozen=True)
class FleetBill:
    """``reachable``: the bill of every cluster the scheduler hears from. ``unreachable``: lost
    clusters' pools as last reported (not in the bill)."""

    reachable: cost.Bill
    unreachable: cost.Bill
    lost_clusters: tuple[str, ...]


def bill_now(snapshot: fleet_mod.FleetSnapshot, specs: planner.SpecView,
             offers: catalog.Catalog | None = None) -> FleetBill:
    offers = offers or catalog.instances.default()
    live = [c for _, c in sorted(snapshot.clusters.items()) if c.live]
    lost = [c for _, c in sorted(snapshot.clusters.items()) if not c.live]
    return FleetBill(cost.bill(*_inputs(live, specs, offers)), cost.bill(*_inputs(lost, specs, offers)),
                     tuple(c.cluster_id for c in lost))


def _inputs(clusters: Iterable[fleet_mod.ClusterView], specs: planner.SpecView,
            offers: catalog.Catalog) -> tuple[list[cost.Pool], list[cost.Replica]]:
    pools, replicas = [], []
    for c in clusters:
        ident = c.identity
        for _, p in sorted(c.pools.items()):
            key = problem.pool_key(c.cluster_id, p.pool_id)
            offer = offers.lookup(ident.cloud.value, p.instance_type, ident.region)
            price = cost.node_price(ident.cloud.value, ident.region, p.instance_type, p.tier.value, offer, specs.policy,
                                    reported_usd=p.price_per_node_hour_usd)
            where = cost.Where(key, c.cluster_id, ident.cloud.value, ident.region, p.pool_id, p.gpu_type, p.tier.value)
            pools.append(cost.Pool(where, max(0, p.gpus_per_node), max(0, p.nodes_current) + max(0, p.nodes_pending),
                                   price, max(0, p.nodes_pending), p.instance_type))
        for _, r in sorted(c.replicas.items()):
            replicas.append(cost.Replica(r.replica_id, problem.pool_key(c.cluster_id, r.pool_id), r.gpu_count,
                                         owner(r.deployment, r.served_model_name, specs)))
    return pools, replicas


def owner(deployment: str, served_model_name: str, specs: planner.SpecView) -> cost.Owner:
    """The replica's served model (its report's, else its spec's) and its deployment's team."""
    doc = specs.deployments.get(deployment)
    model = served_model_name or (doc.spec.model.served_name if doc is not None else deployment)
    return cost.Owner(model, deployment, (doc.metadata.team or "") if doc is not None else "")


def tokens_per_s(demand: Iterable[records.Demand]) -> dict[str, cost.Tokens]:
    """Tokens served per second by served model, from the routers' current traffic reports."""
    out: dict[str, cost.Tokens] = {}
    for d in demand:
        rate = cost.Tokens(d.requests_per_s * d.prompt_tokens_per_request,
                           d.requests_per_s * d.completion_tokens_per_request)
        out[d.model] = out.get(d.model, cost.Tokens()) + rate
    return out


def by_cloud_tier_part(b: cost.Bill) -> dict[tuple[str, str, str], float]:
    """The bill ($/h) by (cloud, tier, part), part "shares" or "idle": the bill gauge's label sets."""
    out: dict[tuple[str, str, str], float] = {}
    for p in b.parts:
        key = (p.where.cloud, p.where.tier, "idle" if p.owner is None else "shares")
        out[key] = out.get(key, 0.0) + p.usd
    for line in b.pools:  # a pool with no GPU (a bill but no part) still shows
        out.setdefault((line.pool.where.cloud, line.pool.where.tier, "idle"), 0.0)
    return out


class CostMeter:
    """The bill over time while this node leads: fed an observation each control period
    (``observe``), reset when leadership starts (a new term learns the fleet afresh)."""

    def __init__(self) -> None:
        self._meter: cost.Meter | None = None

    def reset(self) -> None:
        self._meter = None

    def observe(self, at_s: float, bill: cost.Bill, tokens: Mapping[str, cost.Tokens]) -> None:
        if self._meter is None:
            self._meter = cost.Meter()
        self._meter.observe(at_s, bill, tokens)

    def window(self, now_s: float) -> cost.Window | None:
        """From the term's first observation until ``now_s`` (None before any)."""
        return self._meter.window(now_s) if self._meter is not None else None
