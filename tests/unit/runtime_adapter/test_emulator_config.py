"""Emulator settings from SGLang flags, emulator flags and MERIDIAN_EMULATOR_* variables."""

from __future__ import annotations

import inspect
import os

import pydantic
import pytest

from runtime_adapter import emulator
from runtime_adapter.emulator import config


def test_env_supplies_emulator_settings():
    """MERIDIAN_EMULATOR_* variables set emulator-only settings and faults."""
    env = {"MERIDIAN_EMULATOR_GPU_TYPE": "L4", "MERIDIAN_EMULATOR_SPEEDUP": "20", "MERIDIAN_EMULATOR_HANG": "1",
           "MERIDIAN_EMULATOR_CRASH_AFTER_REQUESTS": "3"}
    cfg = config.parse_args(["--model-path", "m", "--port", "1"], env=env)
    assert (cfg.gpu_type, cfg.speedup) == ("L4", 20.0)
    assert cfg.faults.hang and cfg.faults.crash_after_requests == 3


def test_env_sets_the_simulated_region():
    """MERIDIAN_EMULATOR_REGION (what the demo's agents pass to their replicas) turns on the
    simulated network distance; it used to be dropped, so no client ever waited its RTT."""
    cfg = config.parse_args(["--model-path", "m"], env={"MERIDIAN_EMULATOR_REGION": "eu-west-1"})
    assert cfg.region == "eu-west-1"
    assert config.parse_args(["--model-path", "m", "--region", "us-east-1"], env={}).region == "us-east-1"
    with pytest.raises(pydantic.ValidationError, match="region"):
        config.parse_args(["--model-path", "m"], env={"MERIDIAN_EMULATOR_REGION": "mars-north-1"})


def test_a_latency_map_file_gives_the_simulated_distance_its_measured_rtts(repo_root):
    """The example LatencyMap measures eu-west -> us-east-1 at 76 ms (the built-in estimate: 81) and
    adds the client region za-south: with the file the emulator waits what the scheduler and routers
    assume; a file that cannot be read is an error naming the setting."""
    path = os.path.join(repo_root, "examples", "latency-overrides.yaml")
    cfg = config.parse_args(["--model-path", "m", "--region", "us-east-1"],
                            env={"MERIDIAN_EMULATOR_LATENCY_MAP_FILE": path})
    assert cfg.latency_map().rtt_ms("eu-west", "us-east-1") == 76
    assert cfg.latency_map().rtt_ms("za-south", "eu-west-1") == 160
    assert config.parse_args(["--model-path", "m"], env={}).latency_map().rtt_ms("eu-west", "us-east-1") != 76
    with pytest.raises(pydantic.ValidationError, match="latency_map_file"):
        config.parse_args(["--model-path", "m", "--latency-map-file", "/nonexistent.yaml"], env={})
    # A spec file without a LatencyMap in it is a mistake, not an empty override.
    with pytest.raises(pydantic.ValidationError, match="has no LatencyMap document"):
        config.parse_args(["--model-path", "m", "--latency-map-file",
                           os.path.join(repo_root, "examples", "deployments.yaml")], env={})


def test_every_emulator_setting_can_be_passed_to_a_launched_emulator():
    """Each emulator-only setting has a flag and a MERIDIAN_EMULATOR_* variable (a launched replica
    gets no other way in), and environment() writes each of them."""
    sglang = {dest for _, dest, _ in config._SGLANG_ARGS}
    derived = {"faults"}
    own = set(config.EmulatorConfig.model_fields) - sglang - derived
    settable = {dest for _, dest, _ in config._EMULATOR_ARGS}
    assert own <= settable, f"not settable when launched: {sorted(own - settable)}"
    params = set(inspect.signature(emulator.environment).parameters)
    assert (own | set(config.FaultConfig.model_fields)) <= params


def test_flags_take_precedence_over_env():
    """An explicit flag wins over the environment."""
    cfg = config.parse_args(["--model-path", "m", "--gpu-type", "H200"], env={"MERIDIAN_EMULATOR_GPU_TYPE": "L4"})
    assert cfg.gpu_type == "H200"


def test_unknown_sglang_flags_are_ignored():
    """Other SGLang flags (passed through extra_args) do not stop the emulator."""
    cfg = config.parse_args(["--model-path", "m", "--trust-remote-code", "--kv-cache-dtype", "fp8_e5m2",
                             "--some-future-flag", "7"], env={})
    assert cfg.model_path == "m"


@pytest.mark.parametrize("argv,field", [
    (["--model-path", "m", "--gpu-type", "X100"], "gpu_type"),
    (["--model-path", "m", "--served-model-name", "a:b"], "served_model_name"),
    (["--model-path", "m", "--error-rate", "2"], "error_rate"),
    (["--model-path", "m", "--speedup", "0"], "speedup"),
])
def test_bad_values_name_the_field(argv, field):
    """Invalid settings fail with an error naming the field."""
    with pytest.raises(pydantic.ValidationError, match=field):
        config.parse_args(argv, env={})


def test_model_path_is_required():
    """Without --model-path the emulator refuses to start, saying so."""
    with pytest.raises(ValueError, match="--model-path"):
        config.parse_args([], env={})


def test_environment_helper_round_trips():
    """environment() produces variables that parse back to the same settings."""
    env = emulator.environment(gpu_type="A10G", speedup=5, startup_delay_s=0.1, error_rate=0.5, fail_startup=True)
    cfg = config.parse_args(["--model-path", "m"], env=env)
    assert (cfg.gpu_type, cfg.speedup, cfg.startup_delay_s) == ("A10G", 5.0, 0.1)
    assert cfg.faults.error_rate == 0.5 and cfg.faults.fail_startup
    with pytest.raises(pydantic.ValidationError, match="gpu_type"):
        emulator.environment(gpu_type="nope")


def test_unknown_model_uses_a_small_default_architecture():
    """A model path outside the known table gets the small default architecture."""
    cfg = config.parse_args(["--model-path", "/models/custom"], env={})
    assert cfg.architecture.parameters_b < 1.0
    known = config.parse_args(["--model-path", "meta-llama/Llama-3.1-70B-Instruct"], env={})
    assert known.architecture.parameters_b > 70
