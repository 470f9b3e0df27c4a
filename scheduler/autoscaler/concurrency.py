"""The default autoscaling policy: a concurrency target per replica, with Knative's stable and
panic windows, the HPA's stabilisation rule for scale delays, an SLO override and scale to zero.

Rules, in order (all times from ``ctx.now_s``):
1. Concurrency = max(requests running + queued on the ready replicas, requests in flight at the
   routers). Averaged over the stable window (default 60 s) and the panic window (default 6 s).
   Replicas wanted = ceil(average / (target_concurrency_per_replica x target_utilization)); when the
   context carries ``replica_capacity_rps`` the request rate gives a second figure and the larger wins.
2. Panic: when the panic-window figure reaches ``panic_threshold`` x the ready replicas, scale up at
   once (no delay) and do not scale down until a stable window has passed without panic.
3. SLO: TTFT p99 (worst ready replica or router) above the SLA, or KV cache usage above
   ``kv_usage_high``, asks for ``slo_step`` more replicas (at least one) even if concurrency looks fine;
   not for a TTFT breach that stays over the SLA without the replicas' queue time (their queue time
   p90): that part is prefill and network, which more replicas do not shorten.
4. Hysteresis: a figure within ``tolerance`` of the current count counts as the current count; a
   scale-up happens only when every recommendation for ``scale_up_delay_s`` asked for more (to the
   smallest of them), a scale-down only when every one for ``scale_down_delay_s`` asked for less (to
   the largest of them). A noisy signal therefore never flaps.
5. Scale to zero (``scale_to_zero``): after ``scale_to_zero_after_s`` without a request, 0 replicas;
   from 0, the first request (router traffic or in-flight) brings it back to at least 1 at once.
6. Bounds: ``min_replicas`` (at least 1 without scale to zero), and at most what ``max_replicas``
   replicas can be in reference replicas (``ctx.max_reference_replicas``: max_replicas replicas of
   the largest allowed GPU type; the solver holds the replica count itself to max_replicas);
   ``warm_pool`` spare replicas on top of a non-zero demand. Every client region with traffic gets
   at least one replica.
7. Split: the replicas are apportioned over client regions by their share of the request rate over
   the stable window (by requests in flight only while no rate is known), since they are counted in
   replicas of the reference GPU type, whose capacity is a request rate. A window without traffic
   (``min_replicas`` held through a quiet spell) keeps the split of the last window that had some,
   so the replicas stay near the regions that will most likely send the next requests rather than
   move; only a deployment that never had traffic is split round-robin over the SLA's regions.
8. Coverage: the SLA's client regions that sent traffic (rate or requests in flight) within the last
   ``max(stable_window_s, scale_down_delay_s)`` are ``covered_regions``: the solver keeps a replica
   within reach of each (held as long as a scale-down would wait, so an intermittent region does
   not flap); none while the decision is zero replicas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pydantic

from scheduler.autoscaler import registry, types


class ConcurrencySettings(pydantic.BaseModel):
    """Tuning of the concurrency policy; the spec's ``scaling`` section holds the per-deployment knobs."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    stable_window_s: float = pydantic.Field(default=60.0, gt=0, le=3600)
    panic_window_s: float = pydantic.Field(default=6.0, gt=0, le=600)
    panic_threshold: float = pydantic.Field(default=2.0, gt=1.0, le=100,
                                            description="Panic when short-window demand / ready replicas >= this.")
    tolerance: float = pydantic.Field(default=0.1, ge=0, lt=1,
                                      description="Relative dead band around the current count.")
    slo_step: float = pydantic.Field(default=0.25, gt=0, le=4,
                                     description="Share of current replicas added on an SLO breach (>= 1 replica).")
    kv_usage_high: float = pydantic.Field(default=0.92, gt=0, le=1)

    @pydantic.model_validator(mode="after")
    def _windows(self) -> ConcurrencySettings:
        if self.panic_window_s > self.stable_window_s:
            raise ValueError(f"panic_window_s ({self.panic_window_s}) must be <= stable_window_s "
                             f"({self.stable_window_s})")
        return self


