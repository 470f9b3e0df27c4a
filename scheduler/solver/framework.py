"""The plugin framework, after Kubernetes' scheduler framework: Filter plugins prune (deployment,
pool) pairs, and (deployment, client region, pool) triples, each verdict a ``Status`` that carries
the constraint and a reason; Score plugins add a per-replica cost in USD/h to a candidate. Plugins
register a factory by name; each factory validates its own typed arguments at construction.

The decision itself is not made here: the surviving candidates and their scores become one global
optimisation (``scheduler.solver.formulation``)."""

from __future__ import annotations

import dataclasses
import enum
import fractions
import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from meridian import latency
from meridian.spec import policy as policy_spec
from scheduler.solver import problem


class Code(str, enum.Enum):
    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"  # a verdict: this candidate cannot hold the deployment (reasons say why)
    ERROR = "error"  # the plugin could not decide (bad input); the candidate is dropped and reported


@dataclasses.dataclass(frozen=True)
class Status:
    code: Code = Code.SUCCESS
    constraint: str = ""
    reason: str = ""
    # A rejection that is lifted for a (deployment, client region) no candidate passes without it:
    # then the region is served beyond it rather than not at all (``max_rtt_ms``).
    relaxable: bool = False

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


OK = Status()


def unschedulable(constraint: str, reason: str, *, relaxable: bool = False) -> Status:
    return Status(Code.UNSCHEDULABLE, constraint, reason, relaxable)


SPOT_SCALE = 10_000  # spot share weights: reference replicas of capacity in 1/10000ths


