"""Can a deployment's SLA be met from a client region at all, and if not, what comes nearest?

One computation for ``meridian validate`` (offline, from the files given), the admin API's apply
(an SLA no declared capacity can meet is refused unless accepted knowingly) and the solver's
explanations (``explain``): the same filter plugins the solver prunes with, on the pools at hand,
per (deployment, client region). A region's SLA can be met when some pool passes every pair filter
(GPU type, memory, TTFT and TPOT on that type, placement, policy, spot) and, from that region, the
latency filter (RTT + the capacity model's prefill + ``ttft_headroom_ms`` within ``ttft_p99_ms``,
RTT within ``max_rtt_ms``). Otherwise the verdict names the binding constraint and the nearest miss:

    ap-northeast: best is H100 in asia-northeast1 (gcp-ane1/h100): 2 ms RTT + 17 ms prefill of 512
    tokens + 10 ms headroom > TTFT 1 ms

Binding constraint, in order: a pool that fails only the SLA (TTFT, TPOT, max_rtt_ms) is the
nearest miss; among those, the one with the least expected TTFT (or TPOT, when no type keeps it)
is named. When every pool fails some other rule too, the most common of those rules is named
(GPU type, memory, placement, policy, spot, stock-out, capacity).

Pure: pools, views and filters in, verdicts out."""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Iterable, Sequence

from meridian import latency, spec
from meridian.spec import cluster as cluster_spec
from meridian.spec import deployment as deployment_spec
from meridian.spec import policy as policy_spec
from scheduler.solver import candidates as cand_mod
from scheduler.solver import framework, inputs, problem, throughput

ACCEPT_FLAG = "--allow-unmet-sla"

# The filters that decide whether an SLA can be met with declared capacity: capacity now and
# stock-outs are the running fleet's state, not the SLA's.
STATIC_FILTERS = ("gpu_type", "placement", "policy", "spot", "latency")
SLA_CODES = frozenset({"ttft", "tpot", "max_rtt"})