@registry.register("concurrency")
class ConcurrencyPolicy:
    """See the module docstring. Stateless itself: everything it remembers is in AutoscaleState."""

    name = "concurrency"

    def __init__(self, **settings: object) -> None:
        self.settings = ConcurrencySettings(**settings)

    def decide(self, ctx: types.AutoscaleContext,
               state: types.AutoscaleState) -> tuple[types.Decision, types.AutoscaleState]:
        cfg, scaling, now = self.settings, ctx.spec.scaling, ctx.now_s
        sample = _observe(ctx)
        samples = tuple(s for s in state.samples if s.at_s > now - cfg.stable_window_s) + (sample,)
        active = sample.concurrency > 0 or sample.requests_per_s > 0
        last_traffic_s = now if active else (state.last_traffic_s if state.last_traffic_s is not None else now)

        per_replica = scaling.target_concurrency_per_replica * scaling.target_utilization
        stable = _mean(samples, None)
        quick = _mean(samples, now - cfg.panic_window_s)
        want_stable = _replicas_for(stable, per_replica, ctx.replica_capacity_rps, scaling.target_utilization)
        want_panic = _replicas_for(quick, per_replica, ctx.replica_capacity_rps, scaling.target_utilization)

        ready = len(ctx.loads)
        current = ctx.current_replicas
        reasons: list[str] = [f"concurrency {stable[0]:.1f} over {cfg.stable_window_s:g}s -> {want_stable} "
                              f"(target {per_replica:g}/replica)"]
        panic_until_s = state.panic_until_s
        if want_panic > max(current, ready) and want_panic >= cfg.panic_threshold * max(ready, 1):
            panic_until_s = now + cfg.stable_window_s
            reasons.append(f"panic: {quick[0]:.1f} in flight over {cfg.panic_window_s:g}s -> {want_panic}")
        in_panic = now < panic_until_s

        want = max(want_stable, want_panic) if in_panic else want_stable
        breach, scales = _slo_breach(ctx, cfg)
        if scales:
            want = max(want, current + max(1, math.ceil(current * cfg.slo_step)))
        if breach:
            reasons.append(breach)

        floor = scaling.least_replicas
        weights = _region_weights(samples)  # each client region's share of the window's demand
        idle_s = now - last_traffic_s
        if scaling.scale_to_zero and not active and idle_s >= scaling.scale_to_zero_after_s:
            demand, floor_note = 0, f"idle {idle_s:.0f}s >= {scaling.scale_to_zero_after_s:g}s: scale to zero"
        else:
            active_regions = sum(1 for w in weights.values() if w > 0)
            keep_one = 1 if (active or current > 0) else 0
            demand = max(want, floor, keep_one, active_regions)
            floor_note = ""
        cap = max(scaling.max_replicas, ctx.max_reference_replicas or 0)
        if demand > cap:
            unit = " of the largest GPU type allowed, in reference replicas" if cap > scaling.max_replicas else ""
            reasons.append(f"capped at {cap} (max_replicas {scaling.max_replicas}{unit})")
        demand = min(demand, cap)
        target = min(demand + scaling.warm_pool, cap) if demand > 0 else 0
        if abs(target - current) <= cfg.tolerance * current and target != 0 and current != 0:
            target = current

        history = _trim(state.recommendations, now - max(scaling.scale_up_delay_s, scaling.scale_down_delay_s))
        history += ((now, target),)
        decided, how = _stabilise(history, current, target, now, scaling.scale_up_delay_s,
                                  scaling.scale_down_delay_s, in_panic or current == 0 or target == 0)
        if in_panic and decided < current:
            decided, how = current, "no scale-down in panic"
        if floor_note:
            reasons.append(floor_note)
        if how:
            reasons.append(how)
        demand_replicas = max(0, min(decided, demand) if decided > 0 else 0)
        split = weights if any(w > 0 for w in weights.values()) else dict(state.region_split)
        if split is not weights and split and decided > 0:
            reasons.append("no traffic in the window: regions split as when it last had some")
        by_region = _apportion(decided, split, ctx.spec.sla.client_regions)
        hold_s = max(cfg.stable_window_s, scaling.scale_down_delay_s)
        seen = {r: t for r, t in state.region_seen_s.items() if t > now - hold_s}
        seen.update({r: now for r, w in sample.region_weight.items() if w > 0})
        covered = tuple(sorted(r for r in seen if r in ctx.spec.sla.client_regions)) if decided > 0 else ()
        decision = types.Decision(
            replicas=decided,
            replicas_by_region=by_region,
            reason="; ".join(reasons),
            demand_replicas=demand_replicas,
            observed_concurrency=sample.concurrency,
            panic=in_panic,
            slo_breach=bool(breach),
            covered_regions=covered,
        )
        last_change_s = now if decided != current else state.last_change_s
        return decision, types.AutoscaleState(samples, history, last_traffic_s, panic_until_s, last_change_s, seen,
                                              split)


