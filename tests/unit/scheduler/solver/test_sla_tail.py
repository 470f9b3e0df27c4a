"""The TTFT check for the prompt tail: placement sizes for the mean prompt, so `meridian validate`
warns when no pool a client region may use prefills the workload's ``prompt_tokens_p99`` in time
(the Azure conversation trace's Mumbai traffic on the L4s within 90 ms: its p99 prompt is 4,142
tokens)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil

import pytest
import solver_cases as sc

from meridian import spec
from meridian.cli import main as cli
from meridian.simulate import defaults
from scheduler import solver

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


# The solver: where a pool within reach prefills the p99 prompt in time, pools that cannot are not
# used for that region; where none can, the mean decides as before (and validate warns).

def _chat(regions: dict[str, int], p99: float | None):
    d = sc.dep("chat", regions=regions, gpu_types=["L4", "H100"], ttft_ms=800, max_rtt_ms=90)
    workload = d.spec.workload.model_copy(update={"prompt_tokens_mean": 1155, "prompt_tokens_p99": p99})
    return dataclasses.replace(d, spec=d.spec.model_copy(update={"workload": workload}))


def _solve(deployments, pools):
    prob = sc.problem(deployments, pools)
    result = solver.solve(prob, time_limit_s=10.0)
    assert sc.violations(prob, result) == []
    offers = {p.key: p for p in prob.pools}
    return {offers[k].gpu_type: n for (_, k), n in result.placement.replicas.items() if n > 0}


def test_the_solver_keeps_the_p99_prompt_in_time_where_a_pool_in_reach_can():
    pools = [sc.pool("use1", "aws", "us-east-1", "L4", 0.8), sc.pool("use1", "aws", "us-east-1", "H100", 12.0)]
    assert set(_solve([_chat({"na-east": 1}, None)], pools)) == {"L4"}  # the mean alone: the cheap L4
    assert set(_solve([_chat({"na-east": 1}, 4142)], pools)) == {"H100"}  # 4,142 tokens: 1.1 s on an L4


def test_where_no_pool_in_reach_can_the_mean_decides_and_the_region_stays_within_reach():
    """Mumbai's only pool within 90 ms is an L4; the H100 in us-east-1 is ~190 ms away. The p99 prompt
    misses on every pool within reach, so the L4 serves (not the far H100, which would miss max_rtt_ms
    for every request)."""
    pools = [sc.pool("aps1", "aws", "ap-south-1", "L4", 0.8), sc.pool("use1", "aws", "us-east-1", "H100", 12.0)]
    assert set(_solve([_chat({"ap-south": 1}, 4142)], pools)) == {"L4"}
