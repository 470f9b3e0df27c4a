"""``meridian demo``: the whole story on one machine, on loopback, in about two minutes.

A scheduler, one agent per example cluster (nine regions on AWS, GCP and Azure, the ``sim``
provider, SGLang emulator replicas), an edge router per client region; the example specs applied; traffic from several
client regions through the official ``openai`` SDK; a live view; scripted events (a traffic spike,
a whole region lost, a spot preemption wave); a report at the end. Ctrl-C stops everything and
leaves no process behind."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pathlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

import aiohttp

from meridian import spec
from meridian.demo import fleet as fleet_mod
from meridian.demo import processes
from meridian.demo import sla, stats, traffic, view
from scheduler.solver import throughput

log = logging.getLogger("meridian.demo")
CLIENT_REGIONS = ("na-east", "eu-west", "ap-northeast", "ap-south")
# The TTFT the demo's scheduler keeps free of RTT + prefill (production default 10 ms): here every
# request also crosses the client SDK, an edge router and an emulator on one machine that runs the
# whole fleet (~25 Python processes), which took 15-55 ms at the median on two shared cores.
DEMO_TTFT_HEADROOM_MS = 40.0
COLD_START_MIN_S = 2.0  # the status is polled every second


@dataclasses.dataclass(frozen=True)
class DemoOptions:
    duration_s: float = 90.0
    base_rps_per_region: float = 2.5
    spike_factor: float = 4.0
    live: bool = True
    workdir: pathlib.Path | None = None
    keep_workdir: bool = False
    seed: int = 7
    lose_cluster: str = ""  # empty: the cluster with the most ready replicas at that moment
    # After the traffic, how long to keep watching for the lost region's capacity to be re-placed
    # when it is not yet (a 70B replica on a new node takes over a minute to load its weights).
    replace_wait_s: float = 60.0
    startup_timeout_s: float = 120.0
    # Clusters whose replicas run as pods (kubernetes backend, a fake Kubernetes each): "N" (the first
    # N clusters) or "name,name"; "" none.
    k8s_clusters: str = ""
    # The scheduler's pool_scale_down_delay_s for the demo: its default (300 s) outlasts the whole run,
    # so the nodes a replacement or a preemption's backfill leaves idle would be billed to the end.
    pool_scale_down_delay_s: float = 20.0


@dataclasses.dataclass
class Timeline:
    """The run's events on the demo's one clock: seconds since traffic started (``start_traffic``),
    as the progress lines and the failure table count; setup before it reads as negative."""

    clock: Callable[[], float] = time.monotonic
    events: list[tuple[float, str]] = dataclasses.field(default_factory=list)
    origin: float | None = None

    def note(self, text: str) -> None:
        self.events.append((self.clock(), text))
        log.info("event=demo %s", text)

    def start_traffic(self) -> float:
        """Set t=0 (now) and return it (monotonic)."""
        self.origin = self.clock()
        return self.origin

    @property
    def lines(self) -> list[str]:
        zero = self.origin if self.origin is not None else (self.events[0][0] if self.events else 0.0)
        return [f"t={at - zero:6.1f}s  {text}" for at, text in self.events]


def on_clock(elapsed_s: float, duration_s: float, phases: Phases) -> tuple[float, str]:
    """Seconds since traffic started as shown (never past ``duration_s``: after it the generators
    only wait for their requests in flight) and the phase to name."""
    if elapsed_s >= duration_s:
        return duration_s, "draining requests in flight"
    return elapsed_s, phases.name(elapsed_s)


class Phases:
    """What the traffic does when: steady, a spike in na-east, then steady again."""

    def __init__(self, opts: DemoOptions):
        self.opts = opts
        self.spike_start = 0.15 * opts.duration_s
        self.spike_end = 0.35 * opts.duration_s
        self.lose_at = 0.45 * opts.duration_s
        self.preempt_at = 0.72 * opts.duration_s

    def rate(self, region: str, elapsed_s: float) -> float:
        rate = self.opts.base_rps_per_region
        if region == "na-east" and self.spike_start <= elapsed_s < self.spike_end:
            rate *= self.opts.spike_factor
        return rate

    def name(self, elapsed_s: float) -> str:
        if self.spike_start <= elapsed_s < self.spike_end:
            return f"traffic spike in na-east (x{self.opts.spike_factor:g})"
        if elapsed_s < self.lose_at:
            return "steady traffic"
        if elapsed_s < self.preempt_at:
            return "region lost: routing around, re-placing"
        return "spot preemption wave"


def _models(spec_set: spec.SpecSet) -> tuple[list[traffic.ModelTraffic], dict[str, sla.Target], dict[str, set[str]],
                                             set[str]]:
    """Traffic per model, SLA targets and client regions by served name, and the models that may scale to
    zero (scaling.least_replicas 0): traffic starts without waiting for them, and their first requests wait
    for a replica to start (reported as such)."""
    shares = {"chat-8b": 0.75, "reasoning-70b": 0.15, "embed": 0.10}
    headroom = DEMO_TTFT_HEADROOM_MS
    models, slas, regions, cold = [], {}, {}, set()
    for d in spec_set.of_kind("ModelDeployment"):
        served = d.spec.model.served_name
        models.append(traffic.ModelTraffic(served, shares.get(d.metadata.name, 0.1), embedding=d.spec.runtime.is_embedding,
                                           max_tokens=32 if d.metadata.name == "reasoning-70b" else 48))
        prefill = {t: throughput.assess(d.spec, t).prefill_ms for t in throughput.allowed_gpu_types(d.spec)}
        slas[served] = sla.Target(d.spec.sla.ttft_p99_ms, d.spec.sla.tpot_p99_ms, d.spec.sla.max_rtt_ms, prefill,
                                  headroom)
        regions[served] = set(d.spec.sla.client_regions)
        if d.spec.scaling.least_replicas == 0:
            cold.add(served)
    return models, slas, regions, cold


async def _wait_routable(fleet: fleet_mod.LocalFleet, session: aiohttp.ClientSession, models: list[str],
                         timeout_s: float) -> None:
    """Until every router has a ready replica of each of ``models``."""
    deadline = time.monotonic() + timeout_s
    missing = models
    while time.monotonic() < deadline:
        try:
            missing = []
            for url in fleet.router_urls.values():
                rs = await fleet.router_status(session, url)
                ready = {m["model"] for m in rs.get("models", [])
                         if any(r["state"] == "ready" for r in m.get("replicas", []))}
                missing += [m for m in models if m not in ready and m not in missing]
            if not missing:
                return
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            pass
        await asyncio.sleep(0.5)
    raise TimeoutError(f"no ready replica for {missing} after {timeout_s:.0f}s; see {fleet.workdir}/logs")


async def demo(opts: DemoOptions, out=sys.stdout) -> int:
    workdir = pathlib.Path(opts.workdir or tempfile.mkdtemp(prefix="meridian-demo-"))
    # An edge router per client region, as a global endpoint would run (anycast to the nearest).
    kube = fleet_mod.resolve_k8s_clusters(fleet_mod.EXAMPLES / "clusters.yaml", opts.k8s_clusters)
    # With clusters on Kubernetes the agents take longer to report (their cluster starts first): the
    # scheduler waits for them before its first plan.
    settings = (*fleet_mod.FleetConfig.scheduler_settings, f"ttft_headroom_ms={DEMO_TTFT_HEADROOM_MS:g}",
                f"pool_scale_down_delay_s={opts.pool_scale_down_delay_s:g}") + (("adopt_grace_s=30",) if kube else ())
    cfg = fleet_mod.FleetConfig(workdir=workdir, edge_regions=CLIENT_REGIONS, k8s_clusters=kube,
                                scheduler_settings=settings)
    fleet = fleet_mod.LocalFleet(cfg)
    spec_set = spec.load_files([*cfg.spec_files, cfg.cluster_file])
    models, slas, model_regions, cold = _models(spec_set)
    timeline = Timeline()
    phases = Phases(opts)
    interactive = opts.live and out.isatty()
    try:
        on_kube = f" ({', '.join(kube)} on Kubernetes: replicas as pods of a fake cluster each)" if kube else ""
        print(f"meridian demo: starting a scheduler, {len(spec_set.of_kind('Cluster'))} agents{on_kube} and "
              f"{len(fleet.router_urls)} edge routers "
              f"on loopback (work dir {workdir})", file=out, flush=True)
        fleet.prepare()
        await fleet.start_scheduler()
        timeline.note("scheduler up")
        print(f"dashboard (read-only, while the demo runs): {fleet.dashboard_url}", file=out, flush=True)
        async with aiohttp.ClientSession() as session:
            applied = await fleet.apply(session, [*cfg.spec_files, workdir / "clusters.yaml"])
            if applied["status"] != 200:
                print(f"apply failed: {applied}", file=out)
                return 1
            timeline.note(f"applied {len(spec_set.documents)} specs (policy, deployments, clusters, latency map)")
            await fleet.start_agents()
            timeline.note(f"{len(fleet.cluster_docs)} agents connected")
            await fleet.start_router()
            warm = [m.model for m in models if m.model not in cold]
            await _wait_routable(fleet, session, warm, opts.startup_timeout_s)
            timeline.note("replicas ready and routed: " + ", ".join(warm) + "; traffic starts")
            reach = sla.ReachLog(spec_set.context.latency_map)
            return await _traffic_phase(fleet, session, opts, phases, models, slas, model_regions, cold, timeline,
                                        interactive, out, reach)
    finally:
        leftovers = await asyncio.to_thread(fleet.stop)
        stray = await asyncio.to_thread(fleet.procs.stragglers)
        print(f"stopped every process of the run ({len(leftovers)} swept after their parents)"
              + (f"; STILL RUNNING: {processes.describe(stray)}" if stray else ""), file=out, flush=True)
        if not opts.keep_workdir and opts.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


async def _traffic_phase(fleet, session, opts, phases, models, slas, model_regions, cold, timeline, interactive,
                         out, reach: sla.ReachLog) -> int:
    recorder = traffic.Recorder()

    def rate(region: str, elapsed: float) -> float:
        return phases.rate(region, elapsed)

    per_model = [traffic.TrafficGenerator(
        fleet.router_urls, "demo-key", [r for r in CLIENT_REGIONS if r in model_regions[m.model]], [m],
        lambda region, t, share=m.share: rate(region, t) * share, recorder, seed=opts.seed + i, max_in_flight=48)
        for i, m in enumerate(models)]
    gens = [asyncio.create_task(g.run(opts.duration_s)) for g in per_model]
    lost: dict = {}
    preempted = False
    preempted_wall: float | None = None
    traffic_started = timeline.start_traffic()
    started_wall = time.time()
    last_print = 0.0
    answered: set[str] = set()  # models that have answered a request (out of their cold start)
    status: dict = {}
    loads: list[float] = []
    settled: dict = {}
    bill: dict = {}
    try:
        while not all(g.done() for g in gens):
            elapsed = time.monotonic() - traffic_started
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError):
                status = await fleet.status(session)
                reach.add(time.time(), status, model_regions)
                if interactive:
                    bill = await fleet.cost(session)
            loads.append(os.getloadavg()[0])
            if elapsed >= phases.lose_at and not lost:
                lost = _lose_region(fleet, status, opts, timeline)
            if lost:
                _track_recovery(lost, status, recorder, timeline)
            if elapsed >= phases.preempt_at and not preempted:
                preempted = True
                preempted_wall = time.time()
                hit = await fleet.preempt_spot(session)
                timeline.note("SPOT PREEMPTION WAVE: " + (", ".join(f"{c} ({n} nodes)" for c, n in hit.items())
                                                          or "no spot node was running"))
            _settle(settled, status, lost, preempted_wall)
            # One clock: seconds since traffic started, never past the duration (after it, the
            # generators only wait for their requests in flight); a model still in its cold start
            # stays out of the figures (named instead) until it first answers.
            shown, phase = on_clock(elapsed, opts.duration_s, phases)
            window = recorder.since(time.time() - 10)
            answered.update(r.model for r in window if r.ok)
            warming = set(cold) - answered
            rows = stats.region_rows([r for r in window if r.model not in warming], min(10.0, max(1.0, elapsed)))
            if interactive:
                out.write("\x1b[H\x1b[2J" + view.frame(shown, opts.duration_s, phase, status, rows,
                                                      timeline.lines, bill) + "\n")
                out.flush()
            elif elapsed - last_print >= 10:
                last_print = elapsed
                line = stats.progress_line(window, min(10.0, max(1.0, elapsed)), warming)
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError):
                    bill = await fleet.cost(session)
                print(f"[{shown:4.0f}s/{opts.duration_s:.0f}s] {phase} | {line} | "
                      f"{view.bill_short(bill)}", file=out, flush=True)
            await asyncio.sleep(1.0)
        await asyncio.gather(*gens)
    finally:
        for g in gens:
            g.cancel()
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError):
        status = await fleet.status(session)
    end_wall = time.time()
    if lost and "replaced_s" not in lost and opts.replace_wait_s > 0:
        status = await _await_replacement(fleet, session, lost, status, recorder, timeline, opts.replace_wait_s, out)
    total = len(recorder.records)
    failed = sum(1 for r in recorder.records if not r.ok)
    dropped = sum(g.dropped for g in per_model)
    if dropped:
        timeline.note(f"{dropped} arrivals not sent: the generator's in-flight cap was reached")
    if lost:
        # The live check above ends 3 s after the last failure it has seen; requests that fail
        # later (a model whose only replica was in the lost region fails until it is re-placed)
        # are counted here, from every request started between the loss and the next event.
        late = stats.failed_between(recorder.records, lost["at_wall"], preempted_wall)
        last = round(max(r.started_s for r in late) - lost["at_wall"], 1) if late else None
        if last is not None and last != lost.get("routed_around_s"):
            lost["routed_around_s"] = last
            timeline.note(f"{len(late)} request(s) started after the loss of {lost['cluster']} failed, the last "
                          f"{lost['routed_around_s']:.1f}s after it ({', '.join(sorted({r.model for r in late}))})")
    routed = lost.get("routed_around_s")
    around = ("time to route around the lost region (last failed request started after the loss)"
              if routed is None or routed > 0
              else "time to route around the lost region (no request started after the loss failed)")
    timings = {around: routed,
               "time to re-place its capacity": lost.get("replaced_s")}
    for u in (status.get("plan") or {}).get("unplaced", []):
        timeline.note(f"unplaced at the end: {u.get('reason', '')}")
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError):
        bill = await fleet.cost(session, wait_floor=True)
    for u in (status.get("plan") or {}).get("uncovered", []):
        timeline.note(f"SLA unmet at the end: {u.get('deployment')}/{u.get('client_region')} ({u.get('constraint')}): "
                      f"{u.get('reason', '')}")
    colds = stats.cold_starts(recorder.records, cold, slas, reach)
    windows = _windows(colds, phases, started_wall, lost, preempted_wall, settled, end_wall, reach, slas,
                       model_regions)
    load = f"{os.cpu_count()} cores at load average {sum(loads) / len(loads):.1f}" if loads else ""
    regions = sla.per_region(recorder.records, slas, windows, reach, host=load, notes=_plan_notes(status))
    print(view.report(stats.placement_rows(bill.get("now") or {}), regions, total, failed,
                      timings, timeline.lines, slas, stats.failure_reasons(recorder.records),
                      colds, bill,
                      windows, sla.failures(recorder.records, windows, started_wall), started_wall),
          file=out, flush=True)
    print(f"dashboard (read-only, until the demo stops): {fleet.dashboard_url}", file=out, flush=True)
    return 0


def _windows(colds: list[stats.ColdStart], phases: Phases, started_wall: float, lost: dict,
             preempted_wall: float | None, settled: dict, end_wall: float, reach: sla.ReachLog,
             targets: dict[str, sla.Target], model_regions: dict[str, set[str]]) -> list[sla.Window]:
    """The stretches of the run that are not steady state, in the order a request is matched: cold
    start per model and client region (until a replica within the region's reach is ready, and for a
    model scaled to zero its first answer; the end of traffic if its model never answered), the
    spike, the lost region until each model's capacity is re-placed (the end of traffic if never),
    the preemption wave until the plan is carried out again; and for either fault, a client region that
    lost its last replica within reach stays in the window until one is ready within reach again (the
    plan can be carried out while the region is still served from afar: a replacement placed after it)."""
    out = []
    first_answer = {c.model: c.first_answer_s if c.first_answer_s is not None else end_wall for c in colds}
    for model, regions in sorted(model_regions.items()):
        for region in sorted(regions):
            within = reach.first_within(model, region, targets[model]) if model in targets else None
            end = max(t for t in (within, first_answer.get(model)) if t is not None) \
                if within is not None or model in first_answer else None
            # Within reach at the first poll of the traffic (about a second in): no cold start there.
            if end is not None and end > started_wall + COLD_START_MIN_S:
                out.append(sla.Window("cold start", started_wall, end, frozenset({model}), frozenset({region})))
    out.append(sla.Window(f"traffic spike in na-east (x{phases.opts.spike_factor:g})",
                          started_wall + phases.spike_start, started_wall + phases.spike_end))
    for event, start in (("lost", lost.get("at_wall")), ("preempted", preempted_wall)):
        if start is None:
            continue
        name = f"region lost ({lost['cluster']})" if event == "lost" else "spot preemption wave"
        for model in sorted(settled.get(f"{event}:models", ())):
            end = settled.get(f"{event}:{model}", end_wall)
            out.append(sla.Window(name, start, end, frozenset({model})))
            for region in sorted(model_regions.get(model, ()) if model in targets else ()):
                back = reach.back_within(model, region, targets[model], start, end)
                if back is None or back > end:
                    out.append(sla.Window(name, start, end_wall if back is None else back, frozenset({model}),
                                          frozenset({region})))
    return out


def _plan_notes(status: dict) -> dict[tuple[str, str], str]:
    """(served model, client region) -> why the scheduler's last plan leaves that region's SLA unmet."""
    served = {r.get("deployment"): r.get("served_model_name") or r.get("deployment")
              for c in status.get("clusters", []) for r in c.get("replica_details", [])}
    return {(served.get(u["deployment"], u["deployment"]), u["client_region"]): f"{u['constraint']}: {u['reason']}"
            for u in (status.get("plan") or {}).get("uncovered", [])}


def _settle(settled: dict, status: dict, lost: dict, preempted_wall: float | None) -> None:
    """For the region loss and the preemption wave, when each model's capacity is back: a plan made
    after the event (after the scheduler marked the region lost) is carried out for that model's
    deployment (its ready replicas outside the lost cluster are what the plan wants). Models are
    keyed by served name; ``settled[event + ":models"]`` lists those the event's window covers."""
    plan = status.get("plan") or {}
    served: dict[str, str] = {}
    for c in status.get("clusters", []):
        for r in c.get("replica_details", []):
            served[r.get("deployment")] = r.get("served_model_name") or r.get("deployment")
    events = []
    if lost:
        events.append(("lost", lost.get("seen_lost_wall"), lost.get("cluster", "")))
    if preempted_wall is not None:
        events.append(("preempted", preempted_wall + 2.0, ""))
    for event, since, exclude in events:
        models = settled.setdefault(f"{event}:models", set())
        models.update(served.values())
        if since is None or plan.get("at", 0) <= since:
            continue
        ready = _ready_by_deployment(status, exclude=exclude)
        for dep, pools in plan.get("placement", {}).items():
            wanted = sum(n for where, n in pools.items() if not (exclude and where.startswith(exclude + "/")))
            model = served.get(dep, dep)
            if f"{event}:{model}" not in settled and ready.get(dep, 0) >= wanted:
                settled[f"{event}:{model}"] = time.time()


