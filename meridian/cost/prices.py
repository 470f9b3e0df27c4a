"""Which price a pool's nodes pay, as the clouds bill them: the tier's price from the catalog or the
capacity policy's override, a reserved commitment's price for the nodes it covers and the on-demand
price beyond them.

The solver's pool offers, the scheduler's bill and the simulator's clusters all price nodes here, so
a plan's cost and the bill use one price for one node."""

from __future__ import annotations

import dataclasses

from meridian import catalog
from meridian.spec import policy as policy_spec


@dataclasses.dataclass(frozen=True)
class Price:
    """How one pool's nodes bill per hour: ``per_node_hour_usd`` each, except that a reserved pool
    under a commitment (``committed_nodes``) pays that price for at most the committed nodes and
    ``beyond_commitment_per_node_hour_usd`` (the on-demand price) for every node beyond them."""

    per_node_hour_usd: float
    committed_nodes: int | None = None
    beyond_commitment_per_node_hour_usd: float = 0.0

    def __post_init__(self) -> None:
        if self.per_node_hour_usd < 0 or self.beyond_commitment_per_node_hour_usd < 0:
            raise ValueError(f"prices must be >= 0, got {self.per_node_hour_usd} and "
                             f"{self.beyond_commitment_per_node_hour_usd}")
        if self.committed_nodes is not None and self.committed_nodes < 0:
            raise ValueError(f"committed_nodes must be >= 0, got {self.committed_nodes}")

    def usd_per_hour(self, nodes: float) -> float:
        """What ``nodes`` nodes of the pool bill per hour (node-hours x price)."""
        if nodes <= 0:
            return 0.0
        if self.committed_nodes is None or nodes <= self.committed_nodes:
            return nodes * self.per_node_hour_usd
        return (self.committed_nodes * self.per_node_hour_usd
                + (nodes - self.committed_nodes) * self.beyond_commitment_per_node_hour_usd)


def commitment(cloud: str, region: str, instance_type: str,
               policy: policy_spec.CapacityPolicySpec | None) -> policy_spec.ReservedCommitment | None:
    """The policy's reserved commitment for this instance type in this region, if any."""
    for r in policy.reserved if policy is not None else ():
        if (r.cloud, r.region, r.instance_type) == (cloud, region, instance_type):
            return r
    return None


def price_per_node_hour(cloud: str, region: str, instance_type: str, tier: str,
                        offer: catalog.InstanceOffer, policy: policy_spec.CapacityPolicySpec | None) -> float:
    """Effective hourly node price: a reserved commitment's price, else a policy override, else the
    catalog's on-demand or spot price."""
    if policy is not None:
        committed = commitment(cloud, region, instance_type, policy) if tier == "reserved" else None
        if committed is not None:
            return committed.price_per_hour_usd
        for o in policy.price_overrides:
            if o.cloud == cloud and o.instance_type == instance_type and o.region in (None, region):
                chosen = o.spot_price_per_hour_usd if tier == "spot" else o.price_per_hour_usd
                if chosen is not None:
                    return chosen
    return offer.spot_price_per_hour_usd if tier == "spot" else offer.price_per_hour_usd


def node_price(cloud: str, region: str, instance_type: str, tier: str, offer: catalog.InstanceOffer | None,
               policy: policy_spec.CapacityPolicySpec | None, *, reported_usd: float = 0.0) -> Price:
    """How this pool's nodes bill: the effective price of its tier; for a reserved pool under a
    commitment, the committed price up to the commitment's nodes (per pool, as the solver counts a
    commitment) and the on-demand price beyond. An instance the catalog does not list bills at
    ``reported_usd`` (what its agent reports)."""
    if offer is None:
        return Price(max(0.0, reported_usd))
    price = price_per_node_hour(cloud, region, instance_type, tier, offer, policy)
    committed = commitment(cloud, region, instance_type, policy) if tier == "reserved" else None
    if committed is None:
        return Price(price)
    return Price(price, committed.nodes, price_per_node_hour(cloud, region, instance_type, "on_demand", offer, policy))