def _observe(ctx: types.AutoscaleContext) -> types.Sample:
    on_replicas = sum(load.outstanding for load in ctx.loads)
    at_routers = sum(t.in_flight for t in ctx.traffic)
    rps = sum(t.requests_per_s for t in ctx.traffic)
    known = set(ctx.spec.sla.client_regions)
    # A region outside the SLA's list still counts in the totals; its share goes to the listed
    # regions (the solver has no latency target for it).
    listed = [t for t in ctx.traffic if t.client_region in known]
    # A region's share is its share of the request rate: the split is in replicas of the reference
    # GPU type, and what a region needs of those follows from how many requests it sends, not from
    # how long they take where they run now. Requests in flight grow with the latency of the
    # replicas that serve them, so weighing them gave a region served by slow GPUs (L4s within a
    # tight max_rtt_ms) a multiple of the replicas its rate needs. In-flight counts split only when
    # no rate is known yet (the first requests held at the routers, scale from zero).
    if any(t.requests_per_s > 0 for t in listed):
        weights = {t.client_region: t.requests_per_s for t in listed}
    else:
        weights = {t.client_region: float(t.in_flight) for t in listed}
    return types.Sample(ctx.now_s, float(max(on_replicas, at_routers)), rps, weights)


def _mean(samples: Sequence[types.Sample], since_s: float | None) -> tuple[float, float]:
    chosen = [s for s in samples if since_s is None or s.at_s > since_s] or [samples[-1]]
    return (sum(s.concurrency for s in chosen) / len(chosen), sum(s.requests_per_s for s in chosen) / len(chosen))


def _replicas_for(observed: tuple[float, float], per_replica: float, capacity_rps: float | None,
                  utilization: float) -> int:
    concurrency, rps = observed
    want = math.ceil(concurrency / per_replica - 1e-9)
    if capacity_rps:
        want = max(want, math.ceil(rps / (capacity_rps * utilization) - 1e-9))
    return max(0, want)


def _slo_breach(ctx: types.AutoscaleContext, cfg: ConcurrencySettings) -> tuple[str, bool]:
    """The SLO rule's reason ("" when the SLO holds) and whether it asks for more replicas: a TTFT
    breach that queueing explains (``_ttft_breach``), or KV cache pressure, each on its own."""
    if not ctx.loads:
        return "", False
    reason, scales = _ttft_breach(ctx)
    reasons = [reason] if reason else []
    kv = sum(load.kv_cache_usage for load in ctx.loads) / len(ctx.loads)
    if kv > cfg.kv_usage_high:
        reasons.append(f"KV cache {kv:.0%} > {cfg.kv_usage_high:.0%}")
        scales = True
    return "; ".join(reasons), scales


