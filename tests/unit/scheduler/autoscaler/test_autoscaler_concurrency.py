"""The concurrency autoscaling policy, driven with an injected clock (no real time passes)."""

from __future__ import annotations

import hypothesis
import hypothesis.strategies as st
import pydantic
import pytest

from meridian import fleet
from meridian.spec import deployment as deployment_spec
from scheduler import autoscaler

T0 = 1_700_000_000.0


def make_spec(**scaling: object) -> deployment_spec.ModelDeploymentSpec:
    base = {"min_replicas": 1, "max_replicas": 20, "target_concurrency_per_replica": 10,
            "target_utilization": 1.0, "scale_up_delay_s": 30, "scale_down_delay_s": 120}
    base.update(scaling)
    return deployment_spec.ModelDeploymentSpec.model_validate({
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
        "resources": {"gpu_types": ["L4"]},
        "sla": {"ttft_p99_ms": 800, "tpot_p99_ms": 100, "client_regions": ["na-east", "eu-west"]},
        "scaling": base,
    })


class Driver:
    """Steps a policy the way the scheduler does: the decided count becomes the current count,
    and every current replica reports the load the test sets."""

    def __init__(self, spec: deployment_spec.ModelDeploymentSpec, replicas: int = 1,
                 max_reference_replicas: int | None = None, **settings: object):
        self.spec = spec
        self.max_reference_replicas = max_reference_replicas
        self.policy = autoscaler.get("concurrency", **settings)
        self.state = autoscaler.AutoscaleState()
        self.replicas = replicas
        self.now = T0
        self.history: list[int] = []

    def step(self, dt_s: float, in_flight: dict[str, int], ttft_p99_ms: float = 100.0,
             kv: float = 0.3, queue_p90_ms: float | None = None) -> autoscaler.Decision:
        """``queue_p90_ms``: every replica's queue time p90 (p50 = p90 / 2, p99 = 2 x p90); None:
        the replicas do not report it."""
        self.now += dt_s
        total = sum(in_flight.values())
        per = total // self.replicas if self.replicas else 0
        queue = (None if queue_p90_ms is None else
                 fleet.LatencyPercentiles(queue_p90_ms / 2, queue_p90_ms, queue_p90_ms * 2))
        loads = tuple(fleet.ReplicaLoad(running_requests=per, kv_cache_usage=kv,
                                        ttft=fleet.LatencyPercentiles(p99_ms=ttft_p99_ms), queue_time=queue)
                      for _ in range(self.replicas))
        traffic = tuple(autoscaler.RegionTraffic(r, requests_per_s=n / 2.0, in_flight=n) for r, n in in_flight.items())
        ctx = autoscaler.AutoscaleContext("chat", self.spec, self.now, self.replicas, loads, traffic,
                                          max_reference_replicas=self.max_reference_replicas)
        decision, self.state = self.policy.decide(ctx, self.state)
        self.replicas = decision.replicas
        self.history.append(decision.replicas)
        return decision


def test_steady_load_reaches_concurrency_target_after_the_up_delay():
    """50 in flight at 10 per replica asks for 5 of 3 replicas (no panic), applied once the 30 s delay held."""
    drv = Driver(make_spec(), replicas=3)
    first = drv.step(5, {"na-east": 50})
    assert first.replicas == 3 and "waits" in first.reason and not first.panic
    for _ in range(6):
        decision = drv.step(5, {"na-east": 50})
    assert decision.replicas == 5
    assert decision.replicas_by_region == {"na-east": 5, "eu-west": 0}


def test_spike_enters_panic_and_scales_up_at_once():
    """A sudden 10x spike scales up within one step (panic window), without waiting for the delay."""
    drv = Driver(make_spec(), replicas=2)
    for _ in range(12):
        drv.step(5, {"na-east": 15})
    assert drv.replicas == 2
    spike = drv.step(5, {"na-east": 150})
    assert spike.panic
    assert spike.replicas >= 8  # the 6 s panic window averages the spike with the sample before it
    assert "panic" in spike.reason
    assert drv.step(5, {"na-east": 150}).replicas >= 15


def test_no_scale_down_while_in_panic():
    """Right after a spike ends, panic mode holds the count instead of dropping it."""
    drv = Driver(make_spec(), replicas=2)
    for _ in range(12):
        drv.step(5, {"na-east": 15})
    peak = drv.step(5, {"na-east": 150}).replicas
    after = drv.step(5, {"na-east": 5})
    assert after.replicas == peak


