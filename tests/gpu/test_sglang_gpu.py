"""Opt-in smoke test of real SGLang through the runtime adapter (skipped without a GPU).

Runs only where ``nvidia-smi`` sees a GPU, ``sglang`` and ``torch`` import, CUDA is available and a
small model is at hand: ``MERIDIAN_GPU_MODEL`` (a local directory or a hub id whose files are in
the Hugging Face cache; default Qwen/Qwen2.5-0.5B-Instruct). Checks readiness, one chat request,
the scraped metrics and a drain, as the agent would use them."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess

import aiohttp
import pytest

from meridian import fleet
from runtime_adapter import Replica, SupervisorConfig
from tests.conftest import free_port

MODEL = os.environ.get("MERIDIAN_GPU_MODEL", "Qwen/Qwen2.5-0.5B-Instruct")


def _skip_reason() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "no nvidia-smi"
    try:
        if subprocess.run([smi, "-L"], capture_output=True, timeout=30).returncode != 0:
            return "nvidia-smi sees no GPU"
    except (OSError, subprocess.TimeoutExpired):
        return "nvidia-smi failed"
    if importlib.util.find_spec("sglang") is None or importlib.util.find_spec("torch") is None:
        return "sglang/torch not installed"
    import torch  # optional heavy dependency of this opt-in test

    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    hub_cache = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME", os.path.expanduser("~/.cache/huggingface")), "hub")
    cached = os.path.isdir(os.path.join(hub_cache, "models--" + MODEL.replace("/", "--")))
    if not (os.path.isdir(MODEL) or cached or os.environ.get("MERIDIAN_GPU_MODEL")):
        return f"model {MODEL} is neither local nor cached; set MERIDIAN_GPU_MODEL"
    return None


pytestmark = [pytest.mark.gpu, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def gpu_ready() -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)


async def test_real_sglang_ready_chat_metrics_drain(gpu_ready, tmp_path):
    """Real SGLang under Replica: READY via /health_generate, a chat answer, /metrics scraped, drained to STOPPED."""
    spec = fleet.RuntimeSpec(model_path=MODEL, served_model_name="smoke", mem_fraction_static=0.5,
                             context_length=4096, max_running_requests=16)
    config = SupervisorConfig(ready_timeout_s=900, scrape_interval_s=1.0, term_grace_s=60)
    replica = Replica(spec, "gpu-smoke", port=free_port(), gpu_ids=[0], config=config, state_dir=str(tmp_path))
    try:
        await replica.start()
        assert await replica.wait_ready(900)
        assert replica.time_to_ready_s > 0 and replica.phases.load_s > 0
        async with aiohttp.ClientSession() as s:
            body = {"model": "smoke", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
            async with s.post(replica.endpoint + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                answer = await resp.json()
        assert answer["choices"][0]["message"]["role"] == "assistant"
        assert answer["usage"]["completion_tokens"] >= 1
        load = await replica.scrape_now()
        assert load.ttft.p50_ms > 0 and load.outstanding == 0
        result = await replica.drain(deadline_s=60)
        assert not result.killed and replica.state == fleet.ReplicaState.STOPPED
    finally:
        await replica.stop()
