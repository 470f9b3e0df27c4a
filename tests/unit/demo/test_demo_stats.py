"""The demo's figures: SLA attainment, placement cost and failure reasons from crafted inputs."""

from __future__ import annotations

import collections
import dataclasses

from meridian import cost, latency
from meridian.demo import sla, stats, traffic, view

SLA = {"chat": sla.Target(ttft_ms=500, tpot_ms=50)}


def rec(ok=True, ttft=0.1, total=1.0, tokens=21, region="eu-west", model="chat", error="", at=0.0):
    return traffic.Record(at, model, region, ok, ttft, total, tokens, error)


def reach_with(model: str, cluster_region: str, at: float = 0.0, gpu: str = "L4") -> sla.ReachLog:
    """A reach log of one poll: one ready replica of ``model`` in ``cluster_region``."""
    log = sla.ReachLog(latency.default())
    status = {"clusters": [{"cluster_id": "c", "region": cluster_region, "pool_details": [{"pool_id": "p", "gpu_type": gpu}],
                            "replica_details": [{"deployment": model, "served_model_name": model, "state": "ready",
                                                 "pool_id": "p"}]}]}
    log.add(at, status, {model: ["eu-west", "na-east", "ap-northeast"]})
    return log


def test_attainment_counts_ttft_tpot_and_failures():
    """A request counts as within SLA only if it succeeded, met the TTFT target and the TPOT target."""
    records = [rec(), rec(ttft=0.6), rec(total=0.1 + 20 * 0.06), rec(ok=False, error="boom"), rec(region="na-east")]
    rows = {(r.model, r.region): r for r in sla.per_region(records, SLA, [], reach_with("chat", "eu-west-1"))}
    eu = rows[("chat", "eu-west")]
    assert (eu.steady, eu.steady_within, eu.failed) == (4, 1, 1)
    assert eu.misses == {"ttft": 1, "tpot": 1, "failed": 1}
    assert rows[("chat", "na-east")].steady_share == 1.0


def _bill(floor: float | None = 40.0) -> dict:
    """A ``GET /v1/cost`` answer: cluster a's one H100 node ($80/h, 8 GPUs) with chat holding 5 GPUs
    (two replicas), computed by the cost module; cluster b lost."""
    where = cost.Where("a/h100", "a", "aws", "us-east-1", "h100", "H100", "on_demand")
    owner = cost.Owner("chat", "chat", "assistant")
    b = cost.bill([cost.Pool(where, 8, 1, cost.Price(80.0))],
                  [cost.Replica("r", "a/h100", 4, owner), cost.Replica("r2", "a/h100", 1, owner)])
    return {"now": cost.document.of_bill(b, at_s=0.0), "since": None, "pool_scale_down_delay_s": 20.0,
            "floor": {"status": "ready", "usd_per_hour": floor, "summary": f"Cost floor of these specs: ${floor:.2f}/h"},
            "unreachable": {"clusters": ["b"], "usd_per_hour": 12.5, "pools": []}}


def test_the_report_shows_one_bill_with_shares_and_idle_under_it_and_the_floor_beside():
    """The placement rows are the bill's shares (GPUs held x price per GPU); the report labels the
    bill (whole nodes, idle GPUs included), the shares and the idle part under it (adding up), the
    cost floor as a bound, and the lost cluster as not billed."""
    bill = _bill()
    (row,) = stats.placement_rows(bill["now"])
    assert (row.cluster, row.replicas, row.gpus, row.cost_per_hour_usd) == ("a", 2, 5, 50.0)
    text = view.report(stats.placement_rows(bill["now"]), [], 0, 0, {}, [], SLA, bill=bill)
    assert "Bill at the end: $80.00/h: every billed node" in text
    assert "of which replicas' shares: $50.00/h (5 GPU(s) held" in text
    assert "and idle GPUs on paid nodes: $30.00/h (3 GPU(s))" in text
    assert "Cost floor of these specs: $40.00/h (a bound, not a bill)" in text
    assert "Not in the bill: b (lost" in text and "after 20 s idle" in text
    assert any(line.split()[:2] == ["(idle", "GPUs)"] and "30.00" in line for line in text.splitlines())