def test_noisy_signal_does_not_flap():
    """Load alternating around the threshold (35..45 in flight) changes the count at most once."""
    drv = Driver(make_spec(), replicas=4)
    for i in range(120):
        drv.step(5, {"na-east": 45 if i % 2 else 35})
    changes = sum(1 for a, b in zip(drv.history, drv.history[1:], strict=False) if a != b)
    assert changes <= 1
    assert 4 <= drv.replicas <= 5


def test_scale_down_waits_for_the_down_delay_and_takes_the_largest_recent_figure():
    """After load drops, replicas stay for scale_down_delay_s (120 s), then go down."""
    drv = Driver(make_spec(), replicas=8)
    for _ in range(20):
        drv.step(5, {"na-east": 80})
    assert drv.replicas == 8
    times_at_8 = 0
    for _ in range(60):
        decision = drv.step(5, {"na-east": 20})
        if decision.replicas == 8:
            times_at_8 += 1
    assert times_at_8 * 5 >= 120  # held for at least the delay
    assert drv.replicas == 2


def test_slo_breach_scales_up_although_concurrency_is_fine():
    """TTFT p99 above the SLA adds replicas even when concurrency asks for none."""
    drv = Driver(make_spec(), replicas=4)
    for _ in range(15):
        drv.step(5, {"na-east": 20})
    assert drv.replicas == 4
    for _ in range(8):
        decision = drv.step(5, {"na-east": 20}, ttft_p99_ms=2500)
    assert decision.slo_breach
    assert drv.replicas > 4
    assert "SLO" in decision.reason


def test_a_prefill_bound_breach_adds_no_replicas_and_says_why():
    """TTFT p99 900 ms over an 800-ms SLA while the replicas' queue time p90 is 40 ms: without the
    queue the TTFT is still over the SLA (long prompts' prefill, distance), so more replicas would
    not shorten it. Past both delays the count is what concurrency asks (40 in flight at 10 per
    replica: 4), and the reason names the queue time."""
    drv = Driver(make_spec(), replicas=4)
    for _ in range(40):  # 200 s: past scale_up_delay_s (30) and scale_down_delay_s (120)
        decision = drv.step(5, {"na-east": 40}, ttft_p99_ms=900, queue_p90_ms=40)
        assert drv.replicas == 4
    assert decision.slo_breach
    assert "queue time" in decision.reason and "would not shorten" in decision.reason


def test_kv_pressure_scales_beside_a_prefill_bound_breach():
    """KV cache at 97% asks for more replicas even while the TTFT breach is prefill-bound: each
    signal counts on its own, and the reason gives both."""
    drv = Driver(make_spec(), replicas=4)
    for _ in range(10):
        decision = drv.step(5, {"na-east": 40}, ttft_p99_ms=900, kv=0.97, queue_p90_ms=40)
    assert drv.replicas > 4
    assert "KV cache 97%" in decision.reason and "would not shorten" in decision.reason


@pytest.mark.parametrize("queue_p90_ms", [
    150.0,  # 900 - 150 = 750 ms is within the SLA: the queue is what breaks it
    None,   # the replicas do not report queue time: nothing tells queueing from prefill
])
def test_a_breach_that_queueing_may_explain_still_scales_up(queue_p90_ms):
    """A TTFT p99 of 900 ms over an 800-ms SLA adds replicas when the queue time could account for
    the excess, or when it is not reported."""
    drv = Driver(make_spec(), replicas=4)
    for _ in range(15):
        drv.step(5, {"na-east": 20})
    for _ in range(8):
        decision = drv.step(5, {"na-east": 20}, ttft_p99_ms=900, queue_p90_ms=queue_p90_ms)
    assert drv.replicas > 4
    assert "would not shorten" not in decision.reason


