"""The ``prefix`` scenario of ``python -m bench.router``: Mooncake's trace replayed against emulator
replicas through Meridian's ``prefix_cache`` policy and through sglang-router's ``cache_aware``, in
one run, beside an offline ideal router on caches of the same size.

Workload (``bench.router.workload``): the first ``--prefix-requests`` requests of Mooncake's
synthetic trace that fit the model's context, prompts built from their block hashes (512 tokens of
text per hash id, so shared hash runs are shared prompt prefixes), ``max_tokens`` = the recorded
output length (``ignore_eos``), streamed. Arrivals are compressed by ``--prefix-time-scale`` and
the emulators run that much faster (``speedup``), so each replica sees the recorded load per model
second while the run takes a fraction of the trace's time. Replicas: ``--prefix-replicas``
emulators of Llama-3.1-8B on one H100 each (the capacity model's KV budget is the prefix cache's
capacity). After a warm-up (later trace requests straight to the replicas, so no target pays for
fresh processes), the targets run one after the other on the same replicas, caches flushed before
each.

Figures: TTFT p50/p99 at the client (wall ms: at speedup S, model time is S times longer), the
prefix-cache hit rate (sum over replicas of ``sglang:cached_tokens_total`` over
``sglang:prompt_tokens_total`` from their /metrics), requests and prompt tokens per replica, and
the ideal router's hit rate (offline, same caches, always the longest cached prefix)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request

import aiohttp
import orjson
from prometheus_client import parser as prometheus_parser

from bench import common
from bench.router import workload
from meridian import capacity, tables, traces

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GPU = "H100"
CONTEXT_TOKENS = 131_072  # Llama 3.1's context; longer trace requests are skipped
COUNTERS = ("sglang:cached_tokens_total", "sglang:prompt_tokens_total", "sglang:num_requests_total")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefix-trace", default="mooncake", metavar="NAME|FILE",
                        help="trace replayed: the shipped Mooncake synthetic trace ('mooncake', the default) or "
                             "a .jsonl file in Mooncake's format (e.g. its conversation or tool-agent trace): the "
                             "prompts are built from its block hashes")
    parser.add_argument("--prefix-requests", type=int, default=2000, help="trace requests replayed (from the start)")
    parser.add_argument("--prefix-time-scale", type=float, default=6.0,
                        help="arrivals this many times faster than recorded; emulator speedup the same")
    parser.add_argument("--prefix-replicas", type=int, default=4)
    parser.add_argument("--prefix-warmup-requests", type=int, default=200,
                        help="later trace requests sent to the replicas in turn before the measured passes")
    parser.add_argument("--prefix-targets", default="meridian,sglang-router", help="comma list, run in this order")
    parser.add_argument("--prefix-policy-args", default="{}",
                        help="JSON object of Meridian prefix_cache policy args, e.g. '{\"cache_threshold\": 0.5}'")


def trace_source(name_or_path: str) -> str:
    """How the report names the replayed trace: a shipped one by its source, a file by its path."""
    if name_or_path in traces.SHIPPED:
        return traces.SHIPPED[name_or_path].source.split(" (")[0]
    return f"the trace {name_or_path}"


def parse_metrics(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """The samples named in a /metrics body, summed over label sets."""
    out = dict.fromkeys(names, 0.0)
    for family in prometheus_parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in out:
                out[sample.name] += sample.value
    return out


def scrape(url: str) -> dict[str, float]:
    """The counters of one replica's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return parse_metrics(resp.read().decode(), COUNTERS)


async def sample_kv_used(session: aiohttp.ClientSession, urls: list[str], samples: list[float]) -> None:
    """Every second, the KV tokens running requests hold on each replica (``sglang:kv_used_tokens``):
    what the prefix cache cannot use while they run."""
    while True:
        for u in urls:
            async with session.get(u + "/metrics") as resp:
                samples.append(parse_metrics(await resp.text(), ("sglang:kv_used_tokens",))["sglang:kv_used_tokens"])
        await asyncio.sleep(1.0)


