"""The demo's progress lines, live view and timeline count on one clock (seconds since traffic
started), never past the duration, and a model's cold start stays out of the steady figures."""

from __future__ import annotations

from meridian.demo import run, stats, traffic


def _rec(model: str, region: str, ok: bool, ttft_s: float | None, at: float = 0.0) -> traffic.Record:
    return traffic.Record(at, model, region, ok, ttft_s, ttft_s or 0.0, 1, "" if ok else "503")


def test_timeline_counts_from_traffic_start_with_setup_before_zero():
    """Events before traffic starts read as negative seconds, events after it from 0."""
    now = [1000.0]
    timeline = run.Timeline(clock=lambda: now[0])
    timeline.note("scheduler up")
    now[0] += 30.0
    assert timeline.start_traffic() == 1030.0
    now[0] += 45.5
    timeline.note("REGION LOST")
    assert timeline.lines == ["t= -30.0s  scheduler up", "t=  45.5s  REGION LOST"]


def test_the_clock_never_passes_the_duration():
    """Past the traffic's duration the shown time stays at it and the phase says requests drain."""
    phases = run.Phases(run.DemoOptions(duration_s=90.0))
    assert run.on_clock(45.0, 90.0, phases) == (45.0, phases.name(45.0))
    assert run.on_clock(91.3, 90.0, phases) == (90.0, "draining requests in flight")


def test_progress_line_is_per_model_and_keeps_a_cold_start_out():
    """The progress line gives each model its own p99 per client region; a model still in its cold
    start is named, and its slow or failed requests do not enter any figure."""
    window = [_rec("chat", "na-east", True, 0.1), _rec("chat", "na-east", True, 0.2),
              _rec("embed", "na-east", False, None), _rec("embed", "na-east", False, None),
              _rec("embed", "na-east", True, 6.5)]
    line = stats.progress_line(window, 10.0, warming={"embed"})
    assert line.startswith("chat: na-east 0.2rps p99 200ms")
    assert "embed: cold start, no answer yet (2 failed in the window)" in line
    assert "6500" not in line
    warm = stats.progress_line(window, 10.0)
    assert "embed: na-east 0.3rps p99 6500ms" in warm and "chat: na-east 0.2rps p99 200ms" in warm