def _lose_region(fleet, status: dict, opts: DemoOptions, timeline: Timeline) -> dict:
    ready = {c["cluster_id"]: c.get("replicas", {}).get("ready", 0) for c in status.get("clusters", [])}
    victim = opts.lose_cluster or max(ready, key=lambda k: (ready[k], k), default="")
    if not victim:
        return {}
    details = next((c for c in status.get("clusters", []) if c["cluster_id"] == victim), {})
    lost_replicas = [r for r in details.get("replica_details", []) if r.get("state") == "ready"]
    # The loss begins as the kill does (killing and sweeping a cluster's processes takes seconds on a
    # loaded machine, and requests cut meanwhile are the loss's).
    at, at_wall = time.monotonic(), time.time()
    pids = fleet.kill_cluster(victim)
    timeline.note(f"REGION LOST: cluster {victim} ({details.get('cloud')} {details.get('region')}) killed: agent and "
                  f"{len(pids) - 1} replica processes")
    return {"cluster": victim, "at": at, "at_wall": at_wall,
            "endpoints": {r.get("endpoint") for r in lost_replicas}}


async def _await_replacement(fleet, session, lost: dict, status: dict, recorder: traffic.Recorder,
                             timeline: Timeline, wait_s: float, out, poll_s: float = 1.0) -> dict:
    """With the traffic over, keep watching (up to ``wait_s``) until the lost region's capacity is
    re-placed, so the report can say how long it took; returns the last status."""
    print(f"traffic done; waiting up to {wait_s:.0f}s for the capacity of {lost['cluster']} to be re-placed",
          file=out, flush=True)
    deadline = time.monotonic() + wait_s
    while True:
        _track_recovery(lost, status, recorder, timeline)
        if "replaced_s" in lost or time.monotonic() >= deadline:
            return status
        await asyncio.sleep(poll_s)
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError):
            status = await fleet.status(session)


