"""Trace replay in the simulator: recorded arrivals scaled in rate and shifted to each client
region's local time, tokens taken from the trace, and the scenario fields that ask for it."""

from __future__ import annotations

import datetime
import pathlib

import numpy as np
import pytest

from meridian.simulate import defaults, perf, runner, scenario, trace
from scheduler.solver import throughput

EXAMPLES = defaults.examples_dir()
SCENARIOS = EXAMPLES / "scenarios"


def _azure_csv(path: pathlib.Path, offsets_s: list[float], prompt: int = 100, output: int = 10) -> pathlib.Path:
    start = datetime.datetime(2023, 11, 16, 18, 0, 0)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in offsets_s:
        stamp = (start + datetime.timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        rows.append(f"{stamp},{prompt},{output}")
    path.write_text("\n".join(rows) + "\n")
    return path


def _replay_scenario(tmp_path: pathlib.Path, file: str, peak: dict[str, float], **extra) -> scenario.Scenario:
    data = {"name": "replay", "specs": [str(EXAMPLES / p) for p in defaults.DEFAULT_SPECS], "hours": 2.0,
            "start_utc_hour": 0.0, "tick_s": 60.0, "control_interval_s": 180.0,
            "traffic": [{"deployment": "chat-8b", "peak_rps": peak,
                         "trace": {"file": file, "diurnal": False, **extra}}]}
    return scenario.parse(data, tmp_path, "replay")


def test_replay_counts_per_region_hour_are_the_traces_times_the_scale_shifted_by_the_offset(tmp_path):
    """A one-hour trace with 120 requests in its first half hour and one at its end, replayed at
    twice its rate: every region-hour holds 2 x 121 requests, and Mumbai (UTC+5:30) plays it half an
    hour later than London (UTC+0): its burst falls in the second half of each UTC hour."""
    times = [i * 15.0 for i in range(120)] + [3599.0]
    path = _azure_csv(tmp_path / "half.csv", times)
    mean_rps = 121 / 3600.0
    sc = _replay_scenario(tmp_path, path.name, {"eu-west": 2 * mean_rps, "ap-south": 2 * mean_rps})
    tr = trace.build(sc)
    col = {s.client_region: i for i, s in enumerate(tr.streams)}
    for region in ("eu-west", "ap-south"):
        per_hour = tr.arrivals[:, col[region]].reshape(2, 60).sum(axis=1)
        assert per_hour.tolist() == [242, 242]
        assert tr.replays[col[region]][1] == pytest.approx(2.0)
    london = tr.arrivals[:60, col["eu-west"]]
    mumbai = tr.arrivals[:60, col["ap-south"]]
    assert london[:30].sum() == 240 and london[30:].sum() == 2
    assert mumbai[:30].sum() == 2 and mumbai[30:].sum() == 240
    assert np.array_equal(np.roll(london, 30), mumbai)


def test_fractional_scale_keeps_the_count_within_one_request(tmp_path):
    """Scaled by 0.3, a region replays 0.3 x the recorded requests over any whole span (the fraction
    is carried from tick to tick, never lost)."""
    path = _azure_csv(tmp_path / "even.csv", [i * 1.0 for i in range(3600)])
    sc = _replay_scenario(tmp_path, path.name, {"na-east": 0.3})
    tr = trace.build(sc)
    assert tr.arrivals.shape == (120, 1)
    assert abs(int(tr.arrivals.sum()) - round(0.3 * 7200)) <= 1
    assert tr.arrivals.min() >= 17 and tr.arrivals.max() <= 19


def test_diurnal_replay_follows_the_day_and_tiles_the_hour(tmp_path):
    """With ``diurnal: true`` the replayed hour repeats over the day and each region's hourly count
    follows its local day: at the local peak the mean rate is ``peak_rps``, at the trough a quarter."""
    path = _azure_csv(tmp_path / "even.csv", [i * 1.0 for i in range(3600)])
    data = {"name": "replay", "specs": [str(EXAMPLES / p) for p in defaults.DEFAULT_SPECS], "hours": 24.0,
            "traffic": [{"deployment": "chat-8b", "peak_rps": {"eu-west": 2.0}, "peak_local_hour": 14.0,
                         "trough_share": 0.25, "trace": {"file": path.name}}]}
    tr = trace.build(scenario.parse(data, tmp_path, "replay"))
    hourly = tr.arrivals[:, 0].reshape(24, 60).sum(axis=1) / 3600.0
    assert hourly[14] == pytest.approx(2.0, rel=0.01)
    assert hourly[2] == pytest.approx(0.5, rel=0.02)
    assert hourly.argmax() in (13, 14)


def test_replayed_deployment_serves_the_traces_tokens(tmp_path):
    """``tokens: trace`` sets the deployment's workload to the trace's mean prompt and output
    tokens, for the scheduler and the replicas alike; ``tokens: spec`` keeps the spec's."""
    path = _azure_csv(tmp_path / "t.csv", [0.0, 30.0, 59.0], prompt=900, output=40)
    sc = _replay_scenario(tmp_path, path.name, {"na-east": 1.0})
    specs, tr = runner.prepare(sc)
    chat = next(d for d in specs.of_kind("ModelDeployment") if d.metadata.name == "chat-8b")
    assert (chat.spec.workload.prompt_tokens_mean, chat.spec.workload.output_tokens_mean) == (900, 40)
    kept, _ = runner.prepare(_replay_scenario(tmp_path, path.name, {"na-east": 1.0}, tokens="spec"))
    chat = next(d for d in kept.of_kind("ModelDeployment") if d.metadata.name == "chat-8b")
    assert chat.spec.workload.prompt_tokens_mean == 600


def test_shipped_trace_names_resolve_by_short_name_and_file_stem(tmp_path):
    """``azure-conv`` and ``azure-llm-2023-conv`` name the same shipped file: the one-hour
    conversation trace (19,366 requests, the last at 3,501.7 s: it repeats every 3,540 s)."""
    for name in ("azure-conv", "azure-llm-2023-conv"):
        rec = trace.recorded(scenario.Scenario.trace_path(
            _replay_scenario(tmp_path, name, {"na-east": 1.0}), scenario.TraceReplay(file=name)))
        assert len(rec.arrival_s) == 19_366 and rec.period_s == 3540.0


def test_a_bad_row_in_a_replayed_trace_is_a_scenario_error_before_the_run(tmp_path):
    """A trace file whose third line is bad is refused when the scenario is read, naming the field,
    the file and the line; it used to pass the header check and end the run in a traceback."""
    path = _azure_csv(tmp_path / "t.csv", [0.0, 1.0])
    path.write_text(path.read_text() + "2023-11-16 18:00:02.0000000,abc,4\n")
    with pytest.raises(scenario.ScenarioError, match=r"traffic\.0\.trace\.file: .*t\.csv:4: ContextTokens must be an "
                                                      "integer, got 'abc'"):
        _replay_scenario(tmp_path, path.name, {"na-east": 1.0})


def test_a_trace_whose_requests_do_not_fit_the_context_is_refused_for_what_it_is(tmp_path):
    """Replayed with its own tokens, a trace of 9,000-token prompts is refused for chat-8b (context
    8,192) with that reason, not run to a report of 0% attainable "for no pool within reach"; with
    tokens: spec (arrivals only) it runs."""
    path = _azure_csv(tmp_path / "long.csv", [0.0, 30.0, 59.0], prompt=9000, output=100)
    with pytest.raises(scenario.ScenarioError, match=r"traffic\.0\.trace: long\.csv: its requests average 9,000 prompt \+ 100 "
                                                      r"output tokens, over deployment chat-8b's runtime\.context_length "
                                                      r"8,192"):
        _replay_scenario(tmp_path, path.name, {"na-east": 1.0}).load_specs()
    _replay_scenario(tmp_path, path.name, {"na-east": 1.0}, tokens="spec").load_specs()


def test_a_trace_given_with_the_trace_option_that_does_not_fit_a_context_is_warned_about(tmp_path, caplog):
    """``--trace FILE`` puts one file on every traffic entry, with no way to ask for the spec's
    tokens: a deployment whose context the trace does not fit (chat-8b's 8,192 tokens against
    9,000-token prompts) is named in one warning and the run goes on. The embedding model (512
    tokens) is not named: it replays the trace's arrivals with its spec's tokens, so no replica of
    it would refuse them (it used to be warned about on every `--trace azure-conv` run)."""
    path = _azure_csv(tmp_path / "long.csv", [0.0, 30.0, 59.0], prompt=9000, output=10)
    sc = scenario.load("default").with_overrides(hours=1, trace=str(path))
    with caplog.at_level("WARNING", logger="meridian.simulate.scenario"):
        sc.load_specs()
        sc.load_specs()
    warned = [r.getMessage() for r in caplog.records if "trace_exceeds_context" in r.getMessage()]
    assert len(warned) == 1 and "over deployment chat-8b's runtime.context_length 8,192" in warned[0]
    assert not any("embed" in w for w in warned)


def test_an_embedding_deployment_replaying_a_long_prompt_trace_is_not_refused(tmp_path):
    """A scenario file may replay a chat trace's arrivals for an embedding deployment with
    ``tokens: trace``: the embedding keeps its spec's tokens (the replicas serve those), so the
    scenario loads and its workload is the spec's, not the trace's 1,000-token prompts."""
    path = _azure_csv(tmp_path / "mid.csv", [0.0, 30.0, 59.0], prompt=1000, output=10)
    sc = scenario.load("default").with_overrides(hours=1, trace=str(path))
    sc = sc.model_copy(update={"trace_from_cli": False})
    specs = sc.load_specs()
    tr = trace.build(sc, specs)
    assert "embed" not in tr.workload and "chat-8b" in tr.workload


def test_bad_trace_fields_name_the_field(tmp_path):
    """A missing trace file, an unknown format and a bad ``tokens`` value are scenario errors that
    name ``traffic.0.trace``'s field and what would be valid."""
    with pytest.raises(scenario.ScenarioError, match=r"traffic\.0\.trace\.file: .*nope\.csv.*no such file.*azure-conv"):
        _replay_scenario(tmp_path, "nope.csv", {"na-east": 1.0})
    with pytest.raises(scenario.ScenarioError, match=r"traffic\.0\.trace\.file: .*unknown trace format"):
        _replay_scenario(tmp_path, "trace.txt", {"na-east": 1.0})
    with pytest.raises(scenario.ScenarioError, match=r"traffic\.0\.trace\.file: .*azure-conversation: not a shipped "
                                                      r"trace \(did you mean 'azure-conv'\? shipped: azure-conv, "):
        _replay_scenario(tmp_path, "azure-conversation", {"na-east": 1.0})
    with pytest.raises(scenario.ScenarioError, match=r"traffic\.0\.trace\.tokens"):
        _replay_scenario(tmp_path, "azure-conv", {"na-east": 1.0}, tokens="recorded")
    with pytest.raises(scenario.ScenarioError, match=r"traffic\.0\.trace\.scale: unknown field 'scale'"):
        _replay_scenario(tmp_path, "azure-conv", {"na-east": 1.0}, scale=2)


def test_trace_override_replays_the_file_for_every_traffic_entry():
    """``--trace NAME`` (``with_overrides(trace=...)``) puts the trace on every traffic entry of the
    scenario, keeping its rates; an unknown file is an error naming the option."""
    sc = scenario.load("default").with_overrides(hours=1, trace="mooncake")
    assert [t.trace.file for t in sc.traffic] == ["mooncake"] * 3
    assert sc.traffic[0].peak_rps == scenario.load("default").traffic[0].peak_rps
    with pytest.raises(scenario.ScenarioError, match=r"^--trace: .*x\.jsonl"):
        scenario.load("default").with_overrides(trace="/nonexistent/x.jsonl")


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenario_files_are_valid(path):
    """Every scenario in examples/scenarios/ parses, its traces resolve and its names exist in its
    specs (what ``meridian simulate --scenario FILE`` checks before running)."""
    sc = scenario.load(str(path))
    sc.check_against(sc.load_specs())
    assert sc.ticks > 0


def test_default_scenario_file_is_the_built_in_day():
    """examples/scenarios/default.yaml is the built-in default day, field for field."""
    from_file = scenario.load(str(SCENARIOS / "default.yaml"))
    built_in = scenario.load("default")
    assert from_file.model_dump(exclude={"base_dir", "specs"}) == built_in.model_dump(exclude={"base_dir", "specs"})
    assert [p.resolve() for p in from_file.spec_paths()] == [p.resolve() for p in built_in.spec_paths()]


def test_skyserve_like_fleet_may_run_wholly_on_spot():
    """The SkyServe-like scenario's fleet: every deployment allows spot without a share cap, the
    capacity policy neither caps spot nor holds a reserved node, and spot H100 pools exist."""
    sc = scenario.load(str(SCENARIOS / "skyserve-like.yaml"))
    specs = sc.load_specs()
    for d in specs.of_kind("ModelDeployment"):
        assert d.spec.placement.spot.allowed and d.spec.placement.spot.max_share == 1.0
    policy = specs.of_kind("CapacityPolicy")[0].spec
    assert not policy.reserved and policy.spot.max_share == 1.0
    spot_h100 = [p for c in specs.of_kind("Cluster") for p in c.spec.pools
                 if p.tier == "spot" and p.instance_type in ("p5.48xlarge", "a3-highgpu-8g")]
    assert len(spot_h100) == 3


def test_a_replay_models_the_traces_own_prompt_spread(tmp_path):
    """The replicas see the trace's prompt lengths, not a fitted curve: the shipped conversation
    trace holds about 8% of its prompts at ~4,080 tokens (its p92-p98), which shows in the slice of
    probability 0.95-0.98 as 4,080 / the mean; a file of equal prompts has no spread at all."""
    rec = trace.recorded("azure-conv")
    f = dict(zip(zip(perf.PROMPT_BINS[:-1], perf.PROMPT_BINS[1:]), rec.prompt_factors, strict=True))
    assert float(np.dot(rec.prompt_factors, perf.PROMPT_PROBS)) == pytest.approx(1.0)
    assert f[(0.95, 0.98)] * rec.prompt_tokens_mean == pytest.approx(4080, rel=0.01)
    assert list(rec.prompt_factors) == sorted(rec.prompt_factors)
    even = _azure_csv(tmp_path / "even.csv", [i * 1.0 for i in range(1200)], prompt=300)
    sc = _replay_scenario(tmp_path, str(even), {"na-east": 1.0}, tokens="trace")
    specs, tr = runner.prepare(sc)
    assert tr.prompt_factors["chat-8b"] == pytest.approx((1.0,) * len(perf.PROMPT_PROBS))
    assert tr.workload["chat-8b"] == (300.0, 10.0, 300.0)
    chat = next(d for d in specs.of_kind("ModelDeployment") if d.metadata.name == "chat-8b")
    assert chat.spec.workload.prompt_tokens_p99 == 300.0  # the scheduler is told the tail too


def test_a_burstgpt_file_and_a_2024_azure_file_replay_like_a_2023_one(tmp_path):
    """The same arrivals and tokens written as a 2023 Azure file, a 2024 one (UTC offsets) and a
    BurstGPT file (seconds, columns by name, a prompt-less row that is left out) replay to the same
    arrivals per tick and the same workload."""
    offsets = [0.0, 15.0, 15.5, 40.0, 59.0, 61.0, 200.0]
    azure_2023 = _azure_csv(tmp_path / "a2023.csv", offsets, prompt=700, output=70)
    start = datetime.datetime(2024, 5, 10, 0, 0, 0)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [
        f"{(start + datetime.timedelta(seconds=t)).strftime('%Y-%m-%d %H:%M:%S.%f')}+00:00,700,70" for t in offsets]
    (tmp_path / "a2024.csv").write_text("\n".join(rows) + "\n")
    burst = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"] + [
        f"{1000 + t:g},ChatGPT,700,70,770,Conversation log" for t in offsets] + ["1300,ChatGPT,0,9,9,API log"]
    (tmp_path / "burst.csv").write_text("\n".join(burst) + "\n")
    built = {}
    for name in (azure_2023.name, "a2024.csv", "burst.csv"):
        specs, tr = runner.prepare(_replay_scenario(tmp_path, name, {"na-east": 0.5}, tokens="trace"))
        chat = next(d for d in specs.of_kind("ModelDeployment") if d.metadata.name == "chat-8b")
        built[name] = (tr.arrivals.copy(), chat.spec.workload.prompt_tokens_mean, chat.spec.workload.output_tokens_mean)
    reference = built[azure_2023.name]
    assert reference[0].sum() > 0 and reference[1:] == (700, 70)
    for name in ("a2024.csv", "burst.csv"):
        assert np.array_equal(built[name][0], reference[0]) and built[name][1:] == reference[1:]