@dataclasses.dataclass(frozen=True)
class Option:
    """One pool as a way to serve a client region: where it is and what the SLA would see."""

    pool: str  # pool key (cluster/pool)
    cloud: str
    region: str
    gpu_type: str
    rtt_ms: float
    prefill_ms: float
    tpot_min_ms: float

    @property
    def expected_ttft_ms(self) -> float:
        """RTT + the capacity model's prefill of the workload's mean prompt (no queueing)."""
        return self.rtt_ms + self.prefill_ms


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether ``deployment``'s SLA can be met from ``client_region`` by some pool; when not,
    ``constraint`` (a ``problem.CONSTRAINTS`` code) and ``message`` say what binds and what comes
    nearest (``best``). ``beyond_max_rtt``: no pool is within max_rtt_ms, but one beyond it meets
    the TTFT target (the solver serves the region from there, as an SLA risk)."""

    deployment: str
    client_region: str
    ok: bool
    constraint: str = ""
    message: str = ""
    best: Option | None = None
    beyond_max_rtt: bool = False
    # When the SLA can be met for the mean prompt but no pool it may use prefills the workload's
    # prompt_tokens_p99 in time: why about 1% of requests or more will miss TTFT (a warning)
    tail: str = ""
    # When an embedding model's region is served only from pools where its queue at capacity breaks
    # TTFT (the latency filter then judges the mean alone): why requests miss it under load (a warning)
    queue: str = ""

    def warnings(self) -> list[str]:
        """Its warnings as ``meridian validate`` prints them and ``meridian apply`` returns them:
        the tail's and the queue's, each prefixed with the deployment."""
        return [f"{self.deployment}/{why}" for why in (self.tail, self.queue) if why]

    def to_dict(self) -> dict:
        best = dataclasses.asdict(self.best) if self.best is not None else None
        if best is not None:
            best["expected_ttft_ms"] = round(self.best.expected_ttft_ms, 1)
        return {"deployment": self.deployment, "client_region": self.client_region, "ok": self.ok,
                "constraint": self.constraint, "message": self.message, "best": best,
                "beyond_max_rtt": self.beyond_max_rtt, "tail": self.tail, "queue": self.queue}


def check(deployments: Iterable[problem.DeploymentDemand], pools: Sequence[problem.PoolOffer],
          policy: policy_spec.CapacityPolicySpec | None, latency_map: latency.LatencyMap,
          settings: problem.SolverSettings | None = None) -> list[Verdict]:
    """A verdict per (deployment, client region of its SLA), over ``pools`` with the static filters
    (``STATIC_FILTERS``: GPU type and SLA, placement, policy, spot, latency)."""
    settings = settings or problem.SolverSettings()
    prob = problem.PlacementProblem(tuple(deployments), tuple(pools), policy, latency_map, {})
    cycle = framework.Cycle.of(prob, settings)
    plugins = framework.make_filters(tuple(f for f in STATIC_FILTERS if f in settings.filters))
    out = []
    for demand in prob.deployments:
        view = cand_mod.make_view(demand, policy)
        for region in demand.spec.sla.client_regions:
            out.append(assess(cycle, view, pools, plugins, region, settings.relax_max_rtt))
    return out


def assess(cycle: framework.Cycle, view: framework.DeploymentView, pools: Sequence[problem.PoolOffer],
           plugins: Sequence[framework.Filter], region: str, relax_max_rtt: bool = True) -> Verdict:
    """The verdict for ``view`` serving ``region`` from ``pools`` under ``plugins`` (every status
    of every pool is read, not only the first failing one, so the nearest miss is known)."""
    sla = view.demand.spec.sla
    name = view.name
    headroom = cycle.ttft_headroom_ms
    if not pools:
        return Verdict(name, region, False, "capacity", f"{region}: no pool is declared")
    fails: dict[str, list[framework.Status]] = {}
    options: dict[str, Option] = {}
    for pool in pools:
        statuses = [s for s in (plugin.filter(framework.Candidate(cycle, view, pool, region if plugin.per_region else ""))
                                for plugin in plugins) if not s.ok]
        fails[pool.key] = statuses
        fit = view.prefill_ms_by_type.get(pool.gpu_type, 0.0)
        options[pool.key] = Option(pool.key, pool.cloud, pool.region, pool.gpu_type, _rtt(cycle, region, pool.region),
                                   fit, _tpot_min(view, pool.gpu_type))
    errors = [s for ss in fails.values() for s in ss if s.code is framework.Code.ERROR]
    if errors:
        return Verdict(name, region, False, "error", f"{region}: cannot evaluate pools: {errors[0].reason}")
    passing = [k for k, ss in fails.items() if not ss]
    if passing:
        best = min((options[k] for k in passing), key=_rank)
        usable = [options[k] for k in passing]
        return Verdict(name, region, True, best=best, tail=_tail(view, usable, region, headroom),
                       queue=_queue(view, usable, region, headroom))
    # Pools that fail only the SLA: the nearest misses.
    sla_only = {k: {s.constraint for s in ss} for k, ss in fails.items() if all(s.constraint in SLA_CODES for s in ss)}
    beyond = [k for k, codes in sla_only.items() if codes == {"max_rtt"}]
    if beyond:
        best = min((options[k] for k in beyond), key=_rank)
        text = (f"{region}: best is {_where(best)}: {ms(best.rtt_ms)} ms RTT > max_rtt_ms {sla.max_rtt_ms:g} "
                f"(its TTFT would hold: {_ttft_terms(best, view, headroom)} <= TTFT {sla.ttft_p99_ms:g} ms)")
        return Verdict(name, region, False, "max_rtt", text, best, beyond_max_rtt=relax_max_rtt,
                       tail=_tail(view, [options[k] for k in beyond], region, headroom),
                       queue=_queue(view, [options[k] for k in beyond], region, headroom))
    tpot_only = [k for k, codes in sla_only.items() if "tpot" in codes]
    ttft_only = [k for k, codes in sla_only.items() if "tpot" not in codes]
    if ttft_only:
        best = min((options[k] for k in ttft_only), key=_rank)
        text = f"{region}: best is {_where(best)}: {_ttft_terms(best, view, headroom)} > TTFT {sla.ttft_p99_ms:g} ms"
        return Verdict(name, region, False, "ttft", text, best)
    if tpot_only:
        best = min((options[k] for k in tpot_only), key=lambda o: (o.tpot_min_ms, o.expected_ttft_ms, o.pool))
        text = (f"{region}: best is {_where(best)}: TPOT {ms(best.tpot_min_ms)} ms for a lone request > TPOT "
                f"{sla.tpot_p99_ms:g} ms")
        return Verdict(name, region, False, "tpot", text, best)
    # Every pool breaks a rule besides the SLA: the most common one binds (SLA misses set aside).
    counts: collections.Counter = collections.Counter()
    examples: dict[str, set[str]] = {}
    for ss in fails.values():
        for s in ss:
            if s.constraint not in SLA_CODES:
                counts[s.constraint] += 1
                examples.setdefault(s.constraint, set()).add(s.reason)
    constraint = max(counts, key=lambda k: (counts[k], k))
    shown = "; ".join(sorted(examples[constraint])[:3])
    text = f"{region}: no pool can serve {name}: {counts[constraint]} of {len(pools)} rejected by {constraint} ({shown})"
    return Verdict(name, region, False, constraint, text)


def servable(deployments: Iterable[problem.DeploymentDemand], pools: Sequence[problem.PoolOffer],
             policy: policy_spec.CapacityPolicySpec | None, latency_map: latency.LatencyMap,
             settings: problem.SolverSettings | None = None) -> dict[tuple[str, str], list[Option]]:
    """(deployment, client region) -> the pools that could serve some of its requests within the SLA:
    every static rule passes but the TTFT/TPOT check on the *mean* prompt (shorter prompts may still
    meet it), and the pool is within ``max_rtt_ms``. What an ideal fleet could use, for references
    such as the simulator's attainable SLO share."""
    settings = settings or problem.SolverSettings()
    prob = problem.PlacementProblem(tuple(deployments), tuple(pools), policy, latency_map, {})
    cycle = framework.Cycle.of(prob, settings)
    plugins = framework.make_filters(tuple(f for f in STATIC_FILTERS if f in settings.filters))
    out: dict[tuple[str, str], list[Option]] = {}
    for demand in prob.deployments:
        view = cand_mod.make_view(demand, policy)
        for region in demand.spec.sla.client_regions:
            found = out.setdefault((view.name, region), [])
            for pool in pools:
                codes = {s.constraint for plugin in plugins
                         if not (s := plugin.filter(framework.Candidate(cycle, view, pool,
                                                                        region if plugin.per_region else ""))).ok}
                rtt = _rtt(cycle, region, pool.region)
                max_rtt = demand.spec.sla.max_rtt_ms
                if codes <= {"ttft", "tpot"} and math.isfinite(rtt) and (max_rtt is None or rtt <= max_rtt):
                    found.append(Option(pool.key, pool.cloud, pool.region, pool.gpu_type, rtt,
                                        view.prefill_ms_by_type.get(pool.gpu_type, 0.0), _tpot_min(view, pool.gpu_type)))
    return out


