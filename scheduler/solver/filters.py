"""Filter plugins: each prunes candidates for one reason and says which constraint it enforces.

Order matters only for explanations (the first failing filter names the reason, as in Kubernetes):
the GPU-type filter runs first, so pools that could hold the model explain themselves by the
constraint that really stops them."""

from __future__ import annotations

from meridian import fleet, latency
from meridian.catalog import gpus
from scheduler.solver import framework


@framework.register_filter("excluded")
class ExcludedPools:
    """Pools taken out of the plan (a stock-out, with backoff before they come back)."""

    name, per_region = "excluded", False

    def key(self, view: framework.DeploymentView) -> object:
        return ()

    def filter(self, c: framework.Candidate) -> framework.Status:
        why = c.cycle.excluded_pools.get(c.pool.key)
        if why is not None:
            return framework.unschedulable("stock_out", f"pool {c.pool.key} is excluded ({why or 'stock-out'})")
        return framework.OK


@framework.register_filter("policy")
class CapacityPolicyRules:
    """The capacity policy's clouds (enabled, listed) and allowed/blocked regions."""

    name, per_region = "policy", False

    def key(self, view: framework.DeploymentView) -> object:
        return ()

    def filter(self, c: framework.Candidate) -> framework.Status:
        policy = c.cycle.policy
        if policy is None:
            return framework.OK
        rules = next((cloud for cloud in policy.clouds if cloud.name == c.pool.cloud), None)
        if rules is None:
            return framework.unschedulable("policy", f"cloud {c.pool.cloud} is not in the capacity policy")
        if not rules.enabled:
            return framework.unschedulable("policy", f"cloud {c.pool.cloud} is disabled by the capacity policy")
        if c.pool.region in rules.regions_blocked:
            return framework.unschedulable("policy", f"region {c.pool.region} is blocked by the capacity policy")
        if rules.regions_allowed and c.pool.region not in rules.regions_allowed:
            return framework.unschedulable("policy", f"region {c.pool.region} is not in {c.pool.cloud}'s allowed regions")
        return framework.OK


@framework.register_filter("placement")
class DeploymentPlacement:
    """The deployment's own placement.clouds and placement.regions."""

    name, per_region = "placement", False

    def key(self, view: framework.DeploymentView) -> object:
        p = view.demand.spec.placement
        return tuple(p.clouds), tuple(p.regions)

    def filter(self, c: framework.Candidate) -> framework.Status:
        placement = c.view.demand.spec.placement
        if placement.clouds and c.pool.cloud not in placement.clouds:
            return framework.unschedulable("placement", f"cloud {c.pool.cloud} is not in placement.clouds")
        if placement.regions and c.pool.region not in placement.regions:
            return framework.unschedulable("placement", f"region {c.pool.region} is not in placement.regions")
        return framework.OK


@framework.register_filter("spot")
class SpotAllowed:
    """Spot pools only for deployments (and a policy) that allow spot."""

    name, per_region = "spot", False

    def key(self, view: framework.DeploymentView) -> object:
        return view.spot_allowed

    def filter(self, c: framework.Candidate) -> framework.Status:
        if c.pool.tier is fleet.Tier.SPOT and not c.view.spot_allowed:
            return framework.unschedulable("spot", "spot is not allowed for this deployment")
        return framework.OK


@framework.register_filter("gpu_type")
class GpuTypeCompatible:
    """The pool's GPU type is allowed by the spec, has the memory, holds the model within the SLA,
    and a replica's GPUs fit on one node. Each rejection names what binds: ``gpu_type`` (not allowed,
    or a replica does not fit one node), ``memory`` (min_gpu_memory_gib, or the weights leave no KV
    room), ``ttft`` (the prefill alone exceeds the TTFT target) or ``tpot`` (no batch keeps TPOT)."""

    name, per_region = "gpu_type", False

    def key(self, view: framework.DeploymentView) -> object:
        res = view.demand.spec.resources
        return (tuple(res.gpu_types), res.min_gpu_memory_gib, res.gpus_per_replica, tuple(sorted(res.gpus_by_type.items())),
                tuple(sorted(view.unfit_by_type.items())), tuple(sorted(view.binding_by_type.items())))

    def filter(self, c: framework.Candidate) -> framework.Status:
        gpu_type = c.pool.gpu_type
        res = c.view.demand.spec.resources
        if res.gpu_types and gpu_type not in res.gpu_types:
            return framework.unschedulable("gpu_type", f"{gpu_type} is not in resources.gpu_types")
        known = gpus.GPUS.get(gpu_type)
        if known is None:
            return framework.Status(framework.Code.ERROR, "gpu_type", f"pool {c.pool.key}: unknown GPU type {gpu_type}")
        if res.min_gpu_memory_gib is not None and known.memory_gib < res.min_gpu_memory_gib:
            return framework.unschedulable("memory", f"{gpu_type} has {known.memory_gib:g} GiB < "
                                                     f"min_gpu_memory_gib {res.min_gpu_memory_gib}")
        unfit = c.view.unfit_by_type.get(gpu_type)
        if unfit:
            return framework.unschedulable(c.view.binding_by_type.get(gpu_type, "gpu_type"), unfit)
        need = c.view.gpus_for(gpu_type)
        if need > c.pool.gpus_per_node:
            return framework.unschedulable("gpu_type", f"a replica needs {need} {gpu_type} on one node; "
                                                       f"{c.pool.pool.instance_type} has {c.pool.gpus_per_node}")
        return framework.OK


