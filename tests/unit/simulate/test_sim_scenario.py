"""Scenario loading and validation: every name is checked against the specs, errors name the field."""

from __future__ import annotations

import pytest
import yaml

from meridian.simulate import defaults, scenario


def test_default_scenario_loads_and_matches_the_examples():
    """The built-in day validates against the example specs: 3 deployments, 9 clusters, 24 h."""
    sc = scenario.load("default")
    specs = sc.load_specs()
    assert len(specs.of_kind("ModelDeployment")) == 3
    assert len(specs.of_kind("Cluster")) == 9
    assert sc.hours == 24 and sc.ticks == 24 * 3600 // sc.tick_s
    assert sc.outages and sc.stock_outs and sc.spot.waves and sc.spikes


def test_overrides_change_hours_and_seed_and_reject_bad_values():
    """--hours and --seed override the scenario; out-of-range values are refused with the limit."""
    sc = scenario.load("default").with_overrides(hours=3, seed=11)
    assert (sc.hours, sc.seed) == (3, 11)
    with pytest.raises(scenario.ScenarioError, match="hours"):
        sc.with_overrides(hours=0)
    with pytest.raises(scenario.ScenarioError, match="seed"):
        sc.with_overrides(seed=-1)


@pytest.mark.parametrize(("override", "needle"), [
    ({"traffic": [{"deployment": "nope", "peak_rps": {"na-east": 1}}]}, "traffic.0.deployment"),
    ({"traffic": [{"deployment": "embed", "peak_rps": {"mars": 1}}]}, "unknown client region 'mars'"),
    ({"stock_outs": [{"at_h": 1, "duration_h": 1, "cluster": "aws-use1", "pool": "nope"}]}, "stock_outs.0.pool"),
    ({"stock_outs": [{"at_h": 1, "duration_h": 1, "cluster": "nope", "pool": "l4"}]}, "stock_outs.0.cluster"),
    ({"outages": [{"at_h": 1, "duration_h": 1, "region": "moon-1"}]}, "outages.0.region"),
    ({"spot": {"waves": [{"at_h": 1, "share": 0.5, "cluster": "nope"}]}}, "spot.waves.0.cluster"),
    ({"spikes": [{"at_h": 1, "duration_min": 5, "multiplier": 2, "deployment": "nope"}]}, "spikes.0.deployment"),
    # A real client region the deployment does not serve used to crash the bound's solver.
    ({"traffic": [{"deployment": "reasoning-70b", "peak_rps": {"ap-south": 1}}]},
     "traffic.0.peak_rps.ap-south: deployment 'reasoning-70b' does not serve client region 'ap-south'"),
    # A negative notice used to raise a traceback from the simulated provider.
    ({"spot": {"notice_s": {"aws": -100}}}, "spot.notice_s.aws: -100 s"),
])
def test_names_are_checked_against_the_specs(override, needle, make_scenario):
    """A scenario naming a deployment, region, cluster or pool the specs lack is refused, naming the field."""
    sc = make_scenario(**override)
    with pytest.raises(scenario.ScenarioError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        sc.load_specs()


def test_field_errors_name_the_path(make_scenario):
    """Schema errors (bad types, unknown fields, bad intervals) name the field."""
    with pytest.raises(scenario.ScenarioError, match="traffic.0.trough_share"):
        make_scenario(traffic=[{"deployment": "embed", "peak_rps": {"na-east": 1}, "trough_share": 2}])
    with pytest.raises(scenario.ScenarioError, match="colour"):
        make_scenario(colour="blue")
    # A misspelt field gets the nearest valid name, at the top and inside a list entry.
    with pytest.raises(scenario.ScenarioError, match="sede: unknown field 'sede'; did you mean 'seed'"):
        make_scenario(sede=3)
    with pytest.raises(scenario.ScenarioError, match="traffic.0.trough: unknown field 'trough'; did you mean "
                                                     "'trough_share'"):
        make_scenario(traffic=[{"deployment": "embed", "peak_rps": {"na-east": 1}, "trough": 0.2}])
    with pytest.raises(scenario.ScenarioError, match="control_interval_s"):
        make_scenario(control_interval_s=90.0)


def test_yaml_file_round_trip(tmp_path):
    """A scenario dumped as YAML and read back from a file is the same scenario; spec paths are
    relative to the file."""
    sc = scenario.load("default")
    text = scenario.dump(sc)
    data = yaml.safe_load(text)
    data["specs"] = [str(defaults.examples_dir() / p) for p in data["specs"]]
    path = tmp_path / "day.yaml"
    path.write_text(yaml.safe_dump(data))
    again = scenario.load(str(path))
    assert again.model_dump(exclude={"base_dir", "specs"}) == sc.model_dump(exclude={"base_dir", "specs"})
    assert len(again.load_specs().of_kind("Cluster")) == 9


def test_errors_in_a_scenario_file_name_its_lines(tmp_path):
    """Each problem of a scenario file is one line, ``file:line: field: message``, at the line of
    the field: schema errors, and names checked against the specs once they are loaded."""
    data = yaml.safe_load(scenario.dump(scenario.load("default")))
    data["traffic"][0]["trough_share"] = 2
    path = tmp_path / "day.yaml"
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
    line_of = {line.strip().removeprefix("- "): i for i, line in enumerate(text.splitlines(), 1)}
    with pytest.raises(scenario.ScenarioError) as err:
        scenario.load(str(path))
    assert str(err.value) == (f"{path}:{line_of['trough_share: 2']}: traffic.0.trough_share: "
                              "Input should be less than or equal to 1")

    data["traffic"][0]["trough_share"] = 0.2
    data["traffic"][0]["peak_rps"]["mars"] = 1.0
    data["outages"][0]["region"] = "us-eats-1"
    text = yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
    line_of = {line.strip().removeprefix("- "): i for i, line in enumerate(text.splitlines(), 1)}
    with pytest.raises(scenario.ScenarioError) as err:
        scenario.load(str(path)).load_specs()
    first, second = str(err.value).splitlines()
    assert first.startswith(f"{path}:{line_of['mars: 1.0']}: traffic.0.peak_rps.mars: unknown client region 'mars'")
    assert second.startswith(f"{path}:{line_of['region: us-eats-1']}: outages.0.region: no cluster in region "
                             "'us-eats-1'")


def test_unreadable_or_invalid_files_are_reported(tmp_path):
    """A missing file or a file that is not a YAML mapping gives a ScenarioError saying so."""
    with pytest.raises(scenario.ScenarioError, match="cannot read"):
        scenario.load(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(scenario.ScenarioError, match="mapping"):
        scenario.load(str(bad))