def test_a_breach_queueing_explains_in_one_region_scales_beside_a_prefill_bound_one():
    """ap-south's TTFT (900 ms) is its prompts' prefill: without the 40-ms queue it stays over the
    800-ms SLA. eu-west's (820 ms) is not: without the queue it is within. One fixable breach is
    enough to scale, whatever the other regions show; with eu-west within its SLA, none is added."""
    spec = deployment_spec.ModelDeploymentSpec.model_validate({
        **make_spec(scale_up_delay_s=0).model_dump(exclude_none=True),
        "sla": {"ttft_p99_ms": 800, "tpot_p99_ms": 100, "client_regions": ["ap-south", "eu-west"]}})
    policy = autoscaler.get("concurrency")
    loads = tuple(fleet.ReplicaLoad(running_requests=4, ttft=fleet.LatencyPercentiles(p99_ms=700),
                                    queue_time=fleet.LatencyPercentiles(20, 40, 90)) for _ in range(4))

    def decide(eu_west_ms: float) -> autoscaler.Decision:
        traffic = (autoscaler.RegionTraffic("ap-south", requests_per_s=2.0, in_flight=8, ttft_p99_ms=900),
                   autoscaler.RegionTraffic("eu-west", requests_per_s=2.0, in_flight=8, ttft_p99_ms=eu_west_ms))
        ctx = autoscaler.AutoscaleContext("chat", spec, T0, 4, loads, traffic)
        return policy.decide(ctx, autoscaler.AutoscaleState())[0]

    fixable, bound = decide(820), decide(700)
    assert fixable.slo_breach and fixable.replicas > 4
    assert bound.slo_breach and bound.replicas == 4
    assert "ap-south 900 ms" in bound.reason and "would not shorten" in bound.reason


def test_kv_pressure_counts_as_a_breach():
    """KV cache usage above kv_usage_high asks for more replicas."""
    drv = Driver(make_spec(), replicas=3)
    for _ in range(10):
        decision = drv.step(5, {"na-east": 10}, kv=0.97)
    assert drv.replicas > 3
    assert "KV" in decision.reason


def test_scale_to_zero_after_idle_and_back_to_one_on_first_request():
    """Idle past scale_to_zero_after_s goes to 0; the first request brings 1 replica at once."""
    drv = Driver(make_spec(min_replicas=0, scale_to_zero=True, scale_to_zero_after_s=300), replicas=2)
    drv.step(5, {"na-east": 10})
    for _ in range(100):
        drv.step(5, {})
        if drv.replicas == 0:
            break
    assert drv.replicas == 0
    assert drv.now - T0 >= 300
    zero = drv.step(5, {})
    assert zero.replicas == 0 and zero.replicas_by_region == {"na-east": 0, "eu-west": 0}
    back = drv.step(1, {"eu-west": 1})
    assert back.replicas == 1
    assert back.replicas_by_region == {"na-east": 0, "eu-west": 1}


def test_without_scale_to_zero_one_replica_stays():
    """min_replicas 0 without scale_to_zero keeps one replica through a long idle period."""
    drv = Driver(make_spec(min_replicas=0), replicas=3)
    for _ in range(200):
        drv.step(5, {})
    assert drv.replicas == 1


def test_min_max_and_warm_pool_bound_the_count():
    """Demand beyond max_replicas is capped; the warm pool adds spares within max."""
    drv = Driver(make_spec(max_replicas=6, warm_pool=2), replicas=1)
    for _ in range(20):
        decision = drv.step(5, {"na-east": 1000})
    assert decision.replicas == 6
    drv2 = Driver(make_spec(min_replicas=2, warm_pool=1), replicas=1)
    for _ in range(10):
        low = drv2.step(5, {"na-east": 1})
    assert low.replicas == 3 and low.demand_replicas == 2


def test_the_cap_is_what_max_replicas_replicas_can_be_in_reference_replicas():
    """The decision counts reference replicas (say L4s) while max_replicas counts replicas, which
    may be H100s worth 29 L4s each: a spike that needs 100 L4s' worth is not held to 6 (the solver
    holds the replica count to 6), and the reason says where the cap is when it binds."""
    drv = Driver(make_spec(max_replicas=6, warm_pool=2), replicas=1, max_reference_replicas=174)
    for _ in range(20):
        decision = drv.step(5, {"na-east": 1000})
    assert decision.replicas == 100 + 2 and decision.demand_replicas == 100
    capped = Driver(make_spec(max_replicas=6), replicas=1, max_reference_replicas=40)
    for _ in range(20):
        decision = capped.step(5, {"na-east": 1000})
    assert decision.replicas == 40
    assert "capped at 40 (max_replicas 6 of the largest GPU type allowed, in reference replicas)" in decision.reason


def test_the_context_refuses_a_reference_cap_below_one():
    with pytest.raises(ValueError, match="max_reference_replicas must be >= 1"):
        autoscaler.AutoscaleContext("chat", make_spec(), T0, 1, max_reference_replicas=0)


