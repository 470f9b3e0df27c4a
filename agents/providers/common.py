"""Pieces every provider shares: GPU names as clouds spell them -> catalog names, prices from the
offline catalog where an API gives none, and building the domain ``GpuPool``."""

from __future__ import annotations

from meridian import catalog
from meridian.fleet import models
from meridian.spec import cluster as cluster_spec

# GKE accelerator types (NodeConfig.accelerators[].accelerator_type) -> catalog GPU names.
GKE_ACCELERATORS: dict[str, str] = {
    "nvidia-l4": "L4",
    "nvidia-tesla-t4": "T4",
    "nvidia-tesla-a100": "A100-40GB",
    "nvidia-a100-80gb": "A100-80GB",
    "nvidia-h100-80gb": "H100",
    "nvidia-h100-mega-80gb": "H100",
    "nvidia-h200-141gb": "H200",
    "nvidia-b200": "B200",
}

# GKE accelerator type -> Compute Engine regional quota metric (spot/preemptible: PREEMPTIBLE_ prefix).
GKE_QUOTA_METRICS: dict[str, str] = {
    "nvidia-l4": "NVIDIA_L4_GPUS", "nvidia-tesla-t4": "NVIDIA_T4_GPUS", "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS", "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS", "nvidia-h200-141gb": "NVIDIA_H200_GPUS",
    "nvidia-b200": "NVIDIA_B200_GPUS",
}


def gke_quota_metric(accelerator_type: str, spot: bool) -> str:
    base = GKE_QUOTA_METRICS.get(accelerator_type, accelerator_type.upper().replace("-", "_") + "_GPUS")
    return ("PREEMPTIBLE_" if spot else "") + base


def gpu_type_from_aws(name: str, memory_mib: int) -> str:
    """EC2 GpuInfo names one A100 for both memory sizes; the catalog tells them apart."""
    if name.upper() == "A100":
        return "A100-80GB" if memory_mib >= 60 * 1024 else "A100-40GB"
    known = {g.upper(): g for g in catalog.gpus.names()}
    return known.get(name.upper(), name)


def gpu_type_from_gke(accelerator_type: str) -> str:
    return GKE_ACCELERATORS.get(accelerator_type, accelerator_type)


def offer(cloud: str, instance_type: str, region: str) -> catalog.InstanceOffer | None:
    return catalog.instances.default().lookup(cloud, instance_type, region)


def catalog_price(cloud: str, instance_type: str, region: str, tier: str) -> float:
    """$/node-hour from the offline catalog (spot price for spot pools); 0 when not listed."""
    o = offer(cloud, instance_type, region)
    if o is None:
        return 0.0
    return o.spot_price_per_hour_usd if tier == models.Tier.SPOT.value else o.price_per_hour_usd


def gpu_memory_gib(gpu_type: str, fallback_gib: int = 0) -> int:
    try:
        return int(catalog.gpu(gpu_type).memory_gib)
    except catalog.UnknownGpuType:
        return fallback_gib


def pool_resource(decl: cluster_spec.PoolDecl) -> str:
    """The cloud resource a pool maps to: ``resource`` when given, else the pool's name."""
    return decl.resource or decl.name


def build_pool(decl: cluster_spec.PoolDecl, *, gpu_type: str, gpus_per_node: int, gpu_memory_gib: int,
               nodes_current: int, nodes_pending: int, price_per_node_hour_usd: float,
               quota_headroom_gpus: int, zone: str, state: models.ProvisioningState,
               nodes_min: int | None = None, nodes_max: int | None = None, tier: str | None = None) -> models.GpuPool:
    """The domain pool. Bounds are the tighter of the declaration's and the cloud's; ``gpus_free``
    counts every GPU of the running nodes (the agent subtracts what its replicas hold). ``tier``:
    what the cloud says the capacity is (a spot scale set), when it says so; else the declaration's."""
    lo = decl.min_nodes if nodes_min is None else max(decl.min_nodes, nodes_min)
    hi = decl.max_nodes if nodes_max is None else min(decl.max_nodes, nodes_max)
    return models.GpuPool(
        pool_id=decl.name, gpu_type=gpu_type, gpu_memory_gib=gpu_memory_gib, gpus_per_node=gpus_per_node,
        instance_type=decl.instance_type, nodes_current=nodes_current, nodes_min=lo, nodes_max=max(lo, hi),
        gpus_free=nodes_current * gpus_per_node, tier=models.Tier(tier or decl.tier),
        price_per_node_hour_usd=price_per_node_hour_usd, quota_headroom_gpus=max(0, quota_headroom_gpus),
        provisioning_state=state, zone=zone, nodes_pending=nodes_pending,
    )


def provisioning_state(nodes_current: int, nodes_pending: int, target: int, stocked_out: bool) -> models.ProvisioningState:
    if stocked_out:
        return models.ProvisioningState.STOCKED_OUT
    if nodes_pending > 0 or target > nodes_current:
        return models.ProvisioningState.SCALING_UP
    if target < nodes_current:
        return models.ProvisioningState.SCALING_DOWN
    return models.ProvisioningState.STEADY