def test_failure_reasons_most_common_first_and_report_renders():
    """The report lists failure reasons by count and every section renders."""
    records = [rec(ok=False, error="503 no replica")] * 3 + [rec(ok=False, error="502 all failed")] + [rec()]
    reasons = stats.failure_reasons(records)
    assert reasons == [("503 no replica", 3), ("502 all failed", 1)]
    regions = sla.per_region(records, SLA, [], reach_with("chat", "eu-west-1"))
    text = view.report([], regions, 5, 4, {"time to re-place": 12.5}, ["t=1 x"], SLA, reasons)
    assert "3 x 503 no replica" in text and "time to re-place: 12.5 s" in text and "20.0%" in text


def test_cold_start_counts_the_requests_sent_before_the_first_answer():
    """Requests to a model scaled to zero that were sent before its first answer waited for a
    replica; the report says how many, how long, and how many of them missed the SLA."""
    targets = {"embed": sla.Target(ttft_ms=150, tpot_ms=None)}
    reach = reach_with("embed", "eu-west-1")
    records = [traffic.Record(10.0, "embed", "eu-west", True, 7.0, 7.0, 0),   # answered at 17.0: the first
               traffic.Record(12.0, "embed", "eu-west", True, 5.1, 5.1, 0),   # 17.1
               traffic.Record(16.9, "embed", "na-east", True, 0.12, 0.12, 0),  # 17.02, within SLA
               traffic.Record(17.5, "embed", "eu-west", True, 0.01, 0.01, 0),  # after: did not wait
               traffic.Record(11.0, "chat", "eu-west", True, 0.1, 1.0, 10)]
    (cold,) = stats.cold_starts(records, ["embed"], targets, reach)
    assert (cold.model, cold.waited, cold.missed) == ("embed", 3, 2)
    assert abs(cold.ready_after_s - 7.0) < 1e-9 and cold.first_answer_s == 17.0
    assert stats.cold_starts(records[:0], ["embed"], targets, reach) == []
    text = view.report([], sla.per_region(records, targets, [], reach), 5, 0, {}, [], targets, [], [cold])
    assert "embed started with no replica (scale to zero): its first answer came 7.0 s after its first request; " \
           "3 request(s) were sent before that answer" in text
    # A model that never answered is the worst cold start: reported, not left out.
    failed = [traffic.Record(10.0, "embed", "eu-west", False, None, 30.0, 0, "timeout")] * 2
    (never,) = stats.cold_starts(failed, ["embed"], targets, reach)
    assert (never.ready_after_s, never.waited, never.missed) == (None, 2, 2)
    assert "never answered: none of its 2 request(s) got a replica" in view.report([], [], 2, 2, {}, [], targets, [],
                                                                                    [never])


def test_failures_after_a_loss_are_counted_until_the_next_event():
    """Requests started after the region loss and failed count (however late they failed); one
    started before it (cut mid-stream) or after the next scripted event does not."""
    records = [traffic.Record(99.0, "chat", "eu-west", False, None, 2.0, 0, "cut"),
               traffic.Record(104.0, "embed", "na-east", False, None, 9.0, 0, "502"),
               traffic.Record(106.5, "embed", "eu-west", True, 0.1, 0.1, 0),
               traffic.Record(130.0, "chat", "eu-west", False, None, 1.0, 0, "preempted")]
    late = stats.failed_between(records, 100.0, 120.0)
    assert [r.started_s for r in late] == [104.0]
    assert [r.started_s for r in stats.failed_between(records, 100.0)] == [104.0, 130.0]


