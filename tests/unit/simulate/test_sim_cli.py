"""``meridian simulate`` end to end on a short run: the table, JSON, plots, errors, processes."""

from __future__ import annotations

import json
import pathlib

import pytest

from meridian.cli import main as cli
from meridian.simulate import report, runner, scenario


def test_json_output_has_every_policy_and_region(capsys):
    """--json prints cost, attainment, failures and TTFT percentiles per client region per policy."""
    code = cli.main(["simulate", "--hours", "0.5", "--policies", "meridian,skyserve", "--jobs", "1", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["results"]] == ["meridian", "skyserve"]
    for r in out["results"]:
        assert r["cost_usd"] > 0
        assert 0 <= r["total"]["attainment"] <= 1
        assert {"na-east", "eu-west", "ap-northeast"} <= set(r["regions"])
        assert r["regions"]["na-east"]["ttft_p99_ms"] >= r["regions"]["na-east"]["ttft_p50_ms"] > 0
        assert len(r["series"]["t_h"]) == len(r["series"]["cost_per_hour_usd"]) == 6
    assert out["verdicts"][0]["baseline"] == "skyserve"
    # The specs' cost floor, and what it leaves any policy to save against the baseline.
    assert out["floor"]["proven"] and out["floor"]["usd_per_hour"] > 0
    assert out["verdicts"][0]["max_saving"] == \
        pytest.approx(1 - out["floor"]["usd_per_hour"] / out["results"][1]["cost_per_hour_usd"], abs=1e-4)
    assert out["description"].startswith("One day of the example fleet")  # the scenario's description
    # One saving figure, defined once: (baseline - meridian) / baseline.
    meridian, skyserve = out["results"]
    assert out["saving_definition"] == "(baseline - meridian) / baseline"
    assert out["verdicts"][0]["saving"] == pytest.approx(
        (skyserve["cost_usd"] - meridian["cost_usd"]) / skyserve["cost_usd"], abs=1e-3)
    # Each run's bill is the cost module's: the same cost, shares + idle = bill, tokens counted.
    for r in out["results"]:
        bill = r["bill"]
        assert bill["kind"] == "window" and bill["hours"] == pytest.approx(0.5)
        assert bill["usd"] == pytest.approx(r["cost_usd"], abs=0.01)
        assert bill["shares_usd"] + bill["idle_usd"] == pytest.approx(bill["usd"], abs=1e-4)
        assert sum(row["usd"] for row in bill["by"]["tier"]) == pytest.approx(bill["usd"], abs=1e-4)
        assert bill["per_million_tokens"]["fleet"]["tokens"] > 0


def test_table_and_plots(tmp_path, capsys):
    """The text report has the comparison table and the verdict; --plot writes two PNGs."""
    code = cli.main(["simulate", "--hours", "0.25", "--policies", "meridian,od-multi-region", "--jobs", "1",
                     "--plot", str(tmp_path / "plots")])
    assert code == 0
    captured = capsys.readouterr()
    assert "od-multi-region" in captured.out and "SLO met" in captured.out
    # The table's saving and the verdict's are one figure, with its denominator said.
    header = next(line for line in captured.out.splitlines() if line.startswith("policy ") and "saves" in line)
    row = next(line for line in captured.out.splitlines() if line.startswith("od-multi-region ") and "%" in line)
    saves = row.split()[header.split().index("meridian")]
    assert f" od-multi-region: saves {saves} of its cost" in captured.out
    assert "meridian saves = (baseline - meridian) / baseline" in captured.out
    assert "The bill over the run" in captured.out
    assert captured.out.splitlines()[1].startswith("One day of the example fleet")  # under the heading
    assert "against the on-demand-only rows" in captured.out
    assert "Cost floor of these specs: $" in captured.out and "(proven)" in captured.out
    assert "the most any policy keeping the specs could save against them (cost floor): od-multi-region" \
        in captured.out
    for name in ("cost.png", "slo_attainment.png"):
        data = (tmp_path / "plots" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_bad_input_exits_1_with_a_message(tmp_path, capsys):
    """An unknown policy, a missing scenario file or a bad scenario exits 1 and says what is wrong."""
    assert cli.main(["simulate", "--policies", "meridian,nope"]) == 1
    assert "unknown policy 'nope'" in capsys.readouterr().err
    assert cli.main(["simulate", "--scenario", str(tmp_path / "none.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nspecs: [a.yaml]\ntraffic: []\n")
    assert cli.main(["simulate", "--scenario", str(bad)]) == 1
    assert "traffic" in capsys.readouterr().err


def test_print_scenario_is_loadable_yaml(capsys):
    """--print-scenario prints the scenario as YAML with every section."""
    assert cli.main(["simulate", "--print-scenario"]) == 0
    text = capsys.readouterr().out
    for key in ("traffic:", "spikes:", "spot:", "stock_outs:", "outages:", "tick_s:"):
        assert key in text


def test_a_printed_scenario_runs_from_wherever_it_is_saved(capsys, tmp_path, monkeypatch):
    """The documented start of one's own scenario: --print-scenario saved anywhere (here a
    directory of its own, from another working directory) loads with its specs; the paths it
    prints are absolute."""
    assert cli.main(["simulate", "--print-scenario"]) == 0
    path = tmp_path / "mine" / "my-day.yaml"
    path.parent.mkdir()
    path.write_text(capsys.readouterr().out)
    monkeypatch.chdir(tmp_path)
    sc = scenario.load(str(path))
    assert all(pathlib.Path(p).is_absolute() for p in sc.specs)
    assert len(sc.load_specs().of_kind("ModelDeployment")) == 3


def test_a_plot_path_that_cannot_be_a_directory_fails_before_the_run(capsys, tmp_path):
    """--plot naming an existing file is refused at once (exit 1, the path and why), not after the
    whole run, which used to end in a traceback with the report lost."""
    taken = tmp_path / "taken"
    taken.write_text("")
    assert cli.main(["simulate", "--hours", "24", "--policies", "meridian", "--plot", str(taken)]) == 1
    err = capsys.readouterr().err
    assert f"--plot {taken}: cannot make the directory" in err and "simulating" not in err


def test_processes_give_the_same_results_as_one(make_scenario):
    """Running policies in two processes changes nothing but the wall time."""
    sc = make_scenario(hours=0.5)
    names = ("meridian", "skyserve")
    one = runner.run(sc, names, jobs=1)
    two = runner.run(sc, names, jobs=2)
    strip = lambda cmp: [{k: v for k, v in r.to_dict().items() if k != "stats"} for r in cmp.results]  # noqa: E731
    assert strip(one) == strip(two)
    assert report.as_dict(two)["jobs"] == 2


def test_trace_option_replays_a_shipped_trace_with_the_bound(capsys):
    """``--trace azure-conv`` runs the day on the recorded arrivals; the JSON carries the
    demand-following bound, at most Meridian's cost."""
    code = cli.main(["simulate", "--hours", "0.25", "--policies", "meridian", "--jobs", "1", "--json",
                     "--trace", "azure-conv"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    bound = out["demand_bound"]
    assert bound["ticks"] == 15 and 0 < bound["usd"] <= out["results"][0]["cost_usd"]
    assert bound["summary"].startswith("Demand-following bound: $")


def test_trace_option_with_a_missing_file_names_the_field(capsys, tmp_path):
    """A trace that cannot be read is exit 1 naming the option (not a line of the scenario file: the
    file is the command line's) and the valid choices."""
    code = cli.main(["simulate", "--trace", str(tmp_path / "missing.csv")])
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("meridian simulate: --trace: ") and "no such file" in err and "azure-conv" in err


def test_several_scenario_problems_are_listed_one_per_line(capsys, tmp_path):
    """Each problem of a scenario file is a line of its own starting with FILE:LINE, under a count."""
    import yaml  # noqa: PLC0415

    data = yaml.safe_load(scenario.dump(scenario.load("default")))
    data["outages"][0]["region"] = "us-eats-1"
    data["spot"]["notice_s"] = {"aws": -5}
    path = tmp_path / "day.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli.main(["simulate", "--scenario", str(path), "--hours", "1"]) == 1
    lines = capsys.readouterr().err.splitlines()
    at = lines.index("meridian simulate: 2 problems:")
    assert lines[at + 1].startswith(f"{path}:") and "outages.0.region: no cluster in region 'us-eats-1'" in lines[at + 1]
    assert lines[at + 2].startswith(f"{path}:") and "spot.notice_s.aws: -5 s" in lines[at + 2]


def test_one_problem_over_several_lines_is_not_counted_as_several(capsys, tmp_path):
    """A YAML error in a spec file is one problem, printed with its excerpt and caret lines, and
    no 'N problems' header counts those lines."""
    import yaml  # noqa: PLC0415

    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: meridian/v1\nkind: Cluster\nmetadata: {name: [x\n")
    data = yaml.safe_load(scenario.dump(scenario.load("default")))
    data["specs"] = data["specs"] + [str(bad)]
    path = tmp_path / "day.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli.main(["simulate", "--scenario", str(path), "--hours", "1"]) == 1
    err = capsys.readouterr().err
    assert "problems:" not in err and f"meridian simulate: specs: {bad}:" in err and "invalid YAML" in err
