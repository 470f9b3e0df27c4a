"""The placement problem and its answer, as frozen values.

Units: replicas are whole model replicas; demand is counted in replicas of a deployment's reference
GPU type (what the autoscaler's concurrency target means), and a replica on another GPU type counts
for ``capacity(type) / capacity(reference)`` of one (Melange: a cheaper type may need more replicas).
Prices are USD per hour. Pools are keyed ``"<cluster_id>/<pool_id>"``."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping

import pydantic

from meridian import fleet, latency
from meridian.spec import deployment as deployment_spec
from meridian.spec import policy as policy_spec


def pool_key(cluster_id: str, pool_id: str) -> str:
    return f"{cluster_id}/{pool_id}"


@dataclasses.dataclass(frozen=True)
class DeploymentDemand:
    """One deployment to place: its spec and the replicas each client region needs (autoscaler).

    ``priority`` is the value of its priority class (higher wins when capacity is short);
    ``reference_gpu_type`` is the GPU type the demand is counted in (default: the first of
    ``spec.resources.gpu_types``, else the compatible type with the most capacity per replica).

    ``covered_regions``: the client regions that need a replica within their SLA's reach whatever
    the demand asks (coverage: the regions sending traffic, as the autoscaler saw them). The regions
    with demand and ``spec.sla.always_served_regions`` are added either way (``coverage``)."""

    name: str
    spec: deployment_spec.ModelDeploymentSpec
    replicas_by_region: Mapping[str, int]
    team: str = ""
    priority_class: str = ""
    priority: int = 100
    reference_gpu_type: str | None = None
    covered_regions: frozenset[str] | None = None

    def __post_init__(self) -> None:
        for region, count in self.replicas_by_region.items():
            if count < 0:
                raise ValueError(f"deployment {self.name}: replicas_by_region[{region!r}] must be >= 0, got {count}")
        if self.covered_regions is not None:
            unknown = sorted(set(self.covered_regions) - set(self.spec.sla.client_regions))
            if unknown:
                raise ValueError(f"deployment {self.name}: covered_regions {unknown} are not in sla.client_regions")

    @property
    def demand_replicas(self) -> int:
        return sum(self.replicas_by_region.values())

    @property
    def coverage(self) -> tuple[str, ...]:
        """Client regions that must have a replica within their SLA's reach (sorted): those named in
        ``covered_regions``, those with demand and the always-served ones."""
        named = set(self.covered_regions or ()) | {r for r, n in self.replicas_by_region.items() if n > 0}
        return tuple(sorted(named | set(self.spec.sla.always_served_regions)))

    @classmethod
    def of(cls, deployment: deployment_spec.ModelDeployment, replicas_by_region: Mapping[str, int],
           policy: policy_spec.CapacityPolicySpec | None = None,
           reference_gpu_type: str | None = None, covered_regions: Iterable[str] | None = None) -> DeploymentDemand:
        """From a ModelDeployment document, taking team and priority value from the policy."""
        spec = deployment.spec
        value = policy.priority_of(spec.priority_class) if policy is not None else None
        return cls(
            name=deployment.metadata.name,
            spec=spec,
            replicas_by_region=dict(replicas_by_region),
            team=deployment.metadata.team or "",
            priority_class=spec.priority_class,
            priority=100 if value is None else value,
            reference_gpu_type=reference_gpu_type,
            covered_regions=None if covered_regions is None else frozenset(covered_regions),
        )


@dataclasses.dataclass(frozen=True)
class PoolOffer:
    """A GPU pool as the solver sees it: where it is, what it costs, how many GPUs a plan may use.

    ``gpus_capacity`` = GPUs free now + GPUs the current placement holds there (a plan may reuse
    them) + what the pool may still grow by: the nodes ordered and not yet running, plus
    ``(nodes_max - nodes_current - nodes_pending) x gpus_per_node`` capped by the cloud quota
    headroom (which agents report beyond the nodes already ordered). ``price_per_node_hour_usd`` is
    the effective price (spot price for spot pools, the committed price for reserved pools, after
    policy overrides)."""

    cluster_id: str
    cloud: str
    region: str
    pool: fleet.GpuPool
    gpus_capacity: int
    price_per_node_hour_usd: float
    zone: str = ""

    def __post_init__(self) -> None:
        if self.gpus_capacity < 0:
            raise ValueError(f"pool {self.key}: gpus_capacity must be >= 0, got {self.gpus_capacity}")
        if self.price_per_node_hour_usd < 0:
            raise ValueError(f"pool {self.key}: price_per_node_hour_usd must be >= 0")
        if self.pool.gpus_per_node <= 0:
            raise ValueError(f"pool {self.key}: gpus_per_node must be > 0, got {self.pool.gpus_per_node}")

    @property
    def key(self) -> str:
        return pool_key(self.cluster_id, self.pool.pool_id)

    @property
    def gpu_type(self) -> str:
        return self.pool.gpu_type

    @property
    def tier(self) -> fleet.Tier:
        return self.pool.tier

    @property
    def gpus_per_node(self) -> int:
        return self.pool.gpus_per_node

    @property
    def price_per_gpu_hour_usd(self) -> float:
        return self.price_per_node_hour_usd / self.pool.gpus_per_node

    @classmethod
    def of(cls, cluster_id: str, cloud: str, region: str, pool: fleet.GpuPool, *,
           gpus_held_by_current: int = 0, price_per_node_hour_usd: float | None = None) -> PoolOffer:
        """From an agent-reported pool; ``gpus_held_by_current``: GPUs the current placement uses there."""
        # Nodes already ordered count in full: the cloud quota took them when they were ordered, and
        # agents report the headroom beyond them. Only nodes not yet ordered are capped by it.
        ordered = max(0, pool.nodes_pending)
        beyond = max(0, pool.nodes_max - pool.nodes_current - ordered)
        growth = ordered * pool.gpus_per_node + min(beyond * pool.gpus_per_node, pool.quota_headroom_gpus)
        capacity = pool.gpus_free + gpus_held_by_current + growth
        capacity = min(capacity, max(pool.nodes_max, pool.nodes_current) * pool.gpus_per_node)
        price = pool.price_per_node_hour_usd if price_per_node_hour_usd is None else price_per_node_hour_usd
        return cls(cluster_id, cloud, region, pool, max(0, capacity), price, pool.zone)


@dataclasses.dataclass(frozen=True)
class PlacementProblem:
    """Deployments x pools under a capacity policy and a latency map.

    ``excluded_pools``: pool keys to leave out (stock-outs), mapped to why (shown in explanations)."""

    deployments: tuple[DeploymentDemand, ...]
    pools: tuple[PoolOffer, ...]
    policy: policy_spec.CapacityPolicySpec | None = None
    latency_map: latency.LatencyMap = dataclasses.field(default_factory=latency.default)
    excluded_pools: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [d.name for d in self.deployments]
        if len(set(names)) != len(names):
            raise ValueError("deployment names must be unique in a placement problem")
        keys = [p.key for p in self.pools]
        if len(set(keys)) != len(keys):
            dup = sorted({k for k in keys if keys.count(k) > 1})
            raise ValueError(f"pool keys must be unique, duplicated: {dup}")


@dataclasses.dataclass(frozen=True)
class Placement:
    """Replicas per (deployment, pool key), and which pools serve each client region's demand.

    ``serving[(deployment, client_region, pool_key)]`` is the capacity that pool gives that
    region, in reference replicas (a replica may serve several regions: the latency-aware router
    sends each region to nearby replicas). It may be empty for a placement read back from agents
    (the solver then only knows where replicas are, and cannot re-solve incrementally).
    ``demand`` records what each deployment's replicas were planned for."""

    replicas: Mapping[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    serving: Mapping[tuple[str, str, str], float] = dataclasses.field(default_factory=dict)
    # deployment -> client region -> replicas wanted when this placement was planned (set by the
    # solver); an incremental re-solve leaves a deployment alone while its demand is unchanged.
    demand: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    # deployment -> the client regions it had to cover (DeploymentDemand.coverage) when planned.
    coverage: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, count in self.replicas.items():
            if count < 0:
                raise ValueError(f"placement replicas{key} must be >= 0, got {count}")

    def of(self, deployment: str) -> dict[str, int]:
        """Pool key -> replicas of ``deployment`` (non-zero only)."""
        return {p: n for (d, p), n in self.replicas.items() if d == deployment and n > 0}

    def total(self, deployment: str) -> int:
        return sum(self.of(deployment).values())

    def gpus_in(self, pool: str, gpus_per_replica: Mapping[str, int]) -> int:
        """GPUs held in ``pool`` given each deployment's GPUs per replica there."""
        return sum(n * gpus_per_replica[d] for (d, p), n in self.replicas.items() if p == pool)

    def deployments(self) -> list[str]:
        return sorted({d for (d, _), n in self.replicas.items() if n > 0})

    def to_dict(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (d, p), n in sorted(self.replicas.items()):
            if n > 0:
                out.setdefault(d, {})[p] = n
        return out

    @classmethod
    def from_counts(cls, counts: Iterable[tuple[str, str, int]]) -> Placement:
        """From (deployment, pool key, replicas) triples (repeats add up)."""
        replicas: dict[tuple[str, str], int] = {}
        for d, p, n in counts:
            replicas[(d, p)] = replicas.get((d, p), 0) + n
        return cls(replicas)


class SolveStatus(str, enum.Enum):
    # OPTIMAL and FEASIBLE plans have passed the last check (``validate``): they break no hard constraint.
    OPTIMAL = "optimal"
    FEASIBLE = "feasible"  # time limit reached (best plan found, gap to the bound reported), or a repaired plan
    NO_SOLUTION = "no_solution"  # no plan (result keeps the current one); solve() falls back to the greedy start instead
    ERROR = "error"  # the model could not be built or solved; see message


@dataclasses.dataclass(frozen=True)
class Unplaced:
    """Demand left unserved, and the constraint that stops it, in words and as a code.

    ``constraint`` is one of: ttft, tpot, max_rtt, gpu_type, memory, placement, policy, spot,
    stock_out, capacity, team_quota, cloud_quota, budget, max_replicas, isolation, priority,
    time_limit, error (see ``CONSTRAINTS``)."""

    deployment: str
    client_region: str
    replicas: float
    constraint: str
    reason: str


# What can stop demand or coverage, as ``Unplaced.constraint`` and ``Uncovered.constraint`` name it.
CONSTRAINTS = {
    "ttft": "RTT + prefill + headroom exceeds the TTFT target",
    "tpot": "no batch keeps the TPOT target on the allowed GPU types",
    "max_rtt": "no pool within max_rtt_ms",
    "gpu_type": "no allowed GPU type (or a replica does not fit one node)",
    "memory": "the model does not fit the GPU memory (or min_gpu_memory_gib)",
    "placement": "the deployment's placement.clouds / placement.regions",
    "policy": "the capacity policy's clouds and regions",
    "spot": "spot not allowed, or the spot share cap",
    "stock_out": "the pools that could serve are stocked out",
    "capacity": "the pools that could serve are full",
    "team_quota": "the team's GPU quota",
    "cloud_quota": "the cloud's GPU quota",
    "budget": "a team or fleet budget",
    "max_replicas": "scaling.max_replicas",
    "isolation": "min_distinct_clouds / min_distinct_regions cannot be met",
    "priority": "the pools are held by higher-priority deployments",
    "time_limit": "the solve ran out of time",
    "error": "the solver could not evaluate a pool",
}
# Causes no plan can change while the specs and pools stay as they are (filters and isolation).
STRUCTURAL = frozenset({"ttft", "tpot", "max_rtt", "gpu_type", "memory", "placement", "policy", "spot", "stock_out",
                        "isolation", "error"})


@dataclasses.dataclass(frozen=True)
class Uncovered:
    """A client region that must be covered (``DeploymentDemand.coverage``) with no replica of the
    plan within its SLA's reach, and the constraint that stops it (``CONSTRAINTS``). ``served_from``
    names the pool that serves it anyway beyond ``max_rtt_ms`` (constraint max_rtt: no pool is
    within it), else ""."""

    deployment: str
    client_region: str
    constraint: str
    reason: str
    served_from: str = ""


@dataclasses.dataclass(frozen=True)
class Unhedged:
    """A covered region of a deployment with ``placement.spot.hedge`` that the plan serves within
    its SLA's reach from one spot replica alone: one preemption leaves it uncovered until a
    replacement is ready."""

    deployment: str
    client_region: str
    reason: str


@dataclasses.dataclass(frozen=True)
class PlacementResult:
    status: SolveStatus
    placement: Placement
    cost_per_hour_usd: float
    objective: float
    lower_bound: float
    solve_time_s: float
    unplaced: tuple[Unplaced, ...] = ()
    mode: str = "full"
    message: str = ""
    stats: Mapping[str, float] = dataclasses.field(default_factory=dict)
    uncovered: tuple[Uncovered, ...] = ()
    unhedged: tuple[Unhedged, ...] = ()

    @property
    def gap(self) -> float:
        """Relative gap between the objective and the lower bound (0 = proven optimal)."""
        if self.objective <= 0:
            return 0.0
        return max(0.0, (self.objective - self.lower_bound) / self.objective)

    @property
    def serving(self) -> Mapping[tuple[str, str, str], float]:
        """(deployment, client region, pool key) -> reference replicas of that region's demand served there."""
        return self.placement.serving

    def unplaced_of(self, deployment: str) -> list[Unplaced]:
        return [u for u in self.unplaced if u.deployment == deployment]

    def uncovered_of(self, deployment: str) -> list[Uncovered]:
        return [u for u in self.uncovered if u.deployment == deployment]

    def unhedged_of(self, deployment: str) -> list[Unhedged]:
        return [u for u in self.unhedged if u.deployment == deployment]


class SolverSettings(pydantic.BaseModel):
    """Knobs of the solve; defaults suit a fleet of hundreds of deployments on a 2-core scheduler."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    filters: tuple[str, ...] = pydantic.Field(
        default=("gpu_type", "placement", "policy", "spot", "excluded", "capacity", "latency"),
        description="Filter plugins, by registry name, in order.")
    scores: Mapping[str, Mapping[str, float]] = pydantic.Field(
        default_factory=lambda: {"latency": {"usd_per_ms_hour": 0.002}, "spot_risk": {"usd_per_replica_hour": 0.01}},
        description="Score plugins by registry name, with their arguments.")
    replica_usd_per_hour: float = pydantic.Field(
        default=0.01, ge=0, description="Running cost of a replica beyond its GPUs: no spare replicas on sunk nodes.")
    churn_usd_per_replica: float = pydantic.Field(
        default=0.5, ge=0, description="Penalty per replica added or removed against the current placement.")
    unplaced_usd_per_replica: float = pydantic.Field(
        default=5000.0, gt=0, description="Penalty per reference replica of unserved demand, x priority weight.")
    relax_max_rtt: bool = pydantic.Field(
        default=True, description="When no pool is within a deployment's max_rtt_ms of a client region, serve that "
                                  "region from the pools that meet its TTFT target (an SLA risk `meridian plan` "
                                  "reports) rather than leave its demand unplaced.")
    ttft_headroom_ms: float = pydantic.Field(
        default=10.0, ge=0, le=10_000,
        description="TTFT p99 a placement keeps free: a pool serves a client region only when RTT + expected "
                    "prefill + this is within the TTFT target, leaving room for the router's hop, the engine's "
                    "scheduling and the jitter a p99 must absorb (an embedding model with a 150 ms target is not "
                    "served from 147 ms away).")
    demand_region_filters: bool = pydantic.Field(
        default=True, description="False: a deployment's demand may be served from any pool that passes the pair "
                                  "filters (its regions' latency rules lifted) while coverage still needs a pool "
                                  "within each covered region's SLA: the cost floor's relaxation.")
    spot_hedges: bool = pydantic.Field(
        default=True, description="Keep the deployments' spot.hedge (a second replica within reach of each "
                                  "covered region where one is spot); False: ignore it, as the cost floor and "
                                  "the simulator's demand-following bound do (they see no preemption).")
    spot_capacity_credit: float = pydantic.Field(
        default=0.85, gt=0, le=1, description="Share of a spot replica's capacity counted toward demand (SpotHedge).")
    num_search_workers: int = pydantic.Field(default=2, ge=1, le=64,
                                             description="CP-SAT workers for large (restricted) models.")
    small_model_workers: int = pydantic.Field(
        default=8, ge=1, le=64, description="CP-SAT workers for models of at most small_model_pairs pairs: its wider "
                                            "portfolio proves small instances optimal even on 2 cores (measured).")
    small_model_pairs: int = pydantic.Field(default=1500, ge=0)
    relative_gap: float = pydantic.Field(default=0.002, ge=0, le=1, description="Stop when this close to the bound.")
    aggregate_pools: bool = pydantic.Field(default=True,
                                           description="Merge identical pools of one region into one variable.")
    incremental: str = pydantic.Field(
        default="auto", pattern=r"^(auto|always|never)$",
        description="auto: with a current placement and few changed deployments, re-solve only those first.")
    incremental_max_share: float = pydantic.Field(default=0.1, gt=0, le=1)
    lp_hint: bool = pydantic.Field(default=True, description="Solve the LP relaxation first for a bound and a hint.")
    restrict_above_pairs: int = pydantic.Field(
        default=3000, ge=0, description="Above this many (deployment, pool) pairs the model is large: its steps (the "
                                        "neighbourhood search, or one CP-SAT search) see only the LP's support, the "
                                        "cheapest pairs per region, the start's pairs and isolation alternatives.")
    pairs_per_region: int = pydantic.Field(default=6, ge=1, le=1000,
                                           description="Cheapest pairs kept per (deployment, region) when restricting.")
    neighbourhood_size: int = pydantic.Field(
        default=5, ge=0, le=50,
        description="On a large model, the plan is improved by re-solving this many competing deployments at a "
                    "time, the rest held (large-neighbourhood search); 0: one CP-SAT search of the restricted model "
                    "instead.")
    neighbourhood_time_s: float = pydantic.Field(
        default=0.1, gt=0, le=10, description="CP-SAT time limit of one neighbourhood step, seconds.")
    neighbourhood_threads: int = pydantic.Field(
        default=2, ge=1, le=64, description="Neighbourhood steps run at once (on disjoint deployments, but for the "
                                            "emptying steps), each with num_search_workers / threads CP-SAT workers.")
    wide_step_share: float = pydantic.Field(
        default=0.3, ge=0, lt=1,
        description="Neighbourhood search: this share of its time goes first to one HiGHS step that "
                    "re-solves every deployment whose replicas all take several GPUs, with those whose replicas "
                    "sit on the groups they may use (when more than two ordinary steps hold; 0: no such step); "
                    "while HiGHS has no better plan yet the step may run on, to half the search time (a slower "
                    "machine's HiGHS is not cut off before its first plan). "
                    "They compete for the few multi-GPU nodes, which a step of neighbourhood_size rarely frees "
                    "together (measured, 10-s plans above the best known: 100 x 120 +2.5% -> +1.2%, 200 x 200 "
                    "+4.8% -> +2.3%, 500 x 300 +5.2% -> +3.4%; 0.2 often ended before HiGHS's first better plan).")
    backend: str = pydantic.Field(
        default="portfolio", pattern=r"^[a-z][a-z0-9_-]*$",
        description="Search backend by registry name (scheduler.solver.backends): search (CP-SAT, or the "
                    "neighbourhood search on large fleets), mip (HiGHS on the whole model), portfolio (search, then "
                    "HiGHS from its plan, the better kept; incremental re-solves use search).")
    mip_share: float = pydantic.Field(
        default=0.5, gt=0, lt=1, description="portfolio: share of the search time given to HiGHS after the search.")
    wide_step_max_pairs: int = pydantic.Field(
        default=2000, ge=0,
        description="Neighbourhood search on a restricted model (above restrict_above_pairs): the wide step's "
                    "model gets every pair its deployments have, not only the restricted set, while that is at "
                    "most this many pairs (0: never). The best plans use pairs outside the set (100 x 120: 22 "
                    "replicas of the best known plan, among them a move of two 8-GPU replicas onto A100-80GB "
                    "nodes that let an H100 and an A100-40GB node close). Measured on 2 cores, 10-s plans "
                    "against the best known, mean over search seeds: 100 x 120 (1,044 pairs against 460) "
                    "+1.40% -> +0.85%, 200 x 200 (1,587 against 667) +1.12% -> +1.10%; at 500 x 300 (2,574 "
                    "against 1,124) +1.36% -> +1.53%, HiGHS's first plan coming later, hence the limit.")
    mip_max_pairs: int = pydantic.Field(
        default=2000, ge=0,
        description="portfolio: HiGHS runs after the search only on models of at most this many pairs. On larger "
                    "ones (100 x 120: 4,465 pairs; 200 x 200: 14,140) it improved no 10-s plan in 5 s and its root "
                    "cut loop can run seconds past any time limit (measured: 1.6 s past at 100 x 120, 19 s on a 9-s "
                    "limit at 200 x 200); the mip backend ignores it.")
    seed: int = 0

    def without_filters(self, *names: str) -> SolverSettings:
        """These settings with the named filter plugins left out (e.g. "latency" for a view where any
        pool may serve any client region)."""
        return self.model_copy(update={"filters": tuple(f for f in self.filters if f not in names)})
