"""A synthetic but realistic fleet for the solver benchmark, seeded: real cloud regions and
instance types and prices from the catalog, RTTs from the latency map, models from the capacity
model's known table, SLAs, teams with quotas and budgets, priority classes, spot, isolation."""

from __future__ import annotations

import random

from meridian import catalog, fleet, latency
from meridian.spec import deployment as deployment_spec
from meridian.spec import policy as policy_spec
from scheduler.solver import problem

CLIENT_REGIONS = ["na-east", "na-central", "na-west", "sa-east", "eu-west", "eu-central", "ap-northeast",
                  "ap-southeast", "ap-south", "oceania"]
TEAMS = [f"team-{i}" for i in range(8)]
# (weight, model source, resources, sla, workload): a realistic mix, mostly small chat models.
MODELS = [
    (40, "meta-llama/Llama-3.1-8B-Instruct", {"gpu_types": ["L4", "A10G", "A10", "L40S", "A100-80GB", "H100"]},
     {"ttft_p99_ms": 800, "tpot_p99_ms": 100}, {"prompt_tokens_mean": 600, "output_tokens_mean": 250}),
    (15, "Qwen/Qwen2.5-7B-Instruct", {"gpu_types": ["L4", "A10G", "L40S", "A100-40GB", "H100"]},
     {"ttft_p99_ms": 600, "tpot_p99_ms": 80}, {"prompt_tokens_mean": 400, "output_tokens_mean": 200}),
    (10, "mistralai/Mistral-7B-Instruct-v0.3", {"min_gpu_memory_gib": 24},
     {"ttft_p99_ms": 1000, "tpot_p99_ms": 120}, {"prompt_tokens_mean": 800, "output_tokens_mean": 300}),
    (15, "meta-llama/Llama-3.1-70B-Instruct",
     {"gpus_per_replica": 4, "gpu_types": ["H100", "H200", "A100-80GB"], "gpus_by_type": {"A100-80GB": 8, "H200": 2}},
     {"ttft_p99_ms": 2000, "tpot_p99_ms": 80}, {"prompt_tokens_mean": 1000, "output_tokens_mean": 300}),
    (10, "Qwen/Qwen2.5-0.5B-Instruct", {"min_gpu_memory_gib": 16},
     {"ttft_p99_ms": 300, "tpot_p99_ms": 40}, {"prompt_tokens_mean": 300, "output_tokens_mean": 100}),
    (10, "BAAI/bge-large-en-v1.5", {"min_gpu_memory_gib": 16}, {"ttft_p99_ms": 150}, {"prompt_tokens_mean": 300,
                                                                                     "output_tokens_mean": 0}),
]


def cloud_regions(lat: latency.LatencyMap, offers: catalog.Catalog, count: int = 30) -> list[tuple[str, str]]:
    """(cloud, region) pairs the catalog prices, the richest offer lists first, ``count`` of them."""
    sizes: dict[tuple[str, str], int] = {}
    for o in offers.offers:
        sizes[(o.cloud, o.region)] = sizes.get((o.cloud, o.region), 0) + 1
    ranked = sorted(sizes, key=lambda k: (-sizes[k], k))
    return sorted(ranked[:count])


def pools(n_pools: int, rng: random.Random, offers: catalog.Catalog, lat: latency.LatencyMap,
          scale: float = 1.0) -> list[problem.PoolOffer]:
    regions = cloud_regions(lat, offers)
    by_region = {r: sorted((o for o in offers.offers if (o.cloud, o.region) == r), key=lambda o: o.instance_type)
                 for r in regions}
    out: list[problem.PoolOffer] = []
    i = 0
    while len(out) < n_pools:
        cloud, region = regions[i % len(regions)]
        choices = by_region[(cloud, region)]
        offer = rng.choice(choices)
        cluster = f"{cloud}-{region}-{rng.randint(0, 1)}"
        tier = rng.choices(["on_demand", "spot", "reserved"], weights=[6, 3, 1])[0]
        if tier == "reserved" and offer.gpu_count < 8:
            tier = "on_demand"
        big = offer.gpu_count >= 8
        nodes_max = round((rng.randint(2, 6) if big else rng.randint(4, 24)) * scale)
        nodes_min = nodes_max if tier == "reserved" else 0
        price = offer.spot_price_per_hour_usd if tier == "spot" else offer.price_per_hour_usd
        if tier == "reserved":
            price = round(price * 0.6, 2)
        initial = rng.randint(nodes_min, nodes_max)
        gpool = fleet.GpuPool(
            pool_id=f"p{i}-{offer.instance_type.lower().replace('_', '-').replace('.', '-')}-{tier.replace('_', '-')}",
            gpu_type=offer.gpu_type, gpu_memory_gib=offer.gpu_memory_gib, gpus_per_node=offer.gpu_count,
            instance_type=offer.instance_type, nodes_current=initial, nodes_min=nodes_min, nodes_max=nodes_max,
            gpus_free=initial * offer.gpu_count, tier=fleet.Tier(tier), price_per_node_hour_usd=price,
            quota_headroom_gpus=10_000)
        out.append(problem.PoolOffer.of(cluster, cloud, region, gpool))
        i += 1
    return out


