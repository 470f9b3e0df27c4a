"""A stand-alone supervisor process for the no-orphan and adoption tests: starts one emulator
replica through Replica, prints {"pid": ...} once it is ready, then waits to be killed.

Usage: python supervisor_child.py PORT STATE_DIR survive|die [busy|tls]

``busy`` keeps threads loading shared libraries and importing while the engine is spawned (a
threaded supervisor, as the agent is), which a fork must survive. ``tls`` puts the replica behind
its TLS relay (files and port from TLS_CERT, TLS_KEY, TLS_PORT) and prints the relay's pid too."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import importlib
import json
import os
import sys
import threading

from meridian import fleet
from runtime_adapter import Replica, SupervisorConfig, TlsFiles, emulator

SPEC = fleet.RuntimeSpec(model_path="meta-llama/Llama-3.1-8B-Instruct", served_model_name="llama")
ENV = {"MERIDIAN_EMULATOR_STARTUP_DELAY_S": "0", "MERIDIAN_EMULATOR_WARMUP_S": "0", "MERIDIAN_EMULATOR_SPEEDUP": "50"}


def _busy() -> None:
    libm = ctypes.util.find_library("m") or "libm.so.6"
    while True:
        ctypes.CDLL(libm)  # dlopen: takes the dynamic loader's lock
        importlib.reload(importlib.import_module("json.decoder"))  # takes the import machinery's locks


async def main(port: int, state_dir: str, survive: bool, tls: bool) -> None:
    config = SupervisorConfig(ready_timeout_s=60, probe_interval_s=0.1, survive_supervisor_exit=survive)
    extra = {}
    if tls:
        extra = dict(tls=TlsFiles(os.environ["TLS_CERT"], os.environ["TLS_KEY"]), tls_host="127.0.0.1",
                     tls_port=int(os.environ["TLS_PORT"]))
    replica = Replica(SPEC, "child-1", port=port, engine_command=emulator.command(), env=ENV, config=config,
                      state_dir=state_dir, **extra)
    await replica.start()
    await replica.wait_ready(60)
    print(json.dumps({"pid": replica.pid, "relay_pid": replica.relay_pid}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    if sys.argv[4:] == ["busy"]:
        for _ in range(4):
            threading.Thread(target=_busy, daemon=True).start()
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3] == "survive", sys.argv[4:] == ["tls"]))