def _tail(view: framework.DeploymentView, usable: Sequence[Option], region: str, headroom_ms: float) -> str:
    """Why the workload's p99 prompt misses TTFT on every pool in ``usable`` ("" when one keeps
    it, or the workload gives no p99)."""
    spec = view.demand.spec
    tokens = spec.workload.prompt_tokens_p99
    if tokens is None or not usable:
        return ""
    timed = []
    for o in usable:
        prefill = throughput.prefill_ms(spec, o.gpu_type, tokens)
        if prefill is None:
            return ""  # no figure for some pool: nothing to warn of
        timed.append((o.rtt_ms + prefill + headroom_ms, prefill, o))
    total, prefill, o = min(timed, key=lambda t: (t[0], t[2].pool))
    if total <= spec.sla.ttft_p99_ms:
        return ""
    return (f"{region}: prompts at the p99 ({tokens:g} tokens) miss TTFT on every pool the SLA allows; the best is "
            f"{_where(o)}: {ms(o.rtt_ms)} ms RTT + {ms(prefill)} ms prefill + {headroom_ms:g} ms headroom > TTFT "
            f"{spec.sla.ttft_p99_ms:g} ms, so about 1% of requests or more will miss it however many replicas serve "
            f"them (a larger GPU type within reach, a wider max_rtt_ms or a looser TTFT target would keep it)")