@dataclasses.dataclass(frozen=True)
class DeploymentView:
    """Per-deployment facts every plugin needs, computed once per solve (Kubernetes' CycleState).

    ``units_by_type``: what one replica on a GPU type counts for, in reference replicas;
    ``prefill_ms_by_type``: expected prefill time of the workload's prompt (0 when unknown);
    ``wait_ms_by_type``: p99 wait before prefill on a replica loaded to its capacity (the most load
    a plan gives it; ``throughput.TypeFit.wait_ms``; absent: 0);
    ``unfit_by_type``: why a GPU type cannot hold the model (absent when it can), and
    ``binding_by_type`` the constraint code of that reason (memory, ttft, tpot, gpu_type)."""

    demand: problem.DeploymentDemand
    reference_gpu_type: str
    units_by_type: Mapping[str, float]
    prefill_ms_by_type: Mapping[str, float]
    unfit_by_type: Mapping[str, str]
    spot_allowed: bool
    spot_max_share: float
    binding_by_type: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The most of the capacity spot replicas in one region may hold (placement.spot.max_share_per_region).
    spot_region_max_share: float = 1.0
    # Prefill of the workload's prompt_tokens_p99 per GPU type (empty when the workload gives none).
    tail_prefill_ms_by_type: Mapping[str, float] = dataclasses.field(default_factory=dict)
    wait_ms_by_type: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.demand.name

    def gpus_for(self, gpu_type: str) -> int:
        return self.demand.spec.resources.gpus_for(gpu_type)

    def loaded_ms(self, gpu_type: str) -> float | None:
        """What a replica on ``gpu_type`` adds to TTFT at its capacity: the mean prompt's prefill +
        the p99 queue wait (``wait_ms_by_type``); None for a type it cannot use or has no figure for."""
        if gpu_type not in self.prefill_ms_by_type or gpu_type in self.unfit_by_type:
            return None
        return self.prefill_ms_by_type[gpu_type] + self.wait_ms_by_type.get(gpu_type, 0.0)

    def capacity(self, gpu_type: str) -> float:
        """Reference replicas one replica on ``gpu_type`` serves, without the spot credit: what the
        spot share cap weighs (one H100 replica of a small model may serve as much as 40 on L4s)."""
        return self.units_by_type.get(gpu_type, 1.0)

    def spot_weight(self, gpu_type: str) -> int:
        """``capacity`` as a whole number of 1/SPOT_SCALE reference replicas: the spot share cap is
        checked on these integers everywhere (model row, greedy, dive, last check), so a plan
        exactly at the cap is inside it for all of them."""
        return max(1, round(self.capacity(gpu_type) * SPOT_SCALE))

    @functools.cached_property
    def spot_share_ratio(self) -> tuple[int, int]:
        """The spot share cap as a fraction (numerator, denominator): 0.3 is (3, 10). Cached: the
        model asks once per pair."""
        share = fractions.Fraction(self.spot_max_share if self.spot_allowed else 0.0).limit_denominator(1000)
        return share.numerator, share.denominator

    def spot_coefficient(self, gpu_type: str, spot: bool) -> int:
        """One replica's coefficient in the row ``sum coef x <= 0`` that is the spot share cap:
        weight x (denominator x is_spot - numerator), exact integers."""
        num, den = self.spot_share_ratio
        return self.spot_weight(gpu_type) * ((den if spot else 0) - num)

    def spot_share_ok(self, spot_weight: int, total_weight: int) -> bool:
        """Whether ``spot_weight`` of ``total_weight`` (sums of ``spot_weight`` over spot replicas
        and over all replicas) keeps the cap: spot <= share x total, exactly."""
        num, den = self.spot_share_ratio
        return spot_weight * den <= num * total_weight

    @functools.cached_property
    def spot_region_ratio(self) -> tuple[int, int]:
        """The per-region spot cap as a fraction (numerator, denominator)."""
        share = fractions.Fraction(self.spot_region_max_share).limit_denominator(1000)
        return share.numerator, share.denominator

    @property
    def spot_region_binds(self) -> bool:
        """Whether the per-region spot cap can bind: spot is allowed and the overall cap is above it
        (spot in one region <= all spot <= max_share x capacity otherwise keeps it, exactly)."""
        if not self.spot_allowed:
            return False
        num, den = self.spot_region_ratio
        snum, sden = self.spot_share_ratio
        return num * sden < snum * den

    def spot_region_coefficient(self, gpu_type: str, spot_here: bool) -> int:
        """One replica's coefficient in the row ``sum coef x <= 0`` that caps the spot capacity in one
        region: weight x (denominator x is_spot_in_that_region - numerator), exact integers."""
        num, den = self.spot_region_ratio
        return self.spot_weight(gpu_type) * ((den if spot_here else 0) - num)

    def spot_region_ok(self, region_spot_weight: int, total_weight: int) -> bool:
        """Whether ``region_spot_weight`` (``spot_weight`` summed over the spot replicas of one region)
        of ``total_weight`` (over all replicas) keeps the per-region cap, exactly."""
        num, den = self.spot_region_ratio
        return region_spot_weight * den <= num * total_weight