def _ready_by_deployment(status: dict, exclude: str = "") -> dict[str, int]:
    out: dict[str, int] = {}
    for c in status.get("clusters", []):
        if c["cluster_id"] == exclude or c.get("lost"):
            continue
        for r in c.get("replica_details", []):
            if r.get("state") == "ready":
                out[r.get("deployment")] = out.get(r.get("deployment"), 0) + 1
    return out


def _track_recovery(lost: dict, status: dict, recorder: traffic.Recorder, timeline: Timeline) -> None:
    now = time.monotonic()
    if "routed_around_s" not in lost:
        # Routed around once requests started after the loss succeed again for 3 s straight.
        recent = recorder.since(lost["at_wall"])
        failures = [r.started_s for r in recent if not r.ok]
        last_failure = max(failures, default=lost["at_wall"])
        if time.time() - last_failure >= 3.0 and any(r.ok and r.started_s > last_failure for r in recent):
            lost["routed_around_s"] = round(last_failure - lost["at_wall"], 1)
            if failures:
                timeline.note(f"traffic routed around {lost['cluster']}: last failed request "
                              f"{lost['routed_around_s']:.1f}s after the loss ({len(failures)} failed)")
            else:
                timeline.note(f"traffic routed around {lost['cluster']} with no failed request "
                              "(requests to its replicas were retried elsewhere before their first byte)")
    if "replaced_s" not in lost:
        # Re-placed once a plan made after the loss is carried out: every deployment has, outside the
        # lost cluster, as many ready replicas as that plan wants there. A plan made after the loss
        # places nothing in the lost cluster (its pools are gone once the scheduler marks it lost).
        # That plan may come before this poll sees the cluster marked lost, and be the last plan for
        # a while: waiting for a plan newer than the poll timed the next plan, not the re-placement.
        plan = status.get("plan") or {}
        known_lost = any(c["cluster_id"] == lost["cluster"] and c.get("lost")
                         for c in status.get("clusters", []))
        if known_lost and "seen_lost_wall" not in lost:
            lost["seen_lost_wall"] = time.time()
            timeline.note(f"scheduler marked {lost['cluster']} lost after {now - lost['at']:.1f}s")
        placement = plan.get("placement", {})
        there = any(where.startswith(lost["cluster"] + "/") for pools in placement.values() for where, n in pools.items()
                    if n > 0)
        if "seen_lost_wall" in lost and plan.get("at", 0) > lost["at_wall"] and not there:
            wanted = {d: sum(pools.values()) for d, pools in placement.items()}
            ready = _ready_by_deployment(status, exclude=lost["cluster"])
            if all(ready.get(d, 0) >= n for d, n in wanted.items()):
                lost["replaced_s"] = round(now - lost["at"], 1)
                timeline.note(f"capacity of {lost['cluster']} re-placed: the plan made after the loss is carried out "
                              f"after {lost['replaced_s']:.1f}s")