def test_live_view_shows_clusters_gpus_replicas_rates_latency_and_cost():
    """One screen of the live view: each cluster with GPUs used/total and $/h (a lost one marked),
    ready replicas per model and region, and per client region the request rate, TTFT p50/p99 and
    failures, with the fleet's cost per hour."""
    pool = {"pool_id": "h100", "gpu_type": "H100", "tier": "on_demand", "gpus_per_node": 8,
            "price_per_node_hour_usd": 80.0, "nodes_current": 1, "gpus_free": 3}
    replica = {"replica_id": "r", "deployment": "chat", "served_model_name": "chat", "state": "ready",
               "pool_id": "h100", "gpu_count": 5}
    status = {"routing_version": 7, "plan": {"cost_per_hour_usd": 80.0}, "clusters": [
        {"cluster_id": "a", "cloud": "aws", "region": "us-east-1", "connected": True, "replicas": {"ready": 1},
         "pool_details": [pool], "replica_details": [replica]},
        {"cluster_id": "b", "cloud": "gcp", "region": "us-central1", "connected": False, "lost": True,
         "pool_details": [], "replica_details": []}]}
    # Three requests from eu-west in a 10-s window, one failed.
    records = [traffic.Record(float(i), "chat", "eu-west", i != 2, 0.1 * (i + 1), 1.0, 10, "" if i != 2 else "x")
               for i in range(3)]
    text = view.frame(30.0, 120.0, "steady traffic", status, stats.region_rows(records, 10.0), ["t=1s started"],
                      _bill())
    assert "t=   30s / 120s   phase: steady traffic" in text
    assert ("bill $80.00/h (nodes x price) = replicas' shares $50.00/h + idle GPUs $30.00/h   cost floor $40.00/h "
            "(a bound, not a bill)") in text
    lines = text.splitlines()
    assert any(ln.split()[:4] == ["a", "aws", "us-east-1", "yes"] and "5/8" in ln and "80.00" in ln for ln in lines)
    assert any(ln.split()[:4] == ["b", "gcp", "us-central1", "LOST"] for ln in lines)
    assert any(ln.split() == ["chat", "us-east-1:1"] for ln in lines)
    (eu,) = [ln.split() for ln in lines if ln.startswith("eu-west")]
    assert eu == ["eu-west", "0.3", "100", "200", "1"]  # 3 requests in 10 s; TTFT p50/p99 of the answered; 1 failed
    assert "events:" in text and "t=1s started" in text


def test_after_the_traffic_the_demo_waits_for_the_lost_regions_capacity():
    """When the traffic ends before the lost region's capacity is re-placed (a 70B replica loads its
    weights for over a minute), the demo keeps watching the scheduler until it is, so the report can
    time it; with nothing re-placed it gives up after the wait."""
    import asyncio  # noqa: PLC0415
    import io  # noqa: PLC0415
    import time  # noqa: PLC0415

    from meridian.demo import run  # noqa: PLC0415

    def status(ready: int) -> dict:
        replicas = [{"deployment": "chat", "state": "ready", "replica_id": f"r{i}"} for i in range(ready)]
        return {"plan": {"at": time.time() + 100, "placement": {"chat": {"c2/l4": 2}}},
                "clusters": [{"cluster_id": "c1", "lost": True, "replica_details": []},
                             {"cluster_id": "c2", "replica_details": replicas}]}

    class Fleet:
        def __init__(self, readies):
            self.readies = list(readies)

        async def status(self, session):
            return status(self.readies.pop(0) if len(self.readies) > 1 else self.readies[0])

    def lost() -> dict:
        return {"cluster": "c1", "at": time.monotonic(), "at_wall": time.time()}

    out = io.StringIO()
    done = lost()
    asyncio.run(run._await_replacement(Fleet([1, 2]), None, done, status(1), traffic.Recorder(), run.Timeline(),
                                       30.0, out, poll_s=0.01))
    assert done["replaced_s"] >= 0
    assert "waiting up to 30s for the capacity of c1 to be re-placed" in out.getvalue()
    never = lost()
    started = time.monotonic()
    asyncio.run(run._await_replacement(Fleet([1]), None, never, status(1), traffic.Recorder(), run.Timeline(),
                                       0.2, io.StringIO(), poll_s=0.01))
    assert "replaced_s" not in never and time.monotonic() - started < 2.0