def flush(url: str, wait_s: float = 30.0) -> None:
    """Empty a replica's prefix cache. SGLang refuses (400) while requests are still running or
    waiting there, as the last ones of the pass before may be for a moment after their client got
    [DONE]: so it is asked again until they are gone, ``wait_s`` at most."""
    deadline = time.monotonic() + wait_s
    while True:
        req = urllib.request.Request(url + "/flush_cache", data=b"", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                resp.read()
            return
        except urllib.error.HTTPError as exc:
            if exc.code != 400 or time.monotonic() >= deadline:
                raise SystemExit(f"{url}/flush_cache: HTTP {exc.code} after {wait_s:g} s: the replica still has "
                                 "requests running; the passes cannot start on empty caches") from None
            time.sleep(0.2)


async def _one(session: aiohttp.ClientSession, url: str, body: bytes, send_at: float,
               result: list[tuple[str, float | str]]) -> None:
    """Send one streaming chat request at ``send_at`` (monotonic); record TTFT (first content chunk)."""
    delay = send_at - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)
    t0 = time.monotonic()
    ttft = None
    try:
        async with session.post(url + "/v1/chat/completions", data=body,
                                headers={"Content-Type": "application/json"}) as resp:
            if resp.status != 200:
                result.append(("error", f"HTTP {resp.status}: {(await resp.text())[:200]}"))
                return
            async for line in resp.content:
                if ttft is None and line.startswith(b"data: {"):
                    choices = orjson.loads(line[6:]).get("choices") or [{}]
                    if choices[0].get("delta", {}).get("content"):
                        ttft = time.monotonic() - t0
        result.append(("ok", ttft if ttft is not None else time.monotonic() - t0))
    except (TimeoutError, aiohttp.ClientError) as exc:
        result.append(("error", repr(exc)))


async def replay(send_to: list[str], bodies: list[bytes], send_s: list[float], label: str,
                 replica_urls: list[str]) -> tuple[list[tuple[str, float | str]], float]:
    """Open-loop replay: every request at its (scaled) arrival time, whatever the answers' pace;
    request k goes to ``send_to[k % len(send_to)]`` (one router, or the replicas in turn).
    Returns the results and the mean KV tokens in use per replica over the pass."""
    results: list[tuple[str, float | str]] = []
    kv_used: list[float] = []
    timeout = aiohttp.ClientTimeout(total=600, sock_read=300)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:
        start = time.monotonic() + 0.5
        tasks = [asyncio.ensure_future(_one(session, send_to[k % len(send_to)], b, start + s, results))
                 for k, (b, s) in enumerate(zip(bodies, send_s))]
        sampler = asyncio.ensure_future(sample_kv_used(session, replica_urls, kv_used))
        pending = set(tasks)
        while pending:
            _done, pending = await asyncio.wait(pending, timeout=10)
            print(f"  {label}: {len(results)}/{len(bodies)} answered, {time.monotonic() - start:.0f} s",
                  file=sys.stderr, flush=True)
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    return results, (sum(kv_used) / len(kv_used) if kv_used else 0.0)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def spread(counts: list[float]) -> float:
    """Largest deviation from the even share, as a share of it."""
    mean = sum(counts) / len(counts)
    return max(abs(c - mean) for c in counts) / mean if mean else 0.0


def start_router(stack: common.Stack, target: str, urls: list[str], workdir: str, policy_args: dict) -> str:
    py = sys.executable
    port = common.free_port()
    if target == "meridian":
        routes = os.path.join(workdir, "prefix-routes.yaml")
        with open(routes, "w") as fh:
            fh.write("models:\n  - served_model_name: m-prefix\n    replicas:\n")
            fh.writelines(f"      - {{replica_id: r{i}, endpoint: '{u}', region: us-east-1, gpu_type: {GPU}}}\n" for i, u in enumerate(urls))
        config = os.path.join(workdir, "prefix-router.yaml")
        with open(config, "w") as fh:
            fh.write(orjson.dumps({"policy_args": {"prefix_cache": policy_args}}).decode())  # JSON is YAML
        stack.start(target, [py, "-m", "meridian.cli.main", "router", "--config", config, "--listen", f"127.0.0.1:{port}",
                             "--routes-file", routes, "--lkg-store", "none", "--region", "na-east", "--workers", "1",
                             "--policy", "prefix_cache", "--log-level", "warning"], port)
    elif target == "sglang-router":
        stack.start(target, [py, "-m", "sglang_router.launch_router", "--worker-urls", *urls, "--policy", "cache_aware",
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warn",
                             "--prometheus-port", str(common.free_port())], port, timeout_s=60)
    else:
        raise SystemExit(f"--prefix-targets: unknown target {target!r} (meridian, sglang-router)")
    return f"http://127.0.0.1:{port}"


def run_pass(stack: common.Stack, target: str, urls: list[str], workdir: str, policy_args: dict,
             bodies: list[bytes], send_s: list[float]) -> dict:
    """One target's replay on flushed caches: its row of figures (counters as deltas over the pass)."""
    for u in urls:
        flush(u)
    before = [scrape(u) for u in urls]
    url = start_router(stack, target, urls, workdir, policy_args)
    router_pid = stack.pid(target)
    cpu0 = common.tree_cpu_s(router_pid)
    try:
        results, kv_used = asyncio.run(replay([url], bodies, send_s, target, urls))
        router_cpu_s = common.tree_cpu_s(router_pid) - cpu0
    finally:
        stack.stop({target})
    after = [scrape(u) for u in urls]
    delta = [{k: a[k] - b[k] for k in COUNTERS} for a, b in zip(after, before)]
    ttfts = [v for status, v in results if status == "ok" and isinstance(v, float)]
    errors = [v for status, v in results if status != "ok"]
    for e in errors[:3]:
        print(f"  {target} error: {e}", file=sys.stderr)
    cached = sum(d["sglang:cached_tokens_total"] for d in delta)
    prompt = sum(d["sglang:prompt_tokens_total"] for d in delta)
    return {"p50": pct(ttfts, 0.5) * 1000, "p99": pct(ttfts, 0.99) * 1000,
            "hit": cached / prompt if prompt else 0.0, "errors": len(errors),
            "cpu_ms": router_cpu_s * 1000 / len(bodies), "kv_used": kv_used,
            "requests": [d["sglang:num_requests_total"] for d in delta],
            "tokens": [d["sglang:prompt_tokens_total"] for d in delta]}


