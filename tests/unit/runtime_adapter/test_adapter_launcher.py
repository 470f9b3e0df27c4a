"""The SGLang command line and environment built from a runtime spec."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from meridian import fleet, spec
from meridian.fleet import runtime
from runtime_adapter import launcher
from runtime_adapter.emulator import config as emulator_config

FULL = fleet.RuntimeSpec(
    model_path="meta-llama/Llama-3.1-8B-Instruct", served_model_name="llama-8b", model_revision="abc123", tp_size=2,
    context_length=8192, mem_fraction_static=0.85, quantization="fp8", max_running_requests=64,
    max_queued_requests=256, extra_args=("--schedule-policy", "lpm", "--chunked-prefill-size", "4096",
                                         "--enable-cache-report"), env={"NCCL_DEBUG": "WARN"})


def pairs(args: tuple[str, ...]) -> dict[str, str | None]:
    """Flag -> value (None for a switch)."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(args):
        flag = args[i]
        if flag in launcher.SGLANG_SWITCHES:
            out[flag] = None
            i += 1
        else:
            out[flag] = args[i + 1]
            i += 2
    return out


def test_full_spec_maps_to_sglang_flags():
    """Every spec field lands on its SGLang flag; GPUs, cache dir and spec env land in the environment."""
    plan = launcher.build_command(FULL, host="0.0.0.0", port=30001, gpu_ids=[2, 3], api_key="secret",
                                  cache_dir="/nvme/weights", config_path="/run/r1.engine.yaml")
    assert plan.argv[:3] == launcher.SGLANG_COMMAND
    assert pairs(plan.engine_args) == {
        "--model-path": "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name": "llama-8b", "--host": "0.0.0.0",
        "--port": "30001", "--tp-size": "2", "--mem-fraction-static": "0.85", "--revision": "abc123",
        "--context-length": "8192", "--max-running-requests": "64", "--max-queued-requests": "256",
        "--quantization": "fp8", "--enable-metrics": None, "--config": "/run/r1.engine.yaml",
        "--download-dir": "/nvme/weights",
        "--schedule-policy": "lpm", "--chunked-prefill-size": "4096", "--enable-cache-report": None,
    }
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert plan.env["HF_HOME"] == "/nvme/weights" and plan.env["HF_HUB_CACHE"] == "/nvme/weights/hub"
    assert plan.env["NCCL_DEBUG"] == "WARN"
    assert "secret" not in " ".join(plan.argv)  # the key is in the private --config file only
    assert yaml.safe_load(plan.secret_files["/run/r1.engine.yaml"]) == {"api-key": "secret"}


def test_the_api_key_needs_a_private_config_file_and_no_secret_rides_in_extra_args():
    """Without a .yaml config path the key is refused (it would have to go on argv); a secret flag in
    extra_args, or a second --config beside the key's, is refused naming it."""
    with pytest.raises(launcher.LaunchError, match="config_path"):
        launcher.build_command(FULL, port=30001, api_key="k")
    for flag in ("--api-key", "--admin-api-key=x"):
        spec = dataclasses.replace(FULL, extra_args=(flag, "v"))
        with pytest.raises(launcher.LaunchError, match="visible to every user"):
            launcher.build_command(spec, port=30001)
    spec = dataclasses.replace(FULL, extra_args=("--config", "mine.yaml"))
    assert "--config" in launcher.build_command(spec, port=30001).argv  # no key: the user's own --config
    with pytest.raises(launcher.LaunchError, match="carries the replica's API key"):
        launcher.build_command(spec, port=30001, api_key="k", config_path="/run/e.yaml")


def test_every_flag_is_a_documented_sglang_flag():
    """The argv uses only flags of SGLang 0.5.23 (reference/sglang.md's list)."""
    plan = launcher.build_command(FULL, port=30001, gpu_ids=[0, 1], api_key="k", cache_dir="/c",
                                  config_path="/run/e.yaml")
    flags = [a for a in plan.engine_args if a.startswith("--")]
    assert flags and set(flags) <= launcher.SGLANG_FLAGS


def test_minimal_spec_leaves_engine_defaults():
    """Zero/empty spec fields are not passed, so SGLang's own defaults apply."""
    plan = launcher.build_command(fleet.RuntimeSpec(model_path="Qwen/Qwen2.5-0.5B-Instruct", served_model_name="qwen"),
                                  port=30000)
    flags = pairs(plan.engine_args)
    for absent in ("--context-length", "--max-running-requests", "--max-queued-requests", "--quantization",
                   "--revision", "--api-key", "--download-dir", "--is-embedding"):
        assert absent not in flags
    assert "CUDA_VISIBLE_DEVICES" not in plan.env


def test_engine_command_is_configurable():
    """The same plan runs the emulator when given its engine command."""
    plan = launcher.build_command(FULL, port=1234, engine_command=launcher.EMULATOR_COMMAND)
    assert plan.argv[:3] == (sys.executable, "-m", "runtime_adapter.emulator")
    assert plan.argv[3:] == plan.engine_args


def test_embedding_spec_sets_is_embedding():
    """An embedding deployment runs with --is-embedding."""
    s = fleet.RuntimeSpec(model_path="BAAI/bge-large-en-v1.5", served_model_name="bge", is_embedding=True)
    assert "--is-embedding" in launcher.build_command(s, port=1).engine_args


