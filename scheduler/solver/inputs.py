"""Building solver inputs from specs: pools declared in Cluster documents priced from the catalog
and the capacity policy (overrides, spot prices, reserved commitments: ``meridian.cost.prices``),
and demands from ModelDeployments. ``meridian plan`` and tests use these before any agent reports; a running
scheduler builds PoolOffers from agent-reported GpuPools with ``PoolOffer.of``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from meridian import catalog, cost, fleet
from meridian.spec import cluster as cluster_spec
from meridian.spec import deployment as deployment_spec
from meridian.spec import policy as policy_spec
from scheduler.solver import problem


class UnknownOffer(ValueError):
    """A pool's instance type is not in the catalog for its cloud and region."""


def within_commitment(offer: problem.PoolOffer, policy: policy_spec.CapacityPolicySpec | None) -> problem.PoolOffer:
    """A reserved-tier pool priced by a commitment may not grow past the commitment's nodes: a node
    beyond them would be planned at the committed price but billed on demand. Nodes that run now
    or must run (nodes_min) stay usable, so no running replica is displaced by the cap. (Per pool:
    two pools matching one commitment each get its count.)"""
    if offer.tier is not fleet.Tier.RESERVED:
        return offer
    committed = cost.commitment(offer.cloud, offer.region, offer.pool.instance_type, policy)
    if committed is None:
        return offer
    nodes = max(committed.nodes, offer.pool.nodes_min, offer.pool.nodes_current)
    if offer.gpus_capacity <= nodes * offer.gpus_per_node:
        return offer
    return dataclasses.replace(offer, gpus_capacity=nodes * offer.gpus_per_node)


def pools_from_clusters(clusters: Iterable[cluster_spec.Cluster], policy: policy_spec.CapacityPolicySpec | None = None,
                        offers: catalog.Catalog | None = None,
                        quota_headroom_gpus: int = 10_000) -> list[problem.PoolOffer]:
    """A PoolOffer per declared pool, as if every pool ran ``initial_nodes`` with all GPUs free."""
    offers = offers or catalog.instances.default()
    out = []
    for cl in clusters:
        spec = cl.spec
        for decl in spec.pools:
            offer = offers.lookup(spec.cloud, decl.instance_type, spec.region)
            if offer is None:
                raise UnknownOffer(f"cluster {cl.metadata.name} pool {decl.name}: {decl.instance_type} is not in "
                                   f"the catalog for {spec.cloud}/{spec.region}")
            price = cost.price_per_node_hour(spec.cloud, spec.region, decl.instance_type, decl.tier, offer, policy)
            pool = fleet.GpuPool(
                pool_id=decl.name, gpu_type=offer.gpu_type, gpu_memory_gib=offer.gpu_memory_gib,
                gpus_per_node=offer.gpu_count, instance_type=decl.instance_type,
                nodes_current=decl.initial_nodes, nodes_min=decl.min_nodes, nodes_max=decl.max_nodes,
                gpus_free=decl.initial_nodes * offer.gpu_count, tier=fleet.Tier(decl.tier),
                price_per_node_hour_usd=price, quota_headroom_gpus=quota_headroom_gpus,
                zone=decl.zone or spec.zone or "")
            out.append(within_commitment(problem.PoolOffer.of(cl.metadata.name, spec.cloud, spec.region, pool), policy))
    return out


def demands(deployments: Iterable[deployment_spec.ModelDeployment],
            replicas_by_region: Mapping[str, Mapping[str, int]],
            policy: policy_spec.CapacityPolicySpec | None = None) -> list[problem.DeploymentDemand]:
    """DeploymentDemands from documents and the autoscaler's per-region replicas (by deployment name;
    a deployment absent from the mapping asks for min_replicas, spread over its client regions)."""
    out = []
    for dep in deployments:
        wanted = replicas_by_region.get(dep.metadata.name)
        if wanted is None:
            regions = dep.spec.sla.client_regions
            base = {r: 0 for r in regions}
            for i in range(dep.spec.scaling.min_replicas):
                base[regions[i % len(regions)]] += 1
            wanted = base
        out.append(problem.DeploymentDemand.of(dep, wanted, policy))
    return out
