"""One simulated run of one policy over a scenario's trace, on a simulated clock.

Each tick (``scenario.tick_s``): scripted faults happen; every cluster's agent reports (the cloud
advances: nodes arrive, spot notices, preempted nodes vanish and their replicas die); the scheduler
runs one control round (autoscaler -> placement -> reconciler) and its directives take effect; the
routing table is rebuilt from the fleet view; the tick's arrivals are routed through the router's
policy object; every replica's steady state follows from its arrival rate (``perf``); requests are
scored against the SLO; node-hours are billed. The loads and the traffic of a tick are what the
agents and routers report at the next one."""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable

import numpy as np

from meridian import cost, spec
from meridian.fleet import models as fm
from meridian.simulate import clusters as clusters_mod
from meridian.simulate import control, metrics, perf, policies, routing
from meridian.simulate import windows as windows_mod
from meridian.simulate import scenario as scenario_mod
from meridian.simulate import trace as trace_mod
from scheduler.control import planner, routes
from scheduler.state import records

log = logging.getLogger("meridian.simulate.engine")

_QUANTILES = np.array([0.5, 0.9, 0.99])
EPOCH_S = 1_767_225_600.0  # 2026-01-01T00:00:00Z; the run's start, moved to start_utc_hour
Progress = Callable[[str, int, int], None]


class _Faults:
    """The scenario's scripted events, by tick."""

    def __init__(self, sc: scenario_mod.Scenario, clusters: dict[str, clusters_mod.SimCluster]):
        self.by_tick: dict[int, list[tuple[str, object]]] = {}
        tick = sc.tick_at
        for down, up, region in sc.outage_ticks():
            self._add(down, ("down", region))
            self._add(up, ("up", region))
        for s in sc.stock_outs:
            self._add(tick(s.at_h), ("stock_out", (s.cluster, s.pool, True)))
            self._add(tick(s.at_h + s.duration_h), ("stock_out", (s.cluster, s.pool, False)))
        for i, w in enumerate(sc.spot.waves):
            self._add(tick(w.at_h), ("wave", (i, w)))
        self.clusters = clusters
        self.seed = sc.seed

    def _add(self, k: int, item: tuple[str, object]) -> None:
        self.by_tick.setdefault(k, []).append(item)

    def apply(self, k: int) -> tuple[list[clusters_mod.SimReplica], int]:
        """Faults of tick ``k``: the replicas they kill and the spot nodes they preempt."""
        killed: list[clusters_mod.SimReplica] = []
        preempted = 0
        for what, arg in self.by_tick.get(k, ()):
            if what == "down":
                for c in self.clusters.values():
                    if c.region == arg:
                        killed += c.go_down()
            elif what == "up":
                for c in self.clusters.values():
                    if c.region == arg:
                        c.come_back()
            elif what == "stock_out":
                cid, pool, on = arg
                self.clusters[cid].set_stock_out(pool, on)
            elif what == "wave":
                i, w = arg
                rng = random.Random(f"{self.seed}:wave:{i}")
                for cid, c in sorted(self.clusters.items()):
                    if (w.cluster is not None and cid == w.cluster) or (w.region is not None and c.region == w.region):
                        preempted += c.preempt_wave(w.share, rng)
        return killed, preempted


