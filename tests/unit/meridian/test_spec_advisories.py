"""meridian.spec.advisories: a throughput profile measured on another workload than the one
declared is a warning of ``meridian validate``, at its line, without changing the exit status."""

from __future__ import annotations

import json
import pathlib

import pytest

from meridian import spec
from meridian.cli import main as cli
from meridian.spec import advisories

DEPLOYMENT = """apiVersion: meridian/v1
kind: ModelDeployment
metadata: {{name: chat}}
spec:
  model: {{source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}}
  resources:
    gpu_types: [H100]
    throughput_profile: {{H100: 12.5}}
{measured}  sla: {{ttft_p99_ms: 800, tpot_p99_ms: 100, client_regions: [na-east]}}
  workload: {{prompt_tokens_mean: {prompt}, output_tokens_mean: 256}}
"""


def _text(prompt: float, measured: str = "    throughput_profile_workload: {prompt_tokens_mean: 512, output_tokens_mean: 256}\n") -> str:
    return DEPLOYMENT.format(prompt=prompt, measured=measured)


def test_a_profile_measured_on_other_tokens_is_named_at_its_line():
    """Declared 2048-token prompts against a profile measured at 512: one advisory, at the
    throughput_profile_workload line, naming both figures and what to do."""
    (issue,) = advisories.advisories(spec.load_text(_text(2048), "chat.yaml"))
    assert issue.file == "chat.yaml" and issue.line == 9
    assert issue.path == "spec.resources.throughput_profile_workload"
    assert "prompt 512 -> 2048 tokens" in issue.message and "Measure again" in issue.message


@pytest.mark.parametrize("prompt", [512, 540, 470])
def test_the_same_workload_within_ten_percent_is_quiet(prompt):
    assert advisories.advisories(spec.load_text(_text(prompt), "chat.yaml")) == []


def test_without_a_measured_workload_nothing_is_judged():
    """The field is optional: a profile without it is taken as given, as before."""
    assert advisories.advisories(spec.load_text(_text(4096, measured=""), "chat.yaml")) == []


def test_a_measured_workload_without_a_profile_is_an_error():
    text = _text(512).replace("    throughput_profile: {H100: 12.5}\n", "")
    with pytest.raises(spec.SpecError, match="throughput_profile is empty"):
        spec.load_text(text, "chat.yaml")


def test_validate_warns_and_still_passes(capsys, tmp_path):
    """The CLI prints the advisory as a warning (text) or under "warnings" (json); exit 0 both ways."""
    path = pathlib.Path(tmp_path, "chat.yaml")
    path.write_text(_text(2048))
    assert cli.main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {path}:9: spec.resources.throughput_profile_workload: chat: throughput_profile was measured" in err
    assert cli.main(["validate", str(path), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is True and out["warnings"][0]["line"] == 9


def test_the_examples_declare_what_they_measured_and_agree(repo_root):
    """examples/ states the workload of its one measured profile, and it is the declared one."""
    files = spec.expand_paths([str(pathlib.Path(repo_root, "examples"))])
    loaded = spec.load_files(files)
    measured = [d for d in loaded.of_kind("ModelDeployment") if d.spec.resources.throughput_profile_workload]
    assert [d.metadata.name for d in measured] == ["reasoning-70b"]
    assert advisories.advisories(loaded) == []