@dataclasses.dataclass(frozen=True)
class Cycle:
    """What is shared by all plugins in one solve. ``pools`` and ``pair_filters`` (the filters that
    judge a pool for a deployment, whatever the client region) let a per-region filter ask whether
    some pool of the fleet could do better (``tail_possible``)."""

    policy: policy_spec.CapacityPolicySpec | None
    latency_map: latency.LatencyMap
    excluded_pools: Mapping[str, str]
    ttft_headroom_ms: float = 0.0  # TTFT p99 kept free of RTT + prefill (SolverSettings.ttft_headroom_ms)
    pools: tuple[problem.PoolOffer, ...] = dataclasses.field(default=(), compare=False, repr=False)
    pair_filters: tuple[Filter, ...] = dataclasses.field(default=(), compare=False, repr=False)
    memo: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, prob: problem.PlacementProblem, settings: problem.SolverSettings) -> Cycle:
        pair = tuple(f for f in make_filters(settings.filters) if not f.per_region)
        return cls(prob.policy, prob.latency_map, prob.excluded_pools, settings.ttft_headroom_ms,
                   tuple(prob.pools), pair)

    def tail_possible(self, view: DeploymentView, region: str) -> bool:
        """Whether some pool passing every pair filter, within the SLA's max_rtt_ms of ``region``,
        prefills the workload's p99 prompt within the TTFT target (memoised per solve)."""
        return self._some_pool_keeps("tail", view, region, view.tail_prefill_ms_by_type.get)

    def queue_possible(self, view: DeploymentView, region: str) -> bool:
        """Whether some pool passing every pair filter, within the SLA's max_rtt_ms of ``region``,
        keeps RTT + prefill + the p99 queue wait of a replica at its capacity + the headroom within
        the TTFT target (memoised per solve)."""
        return self._some_pool_keeps("queue", view, region, view.loaded_ms)

    def _some_pool_keeps(self, what: str, view: DeploymentView, region: str,
                         server_ms: Callable[[str], float | None]) -> bool:
        """Whether some pool passing every pair filter, within the SLA's max_rtt_ms of ``region``,
        keeps RTT + ``server_ms(its GPU type)`` (None: the type is not judged) + the headroom
        within the TTFT target; memoised per (``what``, deployment, region) for the solve."""
        key = (what, view.name, region)
        hit = self.memo.get(key)
        if hit is None:
            sla = view.demand.spec.sla
            hit = False
            for pool in self.pools:
                server = server_ms(pool.gpu_type)
                if server is None:
                    continue
                try:
                    rtt = self.latency_map.rtt_ms(region, pool.region)
                except latency.UnknownRegion:
                    continue
                if (sla.max_rtt_ms is not None and rtt > sla.max_rtt_ms) \
                        or rtt + server + self.ttft_headroom_ms > sla.ttft_p99_ms:
                    continue
                if all(f.filter(Candidate(self, view, pool)).ok for f in self.pair_filters):
                    hit = True
                    break
            self.memo[key] = hit
        return hit


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A deployment on a pool, serving ``client_region`` ("" while filtering the pair itself)."""

    cycle: Cycle
    view: DeploymentView
    pool: problem.PoolOffer
    client_region: str = ""


class Filter(Protocol):
    """Prunes candidates. ``per_region`` filters run once per (deployment, region, pool) triple;
    the others once per (deployment, pool) pair.

    A plugin may define ``key(view) -> hashable``: the deployment facts its verdict depends on.
    Deployments with equal keys then share its verdicts (a fleet runs many deployments of a few
    models); without ``key`` it is asked for every deployment."""

    name: str
    per_region: bool

    def filter(self, candidate: Candidate) -> Status: ...


class Score(Protocol):
    """Weighs a surviving (deployment, region, pool) triple: extra USD/h per replica placed there.
    ``key(view)`` as for filters."""

    name: str

    def score(self, candidate: Candidate) -> float: ...


FilterFactory = Callable[..., Filter]
ScoreFactory = Callable[..., Score]
FILTERS: dict[str, FilterFactory] = {}
SCORES: dict[str, ScoreFactory] = {}


class UnknownPlugin(KeyError):
    """A plugin name not in the registry."""


def register_filter(name: str) -> Callable[[FilterFactory], FilterFactory]:
    def wrap(factory: FilterFactory) -> FilterFactory:
        FILTERS[name] = factory
        return factory
    return wrap


def register_score(name: str) -> Callable[[ScoreFactory], ScoreFactory]:
    def wrap(factory: ScoreFactory) -> ScoreFactory:
        SCORES[name] = factory
        return factory
    return wrap


def make_filters(names: tuple[str, ...], args: Mapping[str, Mapping[str, Any]] | None = None) -> list[Filter]:
    """Filter plugins by name, in order, each built with its arguments (validated by the plugin)."""
    out = []
    for name in names:
        if name not in FILTERS:
            raise UnknownPlugin(f"unknown filter plugin {name!r}; registered: {', '.join(sorted(FILTERS))}")
        out.append(FILTERS[name](**dict((args or {}).get(name, {}))))
    return out


def make_scores(config: Mapping[str, Mapping[str, Any]]) -> list[Score]:
    """Score plugins from {name: arguments}."""
    out = []
    for name, plugin_args in config.items():
        if name not in SCORES:
            raise UnknownPlugin(f"unknown score plugin {name!r}; registered: {', '.join(sorted(SCORES))}")
        out.append(SCORES[name](**dict(plugin_args)))
    return out