def test_each_request_is_judged_by_ttft_tpot_and_max_rtt_per_client_region():
    """With max_rtt_ms 90, a request from ap-northeast while the only ready replica is in eu-west-1
    (130 ms away) is outside its SLA although its TTFT met the target; eu-west's is within."""
    target = {"chat": sla.Target(ttft_ms=800, tpot_ms=100, max_rtt_ms=90)}
    reach = reach_with("chat", "eu-west-1")
    rows = {r.region: r for r in sla.per_region([rec(region="ap-northeast"), rec(region="eu-west")], target, [], reach)}
    assert rows["ap-northeast"].misses == {"max_rtt": 1} and rows["ap-northeast"].steady_within == 0
    assert rows["ap-northeast"].nearest.region == "eu-west-1" and rows["ap-northeast"].nearest.rtt_ms > 90
    assert rows["eu-west"].steady_within == 1
    assert "had no ready replica within max_rtt_ms 90" in rows["ap-northeast"].why
    assert "the nearest ready replica is 129.9 ms away (eu-west-1)" in rows["ap-northeast"].why


def test_a_max_rtt_miss_while_the_replica_in_reach_was_down_says_so():
    """Misses from a region whose replica in reach is ready again at the end do not read as if that
    replica had been out of reach: the line says they came while none in reach was ready."""
    target = {"chat": sla.Target(ttft_ms=800, tpot_ms=100, max_rtt_ms=90)}
    late = [rec(region="ap-northeast")]
    row = sla.per_region(late, target, [], reach_with("chat", "eu-west-1"))[0]
    near_now = dataclasses.replace(row.nearest, rtt_ms=2.1, region="japaneast")
    why = sla._why(dataclasses.replace(row, nearest=near_now), target["chat"], collections.Counter(), "")
    assert "one in reach is ready at the end (japaneast, 2.1 ms away), so they came while none was" in why


def test_windows_separate_cold_start_and_faults_from_steady_state():
    """Requests in a window count under it, not in steady state (a model's cold start only for that
    model); every failed request is listed by window, model, region and error, with its moment."""
    windows = [sla.Window("cold start of embed", 0.0, 5.0, frozenset({"embed"})), sla.Window("region lost (c)", 10.0, 20.0)]
    records = [rec(at=1.0, ok=False, error="502"), rec(at=1.0, model="embed", ok=False, error="timeout"),
               rec(at=12.0, ok=False, error="cut"), rec(at=12.5, ok=False, error="cut"), rec(at=30.0)]
    targets = {"chat": SLA["chat"], "embed": sla.Target(ttft_ms=150, tpot_ms=None)}
    rows = {(r.model, r.region): r for r in sla.per_region(records, targets, windows, reach_with("chat", "eu-west-1"))}
    chat = rows[("chat", "eu-west")]
    assert (chat.steady, chat.steady_within) == (2, 1)  # t=1 (failed) and t=30
    assert chat.windows == {"region lost (c)": sla.Count(2, 0, {"failed": 2})}
    assert rows[("embed", "eu-west")].windows == {"cold start of embed": sla.Count(1, 0, {"failed": 1})}
    groups = sla.failures(records, windows, t0=0.0)
    assert [(g.window, g.model, g.error, g.count, g.first_s, g.last_s) for g in groups] == [
        ("cold start of embed", "embed", "timeout", 1, 1.0, 1.0), ("steady", "chat", "502", 1, 1.0, 1.0),
        ("region lost (c)", "chat", "cut", 2, 12.0, 12.5)]
    text = view.report([], list(rows.values()), 5, 4, {}, [], targets, [], [], None, windows, groups, 0.0)
    assert "region lost (c): t=10.0-20.0 s: 2 request(s), 0.0% within SLA (misses: failed 2)" in text
    assert "Every failed request, by window" in text and "12.0-12.5 s" in text