def _queue(view: framework.DeploymentView, usable: Sequence[Option], region: str, headroom_ms: float) -> str:
    """Why an embedding model's requests from ``region`` will miss TTFT when its replicas run near
    capacity: no pool in ``usable`` keeps RTT + prefill + the p99 queue wait at capacity + the
    headroom within the target ("" when one does, or the model has no queue figure)."""
    if not view.wait_ms_by_type or not usable:
        return ""
    sla = view.demand.spec.sla
    timed = [(o.rtt_ms + loaded + headroom_ms, o.pool, o) for o in usable
             if (loaded := view.loaded_ms(o.gpu_type)) is not None]
    if not timed:
        return ""
    total, _, o = min(timed)
    if total <= sla.ttft_p99_ms:
        return ""
    wait = view.wait_ms_by_type.get(o.gpu_type, 0.0)
    return (f"{region}: every pool the SLA allows is at the edge of TTFT once a replica's queue counts; the best is "
            f"{_where(o)}: {ms(o.rtt_ms)} ms RTT + {ms(o.prefill_ms)} ms prefill + {ms(wait)} ms queue wait (p99 of a "
            f"replica at capacity) + {headroom_ms:g} ms headroom > TTFT {sla.ttft_p99_ms:g} ms, so requests will miss "
            f"it when the replicas serving {region} run near capacity (a faster GPU type or a pool nearer {region} "
            f"would keep it)")


def _rank(o: Option) -> tuple:
    return o.expected_ttft_ms, o.rtt_ms, o.pool


def _where(o: Option) -> str:
    return f"{o.gpu_type} in {o.region} ({o.pool})"


def ms(value: float) -> str:
    """A duration in ms as reports print it: one decimal under 10 ms (1.6 ms, not 2 ms), whole above."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _ttft_terms(o: Option, view: framework.DeploymentView, headroom_ms: float) -> str:
    tokens = view.demand.spec.workload.prompt_tokens_mean
    text = f"{ms(o.rtt_ms)} ms RTT + {ms(o.prefill_ms)} ms prefill of {tokens:g} tokens"
    return text + (f" + {headroom_ms:g} ms headroom" if headroom_ms > 0 else "")


def summary(v: Verdict, view_sla: deployment_spec.Sla, headroom_ms: float) -> str:
    """One line for a verdict: the best option and its expected TTFT when the SLA can be met, else
    the nearest miss."""
    if not v.ok:
        return f"UNMET ({v.constraint}): {v.message.split(': ', 1)[-1]}"
    b = v.best
    if b is None:
        return "ok"
    return (f"ok: best is {_where(b)}: expected TTFT {ms(b.expected_ttft_ms)} ms ({ms(b.rtt_ms)} ms RTT + "
            f"{ms(b.prefill_ms)} ms prefill) + {headroom_ms:g} ms headroom <= {view_sla.ttft_p99_ms:g} ms")


def _tpot_min(view: framework.DeploymentView, gpu_type: str) -> float:
    return throughput.assess(view.demand.spec, gpu_type).tpot_min_ms


def _rtt(cycle: framework.Cycle, a: str, b: str) -> float:
    try:
        return cycle.latency_map.rtt_ms(a, b)
    except KeyError:
        return float("inf")


def check_documents(deployments: Iterable[deployment_spec.ModelDeployment], clusters: Iterable[cluster_spec.Cluster],
                    policy: policy_spec.CapacityPolicySpec | None, latency_map: latency.LatencyMap,
                    settings: problem.SolverSettings | None = None) -> list[Verdict] | None:
    """``check`` over the pools the Cluster documents declare (catalog prices, at their largest);
    None when there is no Cluster document (no capacity is declared: nothing can be judged)."""
    clusters = list(clusters)
    if not clusters:
        return None
    demands = [problem.DeploymentDemand.of(d, {}, policy) for d in deployments]
    return check(demands, inputs.pools_from_clusters(clusters, policy), policy, latency_map, settings)


def issues(verdicts: Iterable[Verdict], documents: Iterable[spec.Loaded]) -> list[spec.SpecIssue]:
    """A spec issue per region whose SLA no declared capacity can meet, located at that region's
    entry of the deployment's ``sla.client_regions``."""
    where = {d.name: d for d in documents if d.kind == "ModelDeployment"}
    out = []
    for v in verdicts:
        doc = where.get(v.deployment)
        if v.ok or doc is None:
            continue
        regions = doc.doc.spec.sla.client_regions
        i = regions.index(v.client_region) if v.client_region in regions else None
        path = ("spec", "sla", "client_regions") + ((i,) if i is not None else ())
        out.append(spec.SpecIssue(doc.file, doc.line_of(*path), ".".join(str(p) for p in path),
                                  f"no declared capacity meets the SLA from {v.message} ({v.constraint}; "
                                  f"{ACCEPT_FLAG} accepts it)", doc.index))
    return out