def _ttft_breach(ctx: types.AutoscaleContext) -> tuple[str, bool]:
    """The TTFT part of the SLO rule: its reason ("" within the SLA) and whether more replicas help.

    A TTFT p99 over the SLA is the queue time before prefill plus the prefill, the network and the
    router's hop. Only the queue shrinks with more replicas. A request in the TTFT tail is mostly
    there for its long prompt with an ordinary wait (the p99 of a sum of independent waits and
    prefills is well below the sum of their p99s), so the wait to take off is the queue time p90:
    a replica's own, and for a client region's TTFT at the routers the worst ready replica's. A
    breach whose TTFT without that wait is still over the SLA is prefill or distance (the solver's
    to mend, with faster GPUs or nearer pools). The rule adds replicas unless every breach, at
    every replica and client region over the SLA, is of that kind; then the concurrency figure
    alone sizes the deployment (it neither adds nor holds replicas for the breach). A replica in
    breach that does not report its queue time (an older agent) makes the breach count, as nothing
    tells the two apart there, and so does a region's breach when no replica reports one. A replica
    with no figures yet (just READY, not scraped: its load is empty) is in no breach and changes
    nothing: it used to make every breach count, so each replica start during a prefill-bound
    breach added a quarter more replicas. The p90 misses queueing that only a few percent of requests meet (short
    bursts): such a breach is read as prefill, and the concurrency and panic rules answer it."""
    sla_ms = ctx.spec.sla.ttft_p99_ms
    regions = [(t.client_region, t.ttft_p99_ms) for t in ctx.traffic if t.ttft_p99_ms > sla_ms]
    replicas = [load for load in ctx.loads if load.ttft.p99_ms > sla_ms]
    if not regions and not replicas:
        return "", False
    worst = max([ms for _, ms in regions] + [load.ttft.p99_ms for load in replicas])
    reason = f"SLO: TTFT p99 {worst:.0f} ms > SLA {sla_ms:g} ms"
    queues = [load.queue_time for load in ctx.loads if load.queue_time is not None]
    if any(load.queue_time is None for load in replicas) or (regions and not queues):
        return reason, True
    queue_ms = max((q.p90_ms for q in queues), default=0.0)
    if (any(load.ttft.p99_ms - load.queue_time.p90_ms <= sla_ms for load in replicas if load.queue_time)
            or any(ms - queue_ms <= sla_ms for _, ms in regions)):
        return f"{reason} (queue time p90 up to {queue_ms:.0f} ms)", True
    where = ", ".join(f"{region} {ms:.0f} ms" for region, ms in regions) or "at the replicas"
    return (f"{reason} ({where}), but queue time p90 is at most {queue_ms:.0f} ms and without it the TTFT "
            f"stays over the SLA (prefill and network): more replicas would not shorten it"), False


def _trim(history: Sequence[tuple[float, int]], cutoff_s: float) -> tuple[tuple[float, int], ...]:
    """Recommendations since ``cutoff_s``, plus the last one before it: that one shows whether a
    run of recommendations began before the delay window (decisions need not land on its edge)."""
    older = [r for r in history if r[0] < cutoff_s]
    return tuple(older[-1:]) + tuple(r for r in history if r[0] >= cutoff_s)


def _stabilise(history: Sequence[tuple[float, int]], current: int, target: int, now: float,
               up_delay_s: float, down_delay_s: float, immediate: bool) -> tuple[int, str]:
    """Apply a change only when every recommendation over the delay agreed on its direction."""
    if target == current:
        return current, ""
    if immediate:
        return target, f"{current} -> {target} at once"
    up = target > current
    delay = up_delay_s if up else down_delay_s
    run: list[int] = []
    start = now
    for at_s, rec in reversed(history):
        if (rec > current) != up or rec == current:
            break
        run.append(rec)
        start = at_s
    held_s = now - start
    if held_s + 1e-9 < delay:
        return current, f"{'up' if up else 'down'} to {target} waits ({held_s:.0f}/{delay:g}s)"
    window = [rec for at_s, rec in history if at_s >= now - delay and at_s >= start] or run
    chosen = min(window) if up else max(window)
    return chosen, f"{current} -> {chosen} after {held_s:.0f}s"


def _region_weights(samples: Sequence[types.Sample]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for s in samples:
        norm = sum(s.region_weight.values())
        for region, w in s.region_weight.items():
            totals[region] = totals.get(region, 0.0) + (w / norm if norm > 0 else 0.0)
    return totals


def _apportion(total: int, weights: Mapping[str, float], client_regions: Sequence[str]) -> dict[str, int]:
    """Split ``total`` replicas over regions: one for each region with demand (largest first), the
    rest by largest remainder of demand share. Without any demand known, round-robin over the SLA's
    regions."""
    out = {region: 0 for region in client_regions}
    if total <= 0:
        return out
    active = sorted((r for r, w in weights.items() if w > 0), key=lambda r: (-weights[r], r))
    if not active:
        for i in range(total):
            out[client_regions[i % len(client_regions)]] += 1
        return out
    for region in active[:total]:
        out[region] += 1
    rest = total - min(total, len(active))
    if rest:
        norm = sum(weights[r] for r in active)
        quotas = {r: rest * weights[r] / norm for r in active}
        for r in active:
            out[r] += int(quotas[r])
        left = rest - sum(int(q) for q in quotas.values())
        for r in sorted(active, key=lambda r: (-(quotas[r] - int(quotas[r])), r))[:left]:
            out[r] += 1
    return out
