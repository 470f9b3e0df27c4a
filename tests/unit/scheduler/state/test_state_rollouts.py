"""Rollout records and per-revision traffic windows on every backend."""

from __future__ import annotations

import pytest

from meridian.fleet import models as fm
from scheduler.state import base, records


async def test_rollout_log_saves_and_forgets_records_only_under_the_lease(store):
    """Rollout records are written in one fenced write, read back as stored, and removed by name."""
    log = records.RolloutLog(store)
    with pytest.raises(base.FencedOut):
        await log.save({"chat": "{}"}, (), fence=1)
    lease = await store.acquire_lease("a", 5.0, {})
    await log.save({"chat": '{"phase":"progressing"}', "embed": '{"phase":"complete"}'}, (), fence=lease.token)
    assert await log.get("chat") == '{"phase":"progressing"}'
    await log.save({}, ["embed"], fence=lease.token)
    assert await log.all() == {"chat": '{"phase":"progressing"}'}


async def test_traffic_keeps_revisions_apart_and_demand_sums_them(store):
    """Samples naming a revision are kept per revision (a rollout reads them back as windows), while
    demand sums every revision of a (model, client region)."""
    traffic = records.TrafficLog(store)
    report = fm.TrafficReport("rt1", "na-east", 100.0, 110.0, (
        fm.TrafficSample("chat", "na-east", 50, 500, 100, 1, 3, 200.0, "rev-a"),
        fm.TrafficSample("chat", "na-east", 30, 300, 60, 6, 0, 400.0, "rev-b"),
        fm.TrafficSample("other", "na-east", 10, 100, 20, 0, 0, 100.0)))
    assert await traffic.record(report, 111.0) == 3
    demand = {d.model: d for d in await traffic.demand(111.0, 60.0)}
    assert demand["chat"].requests_per_s == pytest.approx(8.0)
    assert demand["chat"].in_flight == 3 and demand["chat"].ttft_p99_ms == 400.0
    windows = await traffic.revision_windows(["chat"])
    assert [(w.revision, w.requests, w.errors, w.at_s) for w in windows] == [("rev-a", 50, 1, 111.0),
                                                                            ("rev-b", 30, 6, 111.0)]
    assert len({w.key for w in windows}) == 2
    assert await traffic.revision_windows(["other"]) == []
