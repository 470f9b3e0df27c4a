"""``python -m bench.emulator``: the emulator's sustainable request rate on this machine.

Runs one emulator process (uvloop, as ``python -m runtime_adapter.emulator``) and drives it with
wrk (closed loop, ``--connections``), so later benchmarks know whether the emulator is their
bottleneck:
- overhead-bound: ``--speedup 1e6`` makes model time negligible, so the figure is the HTTP +
  scheduler cost per request (short chat, 16 output tokens; non-streaming and streaming);
- model-bound: speedup 1 (an 8B model on an H100, 16 output tokens), where the capacity model's
  step times set the pace; compare with ``capacity_rps`` printed beside it.
- long prompts: the cost of a 100k-token prompt in the prefix cache (insert, hit, half-shared,
  insert with eviction; in process), and the whole request through the HTTP server at speedup 1e6
  (tokenizing, caching and answering a 100k-token prompt, cold and as a cache hit).
wrk and the emulator share the machine's cores, so the figures are a floor. Needs wrk
(``apt-get install wrk``)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import orjson

from bench import common
from meridian import capacity, progress, tables
from runtime_adapter.emulator import radix, tokens

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LUA = """wrk.method = "POST"
wrk.body = '{"model":"m","messages":[{"role":"user","content":"hello there, how are you?"}],"max_tokens":%d,"ignore_eos":true%s}'
wrk.headers["Content-Type"] = "application/json"
"""








LONG_PROMPT_TOKENS = 100_000


def start_emulator(port: int, speedup: float, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "MERIDIAN_EMULATOR_SPEEDUP": repr(speedup), "MERIDIAN_EMULATOR_STARTUP_DELAY_S": "0",
           "MERIDIAN_EMULATOR_WARMUP_S": "0", "MERIDIAN_EMULATOR_GPU_TYPE": "H100"}
    proc = subprocess.Popen([sys.executable, "-m", "runtime_adapter.emulator", "--model-path", MODEL, "--port", str(port),
                             "--enable-metrics", "--max-running-requests", "256", "--log-level", "warning", *extra],
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


def long_text(seed: int, n_tokens: int) -> str:
    """``n_tokens`` emulator tokens of distinct words (one token each: a space and four characters)."""
    return "".join(f" {seed % 36:x}{i % 46656:03x}"[:5] for i in range(n_tokens))


def _median_ms(fn, repeats: int = 3) -> float:
    """Median wall time of ``fn()`` over ``repeats`` fresh runs (``fn`` sets up and returns a timer)."""
    return statistics.median(fn() for _ in range(repeats)) * 1000.0


def prefix_cache_rows(capacity_tokens: int) -> list[tuple[str, float]]:
    """In-process cost (ms, median of 3) of a 100k-token prompt in the emulator's prefix cache."""
    n = LONG_PROMPT_TOKENS
    a, c = tokens.tokenize(long_text(1, n)), tokens.tokenize(long_text(3, n))
    b = a[: n // 2] + tokens.tokenize(long_text(2, n // 2))

    def timed(setup, op):
        def run() -> float:
            cache = radix.PrefixCache(capacity_tokens)
            setup(cache)
            t0 = time.perf_counter()
            op(cache)
            return time.perf_counter() - t0
        return run

    def full(cache):
        cache.insert(a)
        cache.insert(b)
        cache.capacity_tokens = len(a) + n // 2  # full: the next insert evicts 100k tokens

    def tokenize_only() -> float:
        text = long_text(4, n)
        t0 = time.perf_counter()
        tokens.tokenize(text)
        return time.perf_counter() - t0

    return [
        (f"insert a {n // 1000}k-token prompt (empty cache)", _median_ms(timed(lambda _c: None, lambda k: k.insert(a)))),
        (f"match it again (a {n // 1000}k-token hit)", _median_ms(timed(lambda k: k.insert(a), lambda k: k.match(a)))),
        ("match + insert a prompt sharing half of it",
         _median_ms(timed(lambda k: k.insert(a), lambda k: (k.match(b), k.insert(b))))),
        (f"insert {n // 1000}k new tokens into a full cache (evicts {n // 1000}k)",
         _median_ms(timed(full, lambda k: k.insert(c)))),
        (f"for scale: tokenize the {n // 1000}k-token text", _median_ms(tokenize_only)),
    ]


def long_prompt_requests(port: int) -> tuple[float, float]:
    """Wall ms of a 100k-token /v1/completions request (1 output token) at speedup 1e6: cold, then
    the same prompt again (a prefix-cache hit); medians over 3 distinct prompts."""
    cold, hot = [], []
    for seed in range(5, 8):
        body = orjson.dumps({"model": "m", "prompt": long_text(seed, LONG_PROMPT_TOKENS), "max_tokens": 1})
        for out in (cold, hot):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            t0 = time.perf_counter()
            with urllib.request.urlopen(req, timeout=60) as resp:
                usage = orjson.loads(resp.read())["usage"]
            out.append((time.perf_counter() - t0) * 1000.0)
            if usage["prompt_tokens"] < LONG_PROMPT_TOKENS:
                raise RuntimeError(f"emulator counted {usage['prompt_tokens']} prompt tokens, expected "
                                   f">= {LONG_PROMPT_TOKENS}")
    return statistics.median(cold), statistics.median(hot)


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
    rows = []
    scenarios = (("overhead-bound, non-streaming", 1e6, False), ("overhead-bound, streaming", 1e6, True),
                 ("model-bound (speedup 1), non-streaming", 1.0, False))
    for label, speedup, stream in progress.track(scenarios, "bench.emulator: wrk runs", unit="scenarios"):
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
        rows.append([label, f"{r['rps']:.0f}", f"{r['rps'] * args.tokens:.0f}", f"{r['p50_ms']:.1f}",
                     f"{r['p99_ms']:.1f}", f"{r['errors']:.0f}"])
    print(tables.text(["scenario", "req/s", "tok/s", "p50 ms", "p99 ms", "non-2xx"], rows, right="numbers"))
    perf = capacity.replica_perf(capacity.KNOWN_ARCHITECTURES[MODEL], "H100", 1)
    step_ms = perf.decode_step_s(args.connections, args.connections * 30) * 1000
    print(f"capacity model: decode step at batch {args.connections} = {step_ms:.1f} ms -> at most "
          f"{args.connections / (args.tokens * step_ms / 1000):.0f} req/s for {args.tokens}-token answers "
          f"(model-bound row should approach it)")
    print(f"\nlong prompts: prefix cache of {perf.kv_budget_tokens} tokens (the H100 replica's KV budget), "
          "in process, median of 3")
    port = common.free_port()
    proc = start_emulator(port, 1e6, "--context-length", "131072")
    try:
        cold_ms, hot_ms = long_prompt_requests(port)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    rows = [[label, f"{ms:.1f}"] for label, ms in prefix_cache_rows(perf.kv_budget_tokens)]
    rows += [["HTTP: 100k-token completion at speedup 1e6, cold", f"{cold_ms:.1f}"],
             ["HTTP: the same prompt again (prefix-cache hit)", f"{hot_ms:.1f}"]]
    print(tables.text(["operation", "ms"], rows, right="numbers"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