def run(args: argparse.Namespace, workdir: str | None = None) -> int:
    """Run the scenario and print its table; returns the number of failed requests."""
    targets = [t for t in args.prefix_targets.split(",") if t]
    policy_args = orjson.loads(args.prefix_policy_args)
    scale = args.prefix_time_scale
    n_rep = args.prefix_replicas
    perf = capacity.replica_perf(capacity.KNOWN_ARCHITECTURES[MODEL], GPU, 1)
    source = trace_source(args.prefix_trace)
    reqs = workload.window(traces.read(args.prefix_trace), args.prefix_requests, scale, CONTEXT_TOKENS - 1024)
    if not reqs or not any(r.block_hashes for r in reqs):
        raise SystemExit(f"--prefix-trace {args.prefix_trace}: no request with prompt block hashes under "
                         f"{CONTEXT_TOKENS - 1024} tokens; the prefix scenario needs a trace that records "
                         "prompts as block hashes (Mooncake's .jsonl format)")
    prompts = workload.Prompts()
    print(f"\n== prefix: {source} replay, {n_rep} emulator replicas, prefix-aware routing", flush=True)
    t0 = time.monotonic()
    ideal = workload.best_ideal(reqs, prompts, n_rep, perf.kv_budget_tokens)
    ideal_s = time.monotonic() - t0
    warmup = workload.window(traces.read(args.prefix_trace), args.prefix_warmup_requests, scale, CONTEXT_TOKENS - 1024,
                             skip=len(reqs))

    def body(r: workload.TraceRequest) -> bytes:
        return orjson.dumps({"model": "m-prefix", "messages": prompts.messages(prompts.text(r)),
                             "max_tokens": max(1, r.output_tokens), "ignore_eos": True, "stream": True})

    bodies = [body(r) for r in reqs]
    send_s = [r.send_s for r in reqs]
    recorded_s = max(reqs[-1].send_s * scale, 1e-3)
    prompt_tokens = sum(r.input_tokens for r in reqs)
    print(f"workload: first {len(reqs)} requests of {source} ({recorded_s:.0f} s recorded, "
          f"{len(reqs) / recorded_s:.1f} req/s, {prompt_tokens / 1e6:.1f}M prompt tokens, "
          f"{prompt_tokens / recorded_s / 1000:.1f}k prompt tokens/s; requests over {CONTEXT_TOKENS - 1024} "
          f"tokens skipped), replayed {scale:g}x faster ({recorded_s / scale:.0f} s) against emulators at "
          f"speedup {scale:g}, so each replica's load per model second is the trace's")
    print(f"replicas: {n_rep} x {MODEL} on 1x {GPU} (emulated; prefill {perf.prefill_tokens_per_s / 1000:.1f}k "
          f"tokens/s, prefix cache up to {perf.kv_budget_tokens} tokens each); prompts: 512 tokens of text "
          f"per block hash; streamed, max_tokens = recorded output (ignore_eos); after a warm-up of "
          f"{len(warmup)} later trace requests sent to the replicas in turn, targets one after the other, caches "
          f"flushed before each; TTFT wall ms at the client (x{scale:g} = model time)")
    own_dir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="meridian-bench-prefix-")
    stack = common.Stack(workdir)
    rows: dict[str, dict] = {}
    failed = 0
    try:
        env = {**os.environ, "MERIDIAN_EMULATOR_SPEEDUP": repr(scale), "MERIDIAN_EMULATOR_STARTUP_DELAY_S": "0",
               "MERIDIAN_EMULATOR_WARMUP_S": "0", "MERIDIAN_EMULATOR_GPU_TYPE": GPU}
        urls = []
        for i in range(n_rep):
            port = common.free_port()
            stack.start(f"emulator{i}", [sys.executable, "-m", "runtime_adapter.emulator", "--model-path", MODEL,
                                         "--port", str(port), "--enable-metrics", "--context-length",
                                         str(CONTEXT_TOKENS), "--log-level", "warning"], port, env=env)
            urls.append(f"http://127.0.0.1:{port}")
        if warmup:
            # Fresh processes answer their first requests slower (memory growth, lazy imports):
            # the first target would pay it. Later trace requests, to the replicas in turn.
            asyncio.run(replay(urls, [body(r) for r in warmup], [r.send_s for r in warmup], "warm-up", urls))
        for target in targets:
            rows[target] = run_pass(stack, target, urls, workdir, policy_args, bodies, send_s)
            failed += rows[target]["errors"]
    finally:
        stack.stop()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    kv_used = sum(r["kv_used"] for r in rows.values()) / max(1, len(rows))
    live_capacity = max(0, round(perf.kv_budget_tokens - kv_used))
    t0 = time.monotonic()
    ideal_live = workload.best_ideal(reqs, prompts, n_rep, live_capacity)
    ideal_s += time.monotonic() - t0
    report(rows, ideal, ideal_live, perf.kv_budget_tokens, live_capacity, ideal_s)
    return failed


