"""The attainable SLO share: the most of a (deployment, client region)'s requests any fleet built
from the scenario's clusters could serve within the SLA, as the simulator models a request.

A reference beside the demand-following bound (which bounds cost, not attainment). For each
(deployment, client region): the best pool a fleet could use (every static rule of the solver passes
but the TTFT/TPOT check on the mean prompt, and the pool is within ``max_rtt_ms``:
``feasibility.servable``), with a replica there idle (no queue, no other request's prefill), so a
request meets the SLO exactly when RTT + half a decode step + its own prompt's prefill fits the TTFT
target and a lone request's TPOT fits the TPOT target (the simulator's ``perf.ReplicaModel``, with
the scenario's prompt spread, or a replayed trace's own). No online policy, and no placement, serves a larger share: when a
region's prompt tail cannot be prefilled in time on any GPU within reach, the 99.5% target is not
attainable there and the report says so beside the attainment.

A region's attainable share weighs its deployments' shares by their requests in a run."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from meridian.simulate import metrics, perf
from meridian.simulate import scenario as scenario_mod
from scheduler.control import planner
from scheduler.solver import feasibility, inputs, problem

_IDLE_RPS = 1e-9  # an arrival rate that leaves the replica idle (no queue, batch ~0)


@dataclasses.dataclass(frozen=True)
class Reach:
    """The attainable share of one (deployment, client region), and the pool that attains it
    (empty when no pool within reach can serve the deployment at all)."""

    share: float
    pool: str = ""
    gpu_type: str = ""
    rtt_ms: float = math.nan
    binding: str = ""  # what keeps the share under 1 there: "ttft" (long prompts' prefill) or "tpot"

    def to_dict(self) -> dict:
        return {"share": round(self.share, 5), "pool": self.pool, "gpu_type": self.gpu_type,
                "rtt_ms": None if math.isnan(self.rtt_ms) else round(self.rtt_ms, 1), "binding": self.binding}


def idle_share(model: perf.ReplicaModel, rtt_ms: float) -> tuple[float, float]:
    """Shares of requests an idle replica of ``model`` serves to a client ``rtt_ms`` away with the
    first token in time, and with TPOT in time (a request meets the SLO with both)."""
    steady = model.steady(_IDLE_RPS, 0.0, 1.0)
    values, probs = model.server_ttft_points(steady)
    return min(1.0, float(probs[values + rtt_ms <= model.ttft_sla_ms].sum())), model.tpot_ok(steady)


def compute(view: planner.SpecView, fidelity: scenario_mod.FidelitySettings,
            prompt_factors: Mapping[str, tuple[float, ...]] | None = None) -> dict[tuple[str, str], Reach]:
    """(deployment, client region) -> its attainable share over the pools the view's clusters declare;
    ``prompt_factors``: the replayed deployments' prompt spread (``Trace.prompt_factors``), as the
    simulator's replicas see it."""
    prompt_factors = prompt_factors or {}
    if not view.clusters or not view.deployments:
        return {}
    pools = inputs.pools_from_clusters(view.clusters.values(), view.policy)
    demands = [problem.DeploymentDemand.of(d, {}, view.policy) for d in view.deployments.values()]
    options = feasibility.servable(demands, pools, view.policy, view.latency_map)
    out: dict[tuple[str, str], Reach] = {}
    for (name, region), found in sorted(options.items()):
        spec = view.deployments[name].spec
        best = Reach(0.0)
        for o in sorted(found, key=lambda o: (o.rtt_ms, o.pool)):
            try:
                model = perf.model_for(spec, o.gpu_type, prompt_cv=fidelity.prompt_cv, tpot_sigma=fidelity.tpot_sigma,
                                       prompt_factors=prompt_factors.get(name))
            except (perf.UnknownArchitecture, ValueError):
                continue
            ttft_ok, tpot_ok = idle_share(model, o.rtt_ms)
            share = ttft_ok * tpot_ok
            if share > best.share + 1e-12:
                binding = "" if share >= 0.99995 else ("ttft" if ttft_ok <= tpot_ok else "tpot")
                best = Reach(share, o.pool, o.gpu_type, o.rtt_ms, binding)
        out[(name, region)] = best
    return out


def by_region(reach: Mapping[tuple[str, str], Reach], result: metrics.RunResult) -> dict[str, float]:
    """Client region -> attainable share, its deployments' shares weighed by their requests in
    ``result`` (the same requests its attainment counts)."""
    num: dict[str, float] = {}
    den: dict[str, float] = {}
    for (name, region), cell in result.cells.items():
        if cell.requests <= 0:
            continue
        r = reach.get((name, region))
        share = r.share if r is not None else 0.0
        num[region] = num.get(region, 0.0) + cell.requests * share
        den[region] = den.get(region, 0.0) + cell.requests
    return {region: num[region] / den[region] for region in sorted(den)}