@pytest.mark.parametrize("kwargs,field", [
    ({"gpu_ids": [0, 1, 2]}, "tp_size"),
    ({"gpu_ids": [0, 0]}, "gpu_ids"),
    ({"port": 0}, "port"),
    ({"port": 70000}, "port"),
    ({"host": ""}, "host"),
])
def test_bad_launch_parameters_name_the_parameter(kwargs, field):
    """Invalid assignments fail with a LaunchError that names the parameter."""
    args = {"port": 30001, **kwargs}
    with pytest.raises(launcher.LaunchError, match=field):
        launcher.build_command(FULL, **args)


@pytest.mark.parametrize("changes,field", [
    ({"served_model_name": "a:b"}, "served_model_name"),
    ({"model_path": ""}, "model_path"),
    ({"extra_args": ("--port", "1")}, "extra_args"),
    ({"extra_args": ("--download-dir=/x",)}, "extra_args"),
    ({"engine": "vllm"}, "engine"),
])
def test_bad_spec_fields_are_named(changes, field):
    """A spec the launcher cannot honour fails naming the runtime field."""
    import dataclasses

    with pytest.raises(launcher.LaunchError, match=field):
        launcher.build_command(dataclasses.replace(FULL, **changes), port=30001)


def test_plan_from_the_example_deployments(repo_root):
    """Every example deployment yields a launchable plan on each of its GPU types."""
    files = sorted(os.path.join(repo_root, "examples", f) for f in os.listdir(os.path.join(repo_root, "examples"))
                   if f.endswith(".yaml"))
    result = spec.load_files(files)
    deployments = result.of_kind("ModelDeployment")
    assert deployments
    for dep in deployments:
        for gpu_type in dep.spec.resources.gpu_types or ["H100"]:
            rs = runtime.runtime_spec(dep, gpu_type)
            count = dep.spec.resources.gpus_for(gpu_type)
            plan = launcher.build_command(rs, port=30000, gpu_ids=list(range(count)))
            assert pairs(plan.engine_args)["--tp-size"] == str(rs.tp_size)


def write_secrets(plan: launcher.LaunchPlan) -> None:
    for path, text in plan.secret_files.items():
        pathlib.Path(path).write_text(text)


def test_emulator_parses_the_same_argv(tmp_path):
    """The emulator accepts the exact SGLang argv, --config file included, and reads the same values."""
    plan = launcher.build_command(FULL, port=30001, gpu_ids=[0, 1], api_key="k", cache_dir="/c",
                                  config_path=str(tmp_path / "e.yaml"))
    write_secrets(plan)
    cfg = emulator_config.parse_args(list(plan.engine_args), env={})
    assert (cfg.model_path, cfg.served_model_name, cfg.port, cfg.tp_size) == (FULL.model_path, "llama-8b", 30001, 2)
    assert (cfg.context_length, cfg.max_running_requests, cfg.max_queued_requests) == (8192, 64, 256)
    assert cfg.enable_metrics and cfg.api_key == "k" and cfg.quantization == "fp8" and cfg.enable_cache_report
    assert cfg.mem_fraction_static == 0.85 and cfg.chunked_prefill_size == 4096 and cfg.schedule_policy == "lpm"


_PARSE_WITH_SGLANG = """
import json, sys
from sglang.srt.server_args import prepare_server_args
a = prepare_server_args(json.loads(sys.argv[1]))
print(json.dumps({k: getattr(a, k) for k in json.loads(sys.argv[2])}))
"""


def _sglang_python() -> str | None:
    """An interpreter that can import sglang.srt.server_args: this one, or MERIDIAN_SGLANG_PYTHON
    (e.g. a side venv with `pip install --no-deps sglang` and the CPU torch)."""
    if importlib.util.find_spec("sglang") is not None:
        return sys.executable
    return os.environ.get("MERIDIAN_SGLANG_PYTHON") or None


def test_sglang_own_parser_accepts_the_argv(tmp_path):
    """SGLang's prepare_server_args parses our argv to the intended values (skipped without sglang)."""
    python = _sglang_python()
    if python is None:
        pytest.skip("sglang.srt.server_args not importable; set MERIDIAN_SGLANG_PYTHON to a venv that has it")
    plan = launcher.build_command(FULL, port=30001, gpu_ids=[0, 1], api_key="k", cache_dir="/c",
                                  config_path=str(tmp_path / "e.yaml"))
    write_secrets(plan)
    expected = {"model_path": FULL.model_path, "served_model_name": "llama-8b", "port": 30001, "tp_size": 2,
                "mem_fraction_static": 0.85, "revision": "abc123", "context_length": 8192,
                "max_running_requests": 64, "max_queued_requests": 256, "quantization": "fp8",
                "enable_metrics": True, "api_key": "k", "download_dir": "/c", "schedule_policy": "lpm",
                "chunked_prefill_size": 4096, "enable_cache_report": True}
    out = subprocess.run([python, "-c", _PARSE_WITH_SGLANG, json.dumps(list(plan.engine_args)), json.dumps(list(expected))],
                         capture_output=True, text=True, timeout=240, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected
