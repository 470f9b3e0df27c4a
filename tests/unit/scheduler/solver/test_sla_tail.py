"""The TTFT check for the prompt tail: placement sizes for the mean prompt, so `meridian validate`
warns when no pool a client region may use prefills the workload's ``prompt_tokens_p99`` in time
(the Azure conversation trace's Mumbai traffic on the L4s within 90 ms: its p99 prompt is 4,142
tokens)."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from meridian import spec
from meridian.cli import main as cli
from meridian.simulate import defaults

EXAMPLES = defaults.examples_dir()


def _files(tmp_path: pathlib.Path, workload: str) -> list[str]:
    text = (EXAMPLES / "deployments.yaml").read_text()
    old = "  workload:\n    prompt_tokens_mean: 600\n    output_tokens_mean: 250\n"
    assert old in text
    (tmp_path / "deployments.yaml").write_text(text.replace(old, workload, 1))
    files = [str(tmp_path / "deployments.yaml")]
    for p in defaults.DEFAULT_SPECS:
        if not p.endswith("deployments.yaml"):
            shutil.copy(EXAMPLES / p, tmp_path / pathlib.Path(p).name)
            files.append(str(tmp_path / pathlib.Path(p).name))
    return files


def test_validate_warns_of_a_p99_prompt_no_pool_in_reach_prefills_in_time(tmp_path, capsys):
    files = _files(tmp_path, "  workload:\n    prompt_tokens_mean: 1155\n    prompt_tokens_p99: 4142\n"
                             "    output_tokens_mean: 211\n")
    assert cli.main(["validate", *files]) == 0  # a warning, not an error: the mean is served in time
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if line.startswith("warning: chat-8b/")]
    assert len(warned) == 1, err
    line = warned[0]
    assert line.startswith("warning: chat-8b/ap-south: prompts at the p99 (4142 tokens) miss TTFT")
    assert "L4 in ap-south-1" in line and "> TTFT 800 ms" in line
    assert cli.main(["validate", *files, "-o", "json"]) == 0
    sla = {(v["deployment"], v["client_region"]): v for v in json.loads(capsys.readouterr().out)["sla"]}
    assert sla[("chat-8b", "ap-south")]["tail"].startswith("ap-south: prompts at the p99")
    assert sla[("chat-8b", "na-east")]["tail"] == ""  # H100s within reach prefill it in time


@pytest.mark.parametrize("workload", [
    "  workload:\n    prompt_tokens_mean: 1155\n    output_tokens_mean: 211\n",  # no p99: nothing to judge
    "  workload:\n    prompt_tokens_mean: 600\n    prompt_tokens_p99: 1500\n    output_tokens_mean: 250\n",
])
def test_no_warning_without_a_p99_or_when_it_fits(tmp_path, capsys, workload):
    assert cli.main(["validate", *_files(tmp_path, workload)]) == 0
    assert "prompts at the p99" not in capsys.readouterr().err


def test_a_p99_below_the_mean_names_the_field(tmp_path):
    files = _files(tmp_path, "  workload:\n    prompt_tokens_mean: 600\n    prompt_tokens_p99: 300\n")
    with pytest.raises(spec.SpecError) as exc:
        spec.load_files(files)
    issue = exc.value.issues[0]
    assert issue.file.endswith("deployments.yaml") and "workload" in issue.path
    assert "prompt_tokens_p99 (300) is below prompt_tokens_mean (600)" in issue.message