def test_a_region_under_99_percent_gets_a_line_naming_why_from_the_reports_own_data():
    """Steady-state requests over the TTFT target with a replica near enough: the line names the
    nearest replica, what network and prefill leave of the target and how far beyond them the
    requests took (the host's share)."""
    target = {"embed": sla.Target(ttft_ms=150, tpot_ms=None, prefill_ms={"H100": 0.7})}
    reach = reach_with("embed", "eu-west-1", gpu="H100")
    records = [rec(model="embed", ttft=0.2, tokens=0, at=float(i)) for i in range(10)]
    (row,) = sla.per_region(records, target, [], reach, host="2 cores at load average 6.5")
    assert row.steady_share == 0.0
    assert "10 of 10 steady-state requests outside the SLA" in row.why
    assert "the nearest ready replica (H100 in eu-west-1) is 8.2 ms away and its prefill 0.7 ms, leaving 141 ms" \
           in row.why, row.why
    assert "191 ms (191 ms at p99) beyond the network and the prefill: more than the 141 ms left" in row.why
    assert "the median request took 200 ms" in row.why and "on 2 cores at load average 6.5" in row.why


def test_cold_start_lasts_per_region_until_a_replica_within_reach_is_ready():
    """The demo's cold start window of a model in a client region ends when a ready replica within
    that region's reach first shows (eu-west from the start: none; ap-south only once Mumbai's
    replica is ready); the fault windows end per model when its capacity is back."""
    from meridian.demo import run  # noqa: PLC0415

    log = sla.ReachLog(latency.default())

    def status(*regions: str) -> dict:
        return {"clusters": [{"cluster_id": f"c{i}", "region": r, "pool_details": [{"pool_id": "p", "gpu_type": "L4"}],
                              "replica_details": [{"deployment": "chat", "served_model_name": "chat", "state": "ready",
                                                   "pool_id": "p"}]} for i, r in enumerate(regions)]}

    log.add(100.0, status("eu-west-1"), {"chat": ["eu-west", "ap-south"]})
    log.add(105.0, status("eu-west-1", "ap-south-1"), {"chat": ["eu-west", "ap-south"]})
    targets = {"chat": sla.Target(ttft_ms=800, tpot_ms=100, max_rtt_ms=90, prefill_ms={"L4": 159.0}, headroom_ms=40)}
    phases = run.Phases(run.DemoOptions(duration_s=100))
    windows = run._windows([], phases, 100.0, {"cluster": "c0", "at_wall": 150.0}, None,
                           {"lost:models": {"chat"}, "lost:chat": 160.0}, 200.0, log, targets,
                           {"chat": {"eu-west", "ap-south"}})
    cold = [(sorted(w.regions), w.end_s) for w in windows if w.name == "cold start"]
    assert cold == [(["ap-south"], 105.0)]
    lost = [w for w in windows if w.name.startswith("region lost")]
    assert [(w.start_s, w.end_s, set(w.models)) for w in lost] == [(150.0, 160.0, {"chat"})]