def test_every_region_with_traffic_gets_a_replica_and_counts_add_up():
    """Per-region replicas add up to the total, split by demand share, one at least per active region."""
    drv = Driver(make_spec(), replicas=1)
    for _ in range(10):
        decision = drv.step(5, {"na-east": 90, "eu-west": 2})
    assert sum(decision.replicas_by_region.values()) == decision.replicas
    assert decision.replicas_by_region["eu-west"] >= 1
    assert decision.replicas_by_region["na-east"] > decision.replicas_by_region["eu-west"]


def test_split_follows_request_rate_not_requests_in_flight():
    """A region whose requests sit long on slow replicas (many in flight, few per second) gets its
    share of the request rate, not of the in-flight count: the split is in reference replicas."""
    policy = autoscaler.get("concurrency")
    spec = make_spec(scale_up_delay_s=0, min_replicas=1)
    traffic = (autoscaler.RegionTraffic("na-east", requests_per_s=7.0, in_flight=8),
               autoscaler.RegionTraffic("eu-west", requests_per_s=1.0, in_flight=64))
    ctx = autoscaler.AutoscaleContext("chat", spec, T0, 8, (fleet.ReplicaLoad(running_requests=9),) * 8, traffic,
                                      replica_capacity_rps=1.0)
    decision, _ = policy.decide(ctx, autoscaler.AutoscaleState())
    assert decision.replicas == 8
    assert decision.replicas_by_region == {"na-east": 6, "eu-west": 2}


def test_split_uses_requests_in_flight_while_no_rate_is_known():
    """Before any rate is measured (first requests held at the routers), in-flight counts split."""
    policy = autoscaler.get("concurrency")
    spec = make_spec(scale_up_delay_s=0, min_replicas=4)
    traffic = (autoscaler.RegionTraffic("na-east", in_flight=1), autoscaler.RegionTraffic("eu-west", in_flight=5))
    ctx = autoscaler.AutoscaleContext("chat", spec, T0, 4, (), traffic)
    decision, _ = policy.decide(ctx, autoscaler.AutoscaleState())
    assert decision.replicas_by_region == {"na-east": 1, "eu-west": 3}


def test_request_rate_signal_with_replica_capacity():
    """With replica_capacity_rps set, request rate alone (low concurrency) asks for replicas."""
    policy = autoscaler.get("concurrency")
    spec = make_spec(scale_up_delay_s=0)
    state = autoscaler.AutoscaleState()
    ctx = autoscaler.AutoscaleContext("chat", spec, T0, 1, (fleet.ReplicaLoad(running_requests=1),),
                                      (autoscaler.RegionTraffic("na-east", requests_per_s=20.0, in_flight=1),),
                                      replica_capacity_rps=4.0)
    decision, _ = policy.decide(ctx, state)
    assert decision.replicas == 5


def test_registry_rejects_unknown_policy_and_bad_settings():
    """Unknown policy names list the registered ones; bad settings name the field."""
    with pytest.raises(autoscaler.UnknownPolicy, match="concurrency"):
        autoscaler.get("nope")
    with pytest.raises(pydantic.ValidationError, match="panic_window_s"):
        autoscaler.get("concurrency", stable_window_s=5, panic_window_s=10)
    assert "concurrency" in autoscaler.names()


def test_traffic_by_region_aggregates_routers():
    """Samples of several routers add up per region for the chosen model; TTFT takes the worst."""
    samples = [fleet.TrafficSample("chat", "na-east", requests=100, in_flight=3, ttft_p99_ms=200),
               fleet.TrafficSample("chat", "na-east", requests=50, in_flight=2, ttft_p99_ms=400),
               fleet.TrafficSample("other", "na-east", requests=999),
               fleet.TrafficSample("chat", "eu-west", requests=10)]
    out = autoscaler.traffic_by_region(samples, window_s=10, model="chat")
    assert out == (autoscaler.RegionTraffic("eu-west", 1.0, 0, 0.0), autoscaler.RegionTraffic("na-east", 15.0, 5, 400.0))
    with pytest.raises(ValueError, match="window_s"):
        autoscaler.traffic_by_region(samples, window_s=0)


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(st.lists(st.tuples(st.integers(1, 30), st.integers(0, 200), st.integers(0, 50),
                                     st.sampled_from([100.0, 3000.0])), min_size=1, max_size=40),
                  st.booleans(), st.integers(0, 3))