def report(rows: dict[str, dict], ideal: workload.IdealResult, ideal_live: workload.IdealResult,
           full_capacity: int, live_capacity: int, ideal_s: float) -> None:
    """The scenario's table, its footnotes and the verdict on the issue's targets."""
    ref = ideal_live.hit_rate
    table = []
    ideals = [(f"ideal, {cap // 1000}k", {"hit": res.hit_rate, "requests": list(res.requests_per_replica),
                                          "tokens": list(res.prompt_tokens_per_replica)})
              for cap, res in ((live_capacity, ideal_live), (full_capacity, ideal))]
    for name, r in [*rows.items(), *ideals]:
        reqs_txt = "/".join(f"{x:.0f}" for x in r["requests"]) + f" ({spread(r['requests']):.0%})"
        toks_txt = "/".join(f"{x / 1e6:.2f}" for x in r["tokens"]) + f" ({spread(r['tokens']):.0%})"
        of_ideal = f"{r['hit'] / ref:.0%}" if ref else "-"
        if name.startswith("ideal"):
            p50 = p99 = errors = cpu = kv = "-"
        else:
            p50, p99, errors, cpu = f"{r['p50']:.0f}", f"{r['p99']:.0f}", str(r["errors"]), f"{r['cpu_ms']:.2f}"
            kv = f"{r['kv_used'] / 1000:.0f}k"
        table.append((name, p50, p99, f"{r['hit']:.2%}", of_ideal, errors, cpu, kv, reqs_txt, toks_txt))
    print(tables.text(["target", "TTFT p50", "TTFT p99", "hit rate", "of ideal", "errors", "CPU ms/req", "KV used",
                       "requests per replica (spread)", "prompt tokens per replica, M (spread)"], table,
                      right=range(1, 8)))
    print("(TTFT: wall ms at the client, first content chunk; CPU ms/req: the router's own CPU time, user +\n"
          " system, from /proc, over its pass; KV used: mean KV tokens held by running requests per replica;\n"
          " hit rate: sum of sglang:cached_tokens_total over sglang:prompt_tokens_total of the replicas,\n"
          " from their /metrics)")
    print(f"(ideal: offline replay of the same requests over caches with the emulator's eviction, always the\n"
          f" replica with the longest cached prefix (at least one block), no load; the best of four rules for\n"
          f" the rest: ties to the fewest prompt tokens or requests sent, with or without keeping requests\n"
          f" per replica within {workload.IDEAL_SPREAD:.0%} above even (here: {ideal_live.rule}; "
          f"{ideal.rule}); 'ideal, {live_capacity // 1000}k': "
          f"caches of the KV\n budget less the KV the passes' running requests held on average "
          f"(sglang:kv_used_tokens, sampled each\n second), which the emulator's prefix cache cannot use either; "
          f"'ideal, {full_capacity // 1000}k': the whole KV budget, an\n upper bound; 'of ideal' is against the "
          f"first; computed in {ideal_s:.0f} s)")
    m, s = rows.get("meridian"), rows.get("sglang-router")
    if m:
        hit_ok = bool(ref) and m["hit"] >= 0.9 * ref
        even_ok = spread(m["requests"]) <= 0.15
        line = (f"targets: Meridian hit rate within 10% of the ideal's: {'yes' if hit_ok else 'NO'} "
                f"({m['hit'] / ref if ref else float('nan'):.0%}); requests per replica within +-15% of even: "
                f"{'yes' if even_ok else 'NO'} ({spread(m['requests']):.0%})")
        if s:
            line += (f"; TTFT p99 below sglang-router's: {'yes' if m['p99'] < s['p99'] else 'NO'} "
                     f"({m['p99']:.0f} vs {s['p99']:.0f} ms)")
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.router.prefix", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    print(f"machine: {common.machine()}")
    return 1 if run(args) else 0


if __name__ == "__main__":
    sys.exit(main())