def run(sc: scenario_mod.Scenario, specset: spec.SpecSet, trace: trace_mod.Trace, policy: policies.PolicyDef,
        progress: Progress | None = None) -> metrics.RunResult:
    wall = time.perf_counter()
    tick_s = sc.tick_s
    warmup = int(round(sc.warmup_min * 60.0 / tick_s))
    start_s = EPOCH_S + sc.start_utc_hour * 3600.0
    # The clusters come into being when the warmup starts, so their initial nodes (a reserved node
    # among them) are up through it, as they are when a scheduler starts on a running fleet.
    now_box = [start_s - warmup * tick_s]
    clock = lambda: now_box[0]  # noqa: E731
    view = planner.SpecView.of(specset, 1)
    deployments = view.deployments
    mean = {d: trace.mean_rps(d) for d in deployments}
    ctx = policies.PlacerContext(view, mean)
    sched = control.SimScheduler(specset, policy.make_placer(ctx))
    fid = sc.fidelity

    def model_of(deployment: str, gpu_type: str) -> perf.ReplicaModel:
        return perf.model_for(deployments[deployment].spec, gpu_type, prompt_cv=fid.prompt_cv,
                              tpot_sigma=fid.tpot_sigma, prompt_factors=trace.prompt_factors.get(deployment))

    def cold_start(deployment: str, gpu_type: str) -> float:
        return perf.cold_start_s(model_of(deployment, gpu_type), sc.replicas.cold_start_base_s,
                                 sc.replicas.cold_start_s_per_weight_gib)

    fleet = {}
    for c in specset.of_kind("Cluster"):
        fleet[c.metadata.name] = clusters_mod.SimCluster(
            c, clock=clock, rng=random.Random(f"{sc.seed}:{c.metadata.name}"),
            notice_s=sc.spot.notice_s.get(c.spec.cloud, 120.0), policy=view.policy, cold_start=cold_start,
            provisioning_delay_s=sc.cloud.provisioning_delay_s,
            preemptions_per_node_hour=sc.spot.preemptions_per_node_hour)
    faults = _Faults(sc, fleet)
    router = routing.SimRouter(policy.routing, view.latency_map, random.Random(f"{sc.seed}:router"), clock,
                               policy.honours_max_rtt)
    lmap = view.latency_map
    regions = sorted({s.client_region for s in trace.streams})
    col = metrics.Collector(regions, sorted(deployments), trace.ticks, sc.tick_s,
                            windows_mod.Lookup(windows_mod.from_scenario(sc)))
    streams_of: dict[str, list[tuple[int, str]]] = {}
    for i, s in enumerate(trace.streams):
        streams_of.setdefault(s.deployment, []).append((i, s.client_region))
    served_name = {n: d.spec.model.served_name for n, d in deployments.items()}
    owners = {n: cost.Owner(d.spec.model.served_name, n, d.metadata.team or "") for n, d in deployments.items()}
    meter = cost.Meter(start_s)
    demand: list[records.Demand] = []
    preempted_zones: dict[str, float] = {}
    killed_replicas = starts = refused = preempted_by_wave = 0
    down_usd = 0.0  # nodes beyond the minimums billed in regions while they are down
    usage: dict[str, float] = {}
    wake = False
    rounds = 0
    report_every = max(1, trace.ticks // 50)

    scratch = metrics.Collector(regions, sorted(deployments), 1, tick_s)
    measured = col
    for k in range(-warmup, trace.ticks):
        now = start_s + k * tick_s
        now_box[0] = now
        col = measured if k >= 0 else scratch
        killed, hit = faults.apply(k) if k >= 0 else ([], 0)
        preempted_by_wave += hit
        wake = wake or bool(killed) or (k >= 0 and bool(faults.by_tick.get(k)))
        for _cid, cluster in sorted(fleet.items()):
            obs = cluster.observe(now)
            killed += obs.killed
            wake = wake or bool(obs.killed)
            if obs.pools is None:
                continue
            for e in obs.events:
                if e.kind is fm.EventKind.SPOT_INTERRUPTION:
                    pool = cluster.pool(e.pool_id)
                    preempted_zones[(pool.zone if pool and pool.zone else cluster.region)] = now
            wake = sched.intake(cluster.identity, obs.pools, obs.reports, obs.events, now) or wake
        for r in killed:
            killed_replicas += 1
            _fail_in_flight(col, max(k, 0), r)
        drained: set[str] = set()
        planned: tuple = ()
        if wake or (k + warmup) % sc.control_every == 0 or sched.watch(now):
            planned = sched.tick(now, demand, preempted_zones).directives
            rounds += 1
        wake = False
        for pd in planned:
            cluster = fleet[pd.cluster_id]
            if cluster.down:
                continue  # the agent is unreachable: the directive is not delivered
            ack, events = cluster.apply(pd.directive, now)
            action = pd.directive.action
            if isinstance(action, fm.DrainReplica):
                drained.add(action.replica_id)
            elif isinstance(action, fm.StartReplica):
                starts += ack.outcome is fm.DirectiveOutcome.ACCEPTED
            if ack.outcome in (fm.DirectiveOutcome.REFUSED, fm.DirectiveOutcome.FAILED):
                refused += 1
                wake = True  # the loop wakes when a directive is refused or fails
            for e in events:
                wake = sched.on_event(pd.cluster_id, e, now) or wake
        router.apply(routes.build_models(sched.snapshot, deployments, drained))
        live = {r.replica_id: (c, r) for c in fleet.values() if not c.down for r in c.replicas.values()}
        # Replicas still in the table but gone: the router's connect fails and it retries elsewhere.
        dead = set(router.state.endpoints) - set(live)
        demand = _route_and_score(max(k, 0), now, sc, trace, col, router, live, dead, streams_of, served_name,
                                  deployments, model_of, lmap)
        replicas = 0
        tokens: dict[str, cost.Tokens] = {}
        for c, r in live.values():
            if r.state is fm.ReplicaState.READY:
                replicas += 1
                if k >= 0:
                    key = "|".join((r.deployment, c.identity.cloud.value, c.region, r.tier.value, r.gpu_type))
                    usage[key] = usage.get(key, 0.0) + tick_s / 3600.0
                    if r.steady is not None:
                        w = model_of(r.deployment, r.gpu_type).workload
                        out = 0.0 if deployments[r.deployment].spec.runtime.is_embedding else w.output_tokens
                        name = served_name[r.deployment]
                        tokens[name] = tokens.get(name, cost.Tokens()) + cost.Tokens(
                            r.steady.served_rps * w.prompt_tokens, r.steady.served_rps * out)
        by_tier: dict[str, int] = {}
        for c in fleet.values():
            for tier, n in c.gpus_by_tier().items():
                by_tier[tier] = by_tier.get(tier, 0) + n
        # The bill: every cluster's nodes, reachable or not (a region down still bills), by the cost module.
        bill = cost.bill([p for c in fleet.values() for p in c.cost_pools()],
                         [r for c in fleet.values() for r in c.cost_replicas(owners)])
        if k >= 0:
            meter.add(bill, tick_s / 3600.0, tokens)
            down_usd += sum(c.down_extra_usd_per_hour() for c in fleet.values()) * tick_s / 3600.0
        col.fleet(max(k, 0), bill.usd, replicas, sum(by_tier.values()), by_tier.get("spot", 0))
        col.flush()
        if k < 0:
            scratch = metrics.Collector(regions, sorted(deployments), 1, tick_s)
        elif progress is not None and (k % report_every == 0 or k == trace.ticks - 1):
            progress(policy.name, k + 1, trace.ticks)

    stats = {
        "wall_s": time.perf_counter() - wall, "control_rounds": rounds, "plans": sched.stats.plans, "plan_s": sched.stats.plan_s,
        "directives": sched.stats.directives, "replicas_started": starts, "directives_refused": refused,
        "replicas_killed": killed_replicas, "spot_nodes_preempted": sum(c.preempted_nodes for c in fleet.values()),
        "spot_notices_by_wave": preempted_by_wave, "router_selections": router.selections,
        "plan_memo_hits": getattr(sched.placer, "memo_hits", 0), "down_region_extra_usd": down_usd,
    }
    return measured.result(policy=policy.name, label=policy.label, routing=policy.routing,
                           placement=sched.placer.name, hours=trace.ticks * tick_s / 3600.0, stats=stats,
                           notes=ctx.notes, usage=usage,
                           bill=cost.document.of_window(meter.window(now_box[0] + tick_s)))


def _fail_in_flight(col: metrics.Collector, k: int, r: clusters_mod.SimReplica) -> None:
    """A replica died: requests it was streaming fail; those before their first byte are retried
    elsewhere by the router (counted where they land, in this tick's traffic)."""
    if r.steady is None or r.state is not fm.ReplicaState.READY:
        return
    lost = r.steady.running * r.steady.decode_share
    total = sum(r.region_share.values())
    for region, share in r.region_share.items():
        if total > 0:
            col.lost(k, r.deployment, region, lost * share / total, "replica_died")


def _route_and_score(k, now, sc, trace, col, router, live, dead, streams_of, served_name, deployments, model_of,
                     lmap) -> list[records.Demand]:
    """Route tick ``k``'s arrivals, compute each replica's steady state, score the requests; return
    the traffic the routers report for the next control round."""
    tick_s = sc.tick_s
    fid = sc.fidelity
    arrivals_row = trace.arrivals[k]
    demand: list[records.Demand] = []
    lam: dict[str, dict[str, float]] = {}
    # The live router's peak-EWMA is fed by every response, so it tracks a replica's latency within
    # seconds; a tick routes a minute of requests with one estimate, so each replica's is set now:
    # what its requests saw last tick, or for a replica that had none (new, or avoided), what its
    # first responses would show (unloaded, its backlog included). Left to decay over the tick, an
    # idle replica would read as free and draw the whole minute's traffic (a herd the live router
    # stops after the first slow responses).
    for rid, (_c, r) in live.items():
        if r.state is not fm.ReplicaState.READY:
            continue
        ms = r.server_ttft_ms
        if ms is None:
            m = model_of(r.deployment, r.gpu_type)
            v, p = m.server_ttft_points(m.steady(0.0, r.backlog, tick_s))
            ms = float(v @ p)
        router.observe(rid, ms)
    for dep, streams in sorted(streams_of.items()):
        arrivals = {region: int(arrivals_row[i]) for i, region in streams}
        spec_ = deployments[dep].spec
        expected = {}
        for rid, (_c, r) in live.items():
            if r.deployment == dep:
                # A request's time there: last tick's figure, or an unloaded one for a new replica.
                expected[rid] = r.steady.request_s if r.steady is not None \
                    else model_of(dep, r.gpu_type).per_request_s(1.0)
        shares = router.route(served_name[dep], arrivals, int(spec_.workload.prompt_tokens_mean),
                              fid.samples_per_stream, expected, tick_s, dead)
        routed: dict[str, float] = {}
        for (rid, region), n in shares.items():
            if rid in live:
                lam.setdefault(rid, {})[region] = lam.get(rid, {}).get(region, 0.0) + n / tick_s
                routed[region] = routed.get(region, 0.0) + n
        for region, n in arrivals.items():
            col.failed(k, dep, region, n - routed.get(region, 0.0), "no_replica")
    in_flight: dict[tuple[str, str], float] = {}
    seen: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray]]] = {}
    for rid, (cluster, r) in sorted(live.items()):
        if r.state is not fm.ReplicaState.READY:
            continue
        by_region = lam.get(rid, {})
        rate = sum(by_region.values())
        model = model_of(r.deployment, r.gpu_type)
        steady = model.steady(rate, r.backlog, tick_s)
        r.steady, r.backlog = steady, steady.backlog_next
        r.region_share = dict(by_region)
        values, probs = model.server_ttft_points(steady)
        cum = probs.cumsum()
        p50, p90, server_p99 = perf.point_quantiles(values, cum, _QUANTILES)
        server_mean = float(values @ probs)
        r.load = fm.ReplicaLoad(
            running_requests=int(round(steady.running)), queued_requests=int(round(steady.queued)),
            kv_cache_usage=steady.kv_usage,
            ttft=fm.LatencyPercentiles(p50, p90, server_p99),
            inter_token_latency=fm.LatencyPercentiles(steady.tpot_ms, steady.tpot_ms, steady.tpot_ms),
            generation_tokens_per_s=steady.served_rps * model.output, requests_per_s=steady.served_rps,
            observed_at=now, queue_time=fm.LatencyPercentiles(*model.queue_time_ms(steady, _QUANTILES)))
        if rate <= 0:
            r.server_ttft_ms = None  # no responses: next tick starts from its unloaded estimate
            continue
        r.server_ttft_ms = server_mean
        tpot_ok = model.tpot_ok(steady)
        dropped_share = steady.dropped / (rate * tick_s) if rate > 0 else 0.0
        spec_sla = deployments[r.deployment].spec.sla
        sla = spec_sla.ttft_p99_ms
        for region, rps in by_region.items():
            n = rps * tick_s
            failed = n * min(1.0, dropped_share)
            col.failed(k, r.deployment, region, failed, "queue_full")
            served = n - failed
            rtt = lmap.rtt_ms(region, cluster.region)
            idx = int(np.searchsorted(values, sla - rtt, side="right"))
            ttft_ok = float(cum[idx - 1]) if idx > 0 else 0.0
            if spec_sla.max_rtt_ms is not None and rtt > spec_sla.max_rtt_ms:
                # Served from beyond the deployment's max_rtt_ms: outside its SLA whatever the TTFT.
                met, misses = 0.0, {"max_rtt": served}
            else:
                met = served * ttft_ok * tpot_ok
                misses = {"ttft": served * (1.0 - ttft_ok), "tpot": served * ttft_ok * (1.0 - tpot_ok)}
            col.served(k, r.deployment, region, served, met, values + rtt, probs, misses)
            key = (r.deployment, region)
            in_flight[key] = in_flight.get(key, 0.0) + rps * steady.request_s
            seen.setdefault(key, []).append((values + rtt, probs * served))
    for dep, streams in sorted(streams_of.items()):
        for i, region in streams:
            n = int(arrivals_row[i])
            demand.append(records.Demand(served_name[dep], region, n / tick_s, 0.0,
                                         int(math.ceil(in_flight.get((dep, region), 0.0))),
                                         _p99(seen.get((dep, region))), 0.0, 0.0, now))
    return demand


def _p99(points: list[tuple[np.ndarray, np.ndarray]] | None) -> float:
    """TTFT p99 (ms) over the requests of one stream, as its routers measure it (RTT included)."""
    if not points:
        return 0.0
    values = np.concatenate([v for v, _ in points])
    weights = np.concatenate([w for _, w in points])
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    if cum[-1] <= 0:
        return 0.0
    return perf.point_quantiles(values[order], cum / cum[-1], (0.99,))[0]