def test_a_fault_window_lasts_for_a_region_until_a_replica_within_its_reach_is_back():
    """The preemption wave takes Tokyo's replica: the model's capacity is back (its plan carried out)
    at 170 while ap-northeast is still served from Europe; the window lasts for ap-northeast until a
    replica within its reach is ready again (190), and eu-west, which never lost its replica, ends with
    the model (170)."""
    from meridian.demo import run  # noqa: PLC0415

    log = sla.ReachLog(latency.default())

    def status(*regions: str) -> dict:
        return {"clusters": [{"cluster_id": f"c{i}", "region": r, "pool_details": [{"pool_id": "p", "gpu_type": "L4"}],
                              "replica_details": [{"deployment": "chat", "served_model_name": "chat", "state": "ready",
                                                   "pool_id": "p"}]} for i, r in enumerate(regions)]}

    clients = {"chat": ["eu-west", "ap-northeast"]}
    for t, regions in ((100.0, ("eu-west-1", "ap-northeast-1")), (150.0, ("eu-west-1", "ap-northeast-1")),
                       (160.0, ("eu-west-1",)), (170.0, ("eu-west-1",)), (190.0, ("eu-west-1", "ap-northeast-1"))):
        log.add(t, status(*regions), clients)
    targets = {"chat": sla.Target(ttft_ms=800, tpot_ms=100, max_rtt_ms=90, prefill_ms={"L4": 159.0}, headroom_ms=40)}
    phases = run.Phases(run.DemoOptions(duration_s=100))
    windows = run._windows([], phases, 100.0, {}, 155.0, {"preempted:models": {"chat"}, "preempted:chat": 170.0},
                           250.0, log, targets, {"chat": {"eu-west", "ap-northeast"}})
    wave = [(sorted(w.regions), w.end_s) for w in windows if w.name == "spot preemption wave"]
    assert wave == [([], 170.0), (["ap-northeast"], 190.0)]
    assert sla.window_of(rec(at=180.0, region="ap-northeast"), windows) == "spot preemption wave"
    assert sla.window_of(rec(at=180.0), windows) == "steady"
    assert log.back_within("chat", "eu-west", targets["chat"], 155.0, 170.0) == 155.0
    # Never back within reach: None, and the region's window lasts to the end of traffic.
    log.add(200.0, status("eu-west-1"), clients)
    assert log.back_within("chat", "ap-northeast", targets["chat"], 195.0, 210.0) is None
    windows = run._windows([], phases, 100.0, {}, 195.0, {"preempted:models": {"chat"}, "preempted:chat": 210.0},
                           250.0, log, targets, {"chat": {"eu-west", "ap-northeast"}})
    assert [(sorted(w.regions), w.end_s) for w in windows if w.name == "spot preemption wave"] == [
        ([], 210.0), (["ap-northeast"], 250.0)]


def test_the_re_placement_is_timed_from_the_plan_made_after_the_loss_even_if_the_poll_saw_it_later():
    """The scheduler marks the cluster lost and plans at once; the demo's poll sees the loss a moment
    later, and no plan follows for a while (demand holds still). The re-placement is carried out when
    that plan's replicas are ready, not when some later plan happens to be made (a live run timed
    22 s instead of 8 s that way). A plan that still places replicas in the lost cluster was made
    before the scheduler knew, and does not count."""
    import time  # noqa: PLC0415

    from meridian.demo import run  # noqa: PLC0415

    def status(plan_at: float, placement: dict, ready: int) -> dict:
        replicas = [{"deployment": "chat", "state": "ready", "replica_id": f"r{i}"} for i in range(ready)]
        return {"plan": {"at": plan_at, "placement": placement},
                "clusters": [{"cluster_id": "c1", "lost": True, "replica_details": []},
                             {"cluster_id": "c2", "replica_details": replicas}]}

    killed = time.time() - 10.0
    lost = {"cluster": "c1", "at": time.monotonic() - 10.0, "at_wall": killed}
    timeline = run.Timeline()
    # The plan made after the loss (3 s after the kill, before this poll) wants 2 in c2; 1 is ready.
    after = {"chat": {"c2/l4": 2}}
    run._track_recovery(lost, status(killed + 3.0, after, 1), traffic.Recorder(), timeline)
    assert "seen_lost_wall" in lost and "replaced_s" not in lost
    run._track_recovery(lost, status(killed + 3.0, after, 2), traffic.Recorder(), timeline)
    assert 9.5 <= lost["replaced_s"] < 15.0

    # A plan made before the scheduler marked the loss still counts on c1's replicas: not that one.
    early = {"cluster": "c1", "at": time.monotonic() - 10.0, "at_wall": killed}
    before = {"chat": {"c1/l4": 1, "c2/l4": 1}}
    run._track_recovery(early, status(killed + 1.0, before, 2), traffic.Recorder(), run.Timeline())
    assert "replaced_s" not in early
    # A plan older than the kill is not one made after the loss either.
    stale = {"cluster": "c1", "at": time.monotonic() - 10.0, "at_wall": killed}
    run._track_recovery(stale, status(killed - 5.0, after, 2), traffic.Recorder(), run.Timeline())
    assert "replaced_s" not in stale