def test_a_measured_throughput_does_not_outlive_the_tokens_it_was_measured_on(tmp_path):
    """reasoning-70b declares 3.2 requests/s measured on H100 for 512-token prompts. Replayed from a
    trace of 12,000-token prompts, the scheduler (and the demand-following bound) must not keep
    planning 3.2: the replay plans with what the replicas serve for the trace's tokens, the
    capacity model the simulated replicas run, a fraction of it."""
    long_prompts = _azure_csv(tmp_path / "long.csv", [i * 10.0 for i in range(360)], prompt=12_000, output=300)
    data = {"name": "replay", "specs": [str(EXAMPLES / p) for p in defaults.DEFAULT_SPECS], "hours": 1.0,
            "start_utc_hour": 0.0, "tick_s": 60.0, "control_interval_s": 180.0,
            "traffic": [{"deployment": "reasoning-70b", "peak_rps": {"na-east": 0.1},
                         "trace": {"file": long_prompts.name, "diurnal": False, "tokens": "trace"}}]}
    sc = scenario.parse(data, tmp_path, "replay")
    declared = next(d for d in sc.load_specs().of_kind("ModelDeployment") if d.metadata.name == "reasoning-70b").spec
    specs, _ = runner.prepare(sc)
    replayed = next(d for d in specs.of_kind("ModelDeployment") if d.metadata.name == "reasoning-70b").spec
    assert declared.resources.throughput_profile == {"H100": 3.2}
    assert throughput.capacity_rps(declared, "H100") == 3.2
    assert replayed.resources.throughput_profile == {}
    # What the dropped profile was measured on goes with it (a replayed spec stays one validate accepts).
    assert declared.resources.throughput_profile_workload is not None
    assert replayed.resources.throughput_profile_workload is None
    served = throughput.capacity_rps(replayed, "H100")
    assert 0 < served < 1.0  # 12k-token prompts: well under one request/s per replica
    # The other deployments keep their declared figures: their traffic is not replayed.
    chat = next(d for d in specs.of_kind("ModelDeployment") if d.metadata.name == "chat-8b").spec
    assert chat == next(d for d in sc.load_specs().of_kind("ModelDeployment") if d.metadata.name == "chat-8b").spec


def test_a_measured_throughput_stays_for_the_same_tokens_or_without_a_model_figure():
    """``replayed_profile`` keeps a profile for the same workload, and an entry the capacity model
    has no figure for (a model without a known architecture) as declared."""
    specs = scenario.load(str(SCENARIOS / "default.yaml")).load_specs()
    reasoning = next(d for d in specs.of_kind("ModelDeployment") if d.metadata.name == "reasoning-70b").spec
    assert trace.replayed_profile(reasoning, reasoning) == {"H100": 3.2}
    longer = reasoning.model_copy(update={"workload": reasoning.workload.model_copy(update={"prompt_tokens_mean": 9000.0})})
    assert trace.replayed_profile(reasoning, longer) == {}
    unknown = reasoning.model_copy(update={"model": reasoning.model.model_copy(update={"source": "acme/unknown-model"})})
    unknown_longer = unknown.model_copy(update={"workload": longer.workload})
    assert unknown.architecture() is None
    assert trace.replayed_profile(unknown, unknown_longer) == {"H100": 3.2}
