"""``python -m bench.emulator``: the emulator's sustainable request rate on this machine.

Runs one emulator process (uvloop, as ``python -m runtime_adapter.emulator``) and drives it with
wrk (closed loop, ``--connections``), so later benchmarks know whether the emulator is their
bottleneck:
- overhead-bound: ``--speedup 1e6`` makes model time negligible, so the figure is the HTTP +
  scheduler cost per request (short chat, 16 output tokens; non-streaming and streaming);
- model-bound: speedup 1 (an 8B model on an H100, 16 output tokens), where the capacity model's
  step times set the pace; compare with ``capacity_rps`` printed beside it.
wrk and the emulator share the machine's cores, so the figures are a floor. Needs wrk
(``apt-get install wrk``)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

from bench import common
from meridian import capacity

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LUA = """wrk.method = "POST"
wrk.body = '{"model":"m","messages":[{"role":"user","content":"hello there, how are you?"}],"max_tokens":%d,"ignore_eos":true%s}'
wrk.headers["Content-Type"] = "application/json"
"""








def start_emulator(port: int, speedup: float) -> subprocess.Popen:
    env = {**os.environ, "MERIDIAN_EMULATOR_SPEEDUP": repr(speedup), "MERIDIAN_EMULATOR_STARTUP_DELAY_S": "0",
           "MERIDIAN_EMULATOR_WARMUP_S": "0", "MERIDIAN_EMULATOR_GPU_TYPE": "H100"}
    proc = subprocess.Popen([sys.executable, "-m", "runtime_adapter.emulator", "--model-path", MODEL, "--port", str(port),
                             "--enable-metrics", "--max-running-requests", "256", "--log-level", "warning"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    common.wait_port(port)
    return proc


def run_wrk(port: int, *, stream: bool, tokens: int, connections: int, duration_s: int) -> dict[str, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(LUA % (tokens, ',"stream":true' if stream else ""))
        script = f.name
    try:
        out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{duration_s}s", "--latency", "-s", script,
                              f"http://127.0.0.1:{port}/v1/chat/completions"], capture_output=True, text=True,
                             timeout=duration_s + 60).stdout
    finally:
        os.unlink(script)
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50_ms": _latency(out, "50%"), "p99_ms": _latency(out, "99%"),
            "errors": float(errors.group(1)) if errors else 0.0}


def _latency(out: str, pct: str) -> float:
    m = re.search(rf"^\s+{re.escape(pct)}\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    if not m:
        return float("nan")
    value, unit = float(m.group(1)), m.group(2)
    return value / 1000.0 if unit == "us" else value * 1000.0 if unit == "s" else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.emulator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=int, default=6)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=16, help="output tokens per request")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("bench.emulator needs wrk: apt-get install -y wrk", file=sys.stderr)
        return 1
    print(f"machine: {common.machine()}")
    print(f"emulator: {MODEL} on 1x H100 (capacity model), {args.tokens} output tokens/request, "
          f"{args.connections} connections, {args.duration_s}s per run, wrk on the same cores")
    print(f"{'scenario':<40} {'req/s':>9} {'tok/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'non-2xx':>8}")
    for label, speedup, stream in (("overhead-bound, non-streaming", 1e6, False),
                                   ("overhead-bound, streaming", 1e6, True),
                                   ("model-bound (speedup 1), non-streaming", 1.0, False)):
        port = common.free_port()
        proc = start_emulator(port, speedup)
        try:
            run_wrk(port, stream=stream, tokens=args.tokens, connections=args.connections, duration_s=1)  # warm-up
            r = run_wrk(port, stream=stream, tokens=args.tokens, connections=args.connections,
                        duration_s=args.duration_s)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        print(f"{label:<40} {r['rps']:>9.0f} {r['rps'] * args.tokens:>9.0f} {r['p50_ms']:>9.1f} {r['p99_ms']:>9.1f} "
              f"{r['errors']:>8.0f}")
    perf = capacity.replica_perf(capacity.KNOWN_ARCHITECTURES[MODEL], "H100", 1)
    step_ms = perf.decode_step_s(args.connections, args.connections * 30) * 1000
    print(f"capacity model: decode step at batch {args.connections} = {step_ms:.1f} ms -> at most "
          f"{args.connections / (args.tokens * step_ms / 1000):.0f} req/s for {args.tokens}-token answers "
          f"(model-bound row should approach it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