def policy(scale: float = 1.0) -> policy_spec.CapacityPolicySpec:
    """Quotas and budgets that bind for some teams at ``scale`` x the base fleet."""
    return policy_spec.CapacityPolicySpec.model_validate({
        "clouds": [{"name": "aws", "max_gpus": round(4000 * scale), "max_gpus_by_type": {"H100": round(800 * scale)}},
                   {"name": "gcp", "max_gpus": round(3000 * scale)}, {"name": "azure", "max_gpus": round(3000 * scale)}],
        "teams": [{"name": t, "max_gpus": round((900 if i % 3 else 500) * scale),
                   "budget_per_hour_usd": (20_000 if i % 4 else 6_000) * scale}
                  for i, t in enumerate(TEAMS)],
        "priority_classes": [{"name": "critical", "value": 1000, "preempts": ["batch", "standard"]},
                             {"name": "standard", "value": 100, "preempts": ["batch"]},
                             {"name": "batch", "value": 10}],
        "spot": {"allowed": True, "max_share": 0.6},
    })


def deployments(n: int, rng: random.Random, pol: policy_spec.CapacityPolicySpec,
                demand_scale: float = 1.0) -> list[problem.DeploymentDemand]:
    out = []
    weights = [m[0] for m in MODELS]
    for i in range(n):
        _, source, resources, sla, workload = rng.choices(MODELS, weights=weights)[0]
        regions = rng.sample(CLIENT_REGIONS, rng.choice([1, 1, 2, 2, 3]))
        embedding = source.startswith("BAAI")
        iso_clouds = 2 if rng.random() < 0.15 else 1
        iso_regions = 2 if rng.random() < 0.2 else 1
        spec = deployment_spec.ModelDeploymentSpec.model_validate({
            "model": {"source": source, "served_name": f"m{i}"},
            "runtime": {"is_embedding": embedding},
            "resources": resources,
            "sla": {**sla, "client_regions": regions, "max_rtt_ms": rng.choice([None, 80, 120, 150])},
            "scaling": {"min_replicas": 1, "max_replicas": round(60 * max(1.0, demand_scale))},
            "placement": {"min_distinct_clouds": iso_clouds, "min_distinct_regions": iso_regions,
                          "spot": {"allowed": rng.random() < 0.4, "max_share": rng.choice([0.3, 0.5, 1.0])}},
            "priority_class": rng.choices(["critical", "standard", "batch"], weights=[1, 6, 3])[0],
            "workload": workload,
        })
        top = 2 if "70B" in source else 6
        wanted = {r: max(1, round(rng.randint(1, top) * demand_scale)) for r in regions}
        team = TEAMS[i % len(TEAMS)]
        value = pol.priority_of(spec.priority_class) or 100
        out.append(problem.DeploymentDemand(f"dep-{i:04d}", spec, wanted, team, spec.priority_class, value))
    return out


def make(n_deployments: int, n_pools: int, seed: int = 7, demand_scale: float = 1.0,
         pool_scale: float = 1.0) -> problem.PlacementProblem:
    """``demand_scale`` multiplies every region's demand; ``pool_scale`` every pool's node count."""
    rng = random.Random(seed)
    lat = latency.default()
    offers = catalog.instances.default()
    pol = policy(demand_scale)
    return problem.PlacementProblem(tuple(deployments(n_deployments, rng, pol, demand_scale)),
                                    tuple(pools(n_pools, rng, offers, lat, pool_scale)), pol, lat)