def test_decisions_always_within_bounds_and_regions_add_up(steps, to_zero, warm):
    """Whatever the load sequence, replicas stay within [min, max] (0 only with scale to zero) and
    the per-region split adds up to the total."""
    spec = make_spec(min_replicas=0 if to_zero else 1, scale_to_zero=to_zero, scale_to_zero_after_s=60,
                     max_replicas=12, warm_pool=warm)
    drv = Driver(spec, replicas=1)
    for dt, east, west, ttft in steps:
        decision = drv.step(dt, {"na-east": east, "eu-west": west}, ttft_p99_ms=ttft)
        assert sum(decision.replicas_by_region.values()) == decision.replicas
        assert decision.replicas <= 12
        assert decision.replicas >= (0 if to_zero else 1)
        if decision.replicas == 0:
            assert to_zero and east == 0 and west == 0


def test_regions_with_traffic_are_covered_and_stay_covered_for_the_down_delay():
    """A region that sends traffic is in covered_regions at once; after it goes quiet it stays
    covered for scale_down_delay_s (120 s here), then drops out; at zero replicas nothing is."""
    drv = Driver(make_spec(), replicas=1)
    assert drv.step(5, {"na-east": 5, "eu-west": 1}).covered_regions == ("eu-west", "na-east")
    for _ in range(20):  # 100 s without eu-west traffic
        decision = drv.step(5, {"na-east": 5})
    assert decision.covered_regions == ("eu-west", "na-east")
    for _ in range(5):
        decision = drv.step(5, {"na-east": 5})
    assert decision.covered_regions == ("na-east",)
    idle = Driver(make_spec(min_replicas=0, scale_to_zero=True, scale_to_zero_after_s=0), replicas=0)
    assert idle.step(5, {}).covered_regions == ()


def test_a_quiet_spell_keeps_the_replicas_split_as_the_last_traffic_was():
    """min_replicas held through a quiet spell: the replicas stay split as the traffic last was
    (all eu-west here) instead of being dealt round-robin over the SLA's regions, which would send
    the solver moving replicas toward a region that sent nothing; a deployment that never had
    traffic is still dealt round-robin."""
    drv = Driver(make_spec(min_replicas=3), replicas=3)
    for _ in range(12):
        busy = drv.step(5, {"eu-west": 6})
    assert busy.replicas_by_region == {"na-east": 0, "eu-west": 3}
    for _ in range(120):  # ten minutes without a request
        quiet = drv.step(5, {})
    assert quiet.replicas == 3
    assert quiet.replicas_by_region == {"na-east": 0, "eu-west": 3}
    assert "regions split as when it last had some" in quiet.reason
    never = Driver(make_spec(min_replicas=3), replicas=3).step(5, {})
    assert never.replicas_by_region == {"na-east": 2, "eu-west": 1}


def test_a_replica_with_no_figures_yet_does_not_make_a_prefill_bound_breach_scale():
    """ap-south's TTFT breach is its prompts' prefill (without the 40-ms queue it stays over the
    SLA). A replica that has just become READY and has not been scraped reports an empty load (no
    queue time): that tells nothing about the breach, and must not turn it into a +25% scale-up, as
    it did on every replica start during such a breach. A region's breach with no replica reporting
    queue time at all still counts."""
    spec = make_spec(scale_up_delay_s=0)
    policy = autoscaler.get("concurrency")
    served = fleet.ReplicaLoad(running_requests=4, ttft=fleet.LatencyPercentiles(p99_ms=700),
                               queue_time=fleet.LatencyPercentiles(20, 40, 90))
    traffic = (autoscaler.RegionTraffic("na-east", requests_per_s=2.0, in_flight=8, ttft_p99_ms=900),)

    def decide(loads: tuple[fleet.ReplicaLoad, ...]) -> autoscaler.Decision:
        ctx = autoscaler.AutoscaleContext("chat", spec, T0, len(loads), loads, traffic)
        return policy.decide(ctx, autoscaler.AutoscaleState())[0]

    with_fresh = decide((served, served, served, fleet.ReplicaLoad()))
    assert with_fresh.slo_breach and with_fresh.replicas == 4
    assert "would not shorten" in with_fresh.reason
    unknown = decide((fleet.ReplicaLoad(running_requests=4),) * 4)
    assert unknown.replicas > 4