@framework.register_filter("capacity")
class PoolCapacity:
    """The pool can hold at least one replica (free GPUs now plus growth)."""

    name, per_region = "capacity", False

    def key(self, view: framework.DeploymentView) -> object:
        res = view.demand.spec.resources
        return res.gpus_per_replica, tuple(sorted(res.gpus_by_type.items()))

    def filter(self, c: framework.Candidate) -> framework.Status:
        need = c.view.gpus_for(c.pool.gpu_type)
        if c.pool.gpus_capacity < need:
            return framework.unschedulable("capacity", f"pool {c.pool.key} can offer {c.pool.gpus_capacity} GPUs, "
                                                       f"a replica needs {need}")
        return framework.OK


@framework.register_filter("latency")
class LatencySla:
    """RTT from the client region to the pool's region within max_rtt_ms, and RTT + expected
    prefill + the cycle's headroom (the router's hop, the engine's scheduling, jitter a p99 must
    absorb) within the TTFT p99 target. When the workload declares ``prompt_tokens_p99``, the p99
    prompt's prefill must fit too, wherever some pool within the region's reach can do that
    (``Cycle.tail_possible``); where none can, the mean is judged alone (``meridian validate``
    warns of that region). Likewise the p99 queue wait of an embedding replica loaded to its
    capacity (the most a plan loads it; ``throughput.TypeFit.wait_ms``) must fit beside the mean prefill wherever
    some pool within reach keeps both (``Cycle.queue_possible``): a pool at the edge of the target
    serves the region only when nothing nearer or faster can. Measured on the SkyServe-like day: an
    embedding replica in us-central1 (132 ms from ap-northeast, 5.7 ms prefill, 150 ms target)
    passed the mean rule, and its queue at the day's peaks put 0.6% of ap-northeast's embedding
    requests over the target; one L4 in asia-northeast1 keeps them."""

    name, per_region = "latency", True

    def key(self, view: framework.DeploymentView) -> object:
        sla = view.demand.spec.sla
        return (sla.max_rtt_ms, sla.ttft_p99_ms, tuple(sorted(view.prefill_ms_by_type.items())),
                view.name if view.tail_prefill_ms_by_type or view.wait_ms_by_type else "")

    def filter(self, c: framework.Candidate) -> framework.Status:
        sla = c.view.demand.spec.sla
        try:
            rtt_ms = c.cycle.latency_map.rtt_ms(c.client_region, c.pool.region)
        except latency.UnknownRegion as exc:
            return framework.Status(framework.Code.ERROR, "latency", str(exc))
        prefill_ms = c.view.prefill_ms_by_type.get(c.pool.gpu_type, 0.0)
        headroom_ms = c.cycle.ttft_headroom_ms
        if rtt_ms + prefill_ms + headroom_ms > sla.ttft_p99_ms:
            return framework.unschedulable("ttft", f"RTT {rtt_ms:g} ms + prefill {prefill_ms:.0f} ms + headroom "
                                                   f"{headroom_ms:g} ms > TTFT p99 {sla.ttft_p99_ms:g} ms")
        if sla.max_rtt_ms is not None and rtt_ms > sla.max_rtt_ms:
            # Relaxable: when no pool is within max_rtt_ms of the region, the nearest ones that
            # still meet the TTFT target serve it (as routers fail over), reported as an SLA risk.
            return framework.unschedulable("max_rtt", f"RTT {c.client_region}->{c.pool.region} {rtt_ms:g} ms > "
                                                      f"max_rtt_ms {sla.max_rtt_ms:g}", relaxable=True)
        tail_ms = c.view.tail_prefill_ms_by_type.get(c.pool.gpu_type)
        if tail_ms is not None and rtt_ms + tail_ms + headroom_ms > sla.ttft_p99_ms \
                and c.cycle.tail_possible(c.view, c.client_region):
            tokens = c.view.demand.spec.workload.prompt_tokens_p99
            return framework.unschedulable("ttft", f"RTT {rtt_ms:g} ms + prefill of the p99 prompt ({tokens:g} tokens) "
                                                   f"{tail_ms:.0f} ms + headroom {headroom_ms:g} ms > TTFT p99 "
                                                   f"{sla.ttft_p99_ms:g} ms, and a pool within reach keeps it")
        wait_ms = c.view.wait_ms_by_type.get(c.pool.gpu_type, 0.0)
        if wait_ms > 0 and rtt_ms + prefill_ms + wait_ms + headroom_ms > sla.ttft_p99_ms \
                and c.cycle.queue_possible(c.view, c.client_region):
            return framework.unschedulable("ttft", f"RTT {rtt_ms:g} ms + prefill {prefill_ms:.0f} ms + queue wait "
                                                   f"{wait_ms:.0f} ms (p99 of a replica at capacity) + headroom "
                                                   f"{headroom_ms:g} ms > TTFT p99 {sla.ttft_p99_ms:g} ms, and a pool "
                                                   f"within reach keeps it")
        return framework.OK


def rtt_budget_ms(view: framework.DeploymentView, gpu_type: str, headroom_ms: float = 0.0) -> float:
    """The most RTT a pool of ``gpu_type`` may be from a client region for this deployment."""
    sla = view.demand.spec.sla
    budget = sla.ttft_p99_ms - view.prefill_ms_by_type.get(gpu_type, 0.0) - headroom_ms
    return min(budget, sla.max_rtt_ms) if sla.max_rtt_ms is not None else budget
