"""The demo's figures: SLA attainment, placement cost and failure reasons from crafted inputs."""

from __future__ import annotations

from meridian import cost
from meridian.demo import stats, traffic, view

SLA = {"chat": stats.Sla(ttft_ms=500, tpot_ms=50)}


def rec(ok=True, ttft=0.1, total=1.0, tokens=21, region="eu-west", model="chat", error=""):
    return traffic.Record(0.0, model, region, ok, ttft, total, tokens, error)


def test_attainment_counts_ttft_tpot_and_failures():
    """A request counts as within SLA only if it succeeded, met the TTFT target and the TPOT target."""
    records = [rec(), rec(ttft=0.6), rec(total=0.1 + 20 * 0.06), rec(ok=False, error="boom"), rec(region="na-east")]
    rows = {(r.model, r.region): r for r in stats.attainment(records, SLA)}
    eu = rows[("chat", "eu-west")]
    assert (eu.requests, eu.within_sla, eu.failed) == (4, 1, 1)
    assert rows[("chat", "na-east")].attainment == 1.0


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
    text = view.report([], stats.attainment(records, SLA), 5, 4, {"time to re-place": 12.5}, ["t=1 x"], SLA, reasons)
    assert "3 x 503 no replica" in text and "time to re-place: 12.5 s" in text and "80.00%" in text


def test_cold_start_counts_the_requests_sent_before_the_first_answer():
    """Requests to a model scaled to zero that were sent before its first answer waited for a
    replica; the report says how many, how long, and how many of them missed the SLA."""
    sla = {"embed": stats.Sla(ttft_ms=150, tpot_ms=None)}
    records = [traffic.Record(10.0, "embed", "eu-west", True, 7.0, 7.0, 0),   # answered at 17.0: the first
               traffic.Record(12.0, "embed", "eu-west", True, 5.1, 5.1, 0),   # 17.1
               traffic.Record(16.9, "embed", "na-east", True, 0.12, 0.12, 0),  # 17.02, within SLA
               traffic.Record(17.5, "embed", "eu-west", True, 0.01, 0.01, 0),  # after: did not wait
               traffic.Record(11.0, "chat", "eu-west", True, 0.1, 1.0, 10)]
    (cold,) = stats.cold_starts(records, ["embed"], sla)
    assert (cold.model, cold.waited, cold.missed) == ("embed", 3, 2)
    assert abs(cold.ready_after_s - 7.0) < 1e-9
    assert stats.cold_starts(records[:0], ["embed"], sla) == []
    text = view.report([], stats.attainment(records, sla), 5, 0, {}, [], sla, [], [cold])
    assert "embed started with no replica (scale to zero): its first answer came 7.0 s after its first request; " \
           "3 request(s) were sent before that answer" in text
    # A model that never answered is the worst cold start: reported, not left out.
    failed = [traffic.Record(10.0, "embed", "eu-west", False, None, 30.0, 0, "timeout")] * 2
    (never,) = stats.cold_starts(failed, ["embed"], sla)
    assert (never.ready_after_s, never.waited, never.missed) == (None, 2, 2)
    assert "never answered: none of its 2 request(s) got a replica" in view.report([], [], 2, 2, {}, [], sla, [], [never])


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
