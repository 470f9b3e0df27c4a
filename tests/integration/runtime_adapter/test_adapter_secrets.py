"""The replica's API key reaches the engine without touching its command line: it is in a private
(0600) --config file the engine reads, the engine enforces it, it never shows in the engine's
/proc cmdline, the log tail or the supervisor's logs, and the file goes with
the replica."""

from __future__ import annotations

import logging
import os
import stat

import aiohttp

from meridian import fleet
from runtime_adapter import Replica, emulator, process, records
from tests.conftest import free_port
from tests.integration.runtime_adapter.conftest import FAST

SPEC = fleet.RuntimeSpec(model_path="meta-llama/Llama-3.1-8B-Instruct", served_model_name="llama")
KEY = "replica-key-7f3a9c"


async def test_the_api_key_travels_in_a_private_file_never_on_argv(tmp_path, caplog):
    """The engine requires the key (401 without it), its cmdline holds only
    the config file's path, the file is 0600, and no log line or tail line carries the key."""
    caplog.set_level(logging.DEBUG)
    env = emulator.environment(startup_delay_s=0.1, warmup_s=0.0, speedup=20.0, gpu_type="H100")
    r = Replica(SPEC, "r-key", port=free_port(), engine_command=emulator.command(), env=env, config=FAST,
                state_dir=str(tmp_path), api_key=KEY)
    await r.start()
    try:
        await r.wait_ready(60)
        cmdline = " ".join(process.proc_cmdline(r.pid) or ())
        config_path = records.engine_config_path(str(tmp_path), "r-key")
        assert KEY not in cmdline and f"--config {config_path}" in cmdline
        assert stat.S_IMODE(os.stat(config_path).st_mode) == 0o600
        async with aiohttp.ClientSession() as http:
            async with http.get(r.endpoint + "/v1/models") as resp:
                assert resp.status == 401
            async with http.get(r.endpoint + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}) as resp:
                assert resp.status == 200
    finally:
        await r.stop()
    assert not os.path.exists(config_path)
    assert KEY not in caplog.text
    assert all(KEY not in line for line in r.log_lines())


def test_the_log_tail_redacts_a_secret_the_engine_prints():
    """SGLang logs its server arguments (the key among them) at start: the tail keeps and logs the
    line with the key replaced, also when it arrives split across reads."""
    tail = process.LogTail(10, secrets=(KEY,))
    tail.feed(f"server_args=ServerArgs(api_key='{KEY[:5]}".encode())
    tail.feed(f"{KEY[5:]}', port=30000)\n".encode())
    assert tail.lines() == ["server_args=ServerArgs(api_key='***', port=30000)"]
