"""``python -m bench.router``: Meridian router vs sglang-router (PyPI) vs direct-to-backend.

One run, same backends, same load generator (wrk), on this machine:
- short: non-streaming chat requests answered by nginx with a static chat.completion (2 nginx
  "replicas" on two ports), so the proxies, not the backend, are what is measured;
- stream: LLM-shaped streaming requests (16 SSE chunks each, written separately) from two raw
  uvloop backends (bench/router/sse_backend.py);
- prefix: Mooncake's trace replayed against 4 emulator replicas through Meridian's prefix_cache
  policy and sglang-router's cache_aware, beside an offline ideal router (bench/router/prefix.py).
- short-tls: the short scenario with TLS on both hops: wrk to Meridian over HTTPS (its
  --tls-cert-file listener), Meridian to nginx over HTTPS (https:// replicas, --upstream-tls-ca-file),
  direct is wrk to nginx over HTTPS; a throwaway CA made with the openssl CLI. Compare its Meridian
  row with the short scenario's (same run, same machine).
For each scenario and target: throughput and p50/p99 latency under load (``--connections``), the
target's CPU time per request under that load (user + system microseconds of the target's
processes, all threads and worker processes, from the kernel's accounting in /proc/<pid>/stat,
over the requests wrk counted), and p50/p99 with a single connection (the per-request overhead,
"added latency" against direct). Targets run interleaved, ``--repeats`` times each; best and
median throughput are printed, and each Meridian target's ratio to sglang-router as the median of
the per-repeat ratios (run i against run i, so a load change between repeats affects both), since
the machine is shared. ``--router-cpus`` pins both routers to the same CPUs (taskset), and
``--load-cpus`` wrk and the backends. Needs wrk and nginx (installed with apt-get when missing and
root)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench import common
from bench.router import prefix
from meridian import tables

SHORT_JSON = ('{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"m-short","choices":[{"index":0,'
              '"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
              '"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}')
LUA = """wrk.method = "POST"
wrk.body = '{"model":"%s","messages":[{"role":"user","content":"hello there, how are you?"}],"max_tokens":16%s}'
wrk.headers["Content-Type"] = "application/json"
"""






def ensure_tools() -> None:
    missing = [t for t in ("wrk", "nginx") if shutil.which(t) is None and not os.path.exists(f"/usr/sbin/{t}")]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"bench.router needs {', '.join(missing)}: apt-get install -y wrk nginx-light")
    print(f"installing {', '.join(missing)} (Debian packages)", file=sys.stderr)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    pkgs = ["wrk" if t == "wrk" else "nginx-light" for t in missing]
    if subprocess.run(["apt-get", "install", "-y", "-qq", *pkgs], env=env).returncode != 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", *[p.replace("nginx-light", "nginx") for p in pkgs]],
                       check=True, env=env)


def nginx_binary() -> str:
    return shutil.which("nginx") or "/usr/sbin/nginx"


def make_certs(workdir: str) -> dict[str, str]:
    """A throwaway CA and a server certificate for 127.0.0.1 (openssl CLI), as PEM paths."""
    out = {name: os.path.join(workdir, f"{name}.pem") for name in ("ca", "ca-key", "cert", "key")}
    ext = os.path.join(workdir, "san.ext")
    with open(ext, "w") as fh:
        fh.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
        "-subj", "/CN=bench-ca", "-keyout", out["ca-key"], "-out", out["ca"])
    csr = os.path.join(workdir, "server.csr")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", out["key"], "-out", csr)
    run("x509", "-req", "-in", csr, "-CA", out["ca"], "-CAkey", out["ca-key"], "-CAcreateserial", "-days", "1",
        "-extfile", ext, "-out", out["cert"])
    return out


def nginx_conf(workdir: str, ports: list[int], tls_ports: list[int] = (), certs: dict[str, str] | None = None) -> str:
    servers = "\n".join(
        f"  server {{ listen 127.0.0.1:{p}; location / {{ default_type application/json; return 200 '{SHORT_JSON}'; }} }}"
        for p in ports)
    if tls_ports and certs:
        servers += "\n" + "\n".join(
            f"  server {{ listen 127.0.0.1:{p} ssl; ssl_certificate {certs['cert']}; ssl_certificate_key {certs['key']};"
            f" location / {{ default_type application/json; return 200 '{SHORT_JSON}'; }} }}" for p in tls_ports)
    path = os.path.join(workdir, "nginx.conf")
    with open(path, "w") as fh:
        fh.write(f"""worker_processes 1;
daemon off;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx.err warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  client_body_temp_path {workdir}/body;
{servers}
}}
""")
    return path


def parse_wrk(text: str) -> dict:
    def ms(value: str, unit: str) -> float:
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    out = {"rps": 0.0, "p50_ms": float("nan"), "p99_ms": float("nan"), "errors": 0, "requests": 0}
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if m:
        out["rps"] = float(m.group(1))
    m = re.search(r"^\s*(\d+) requests in ", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
    for pct, key in (("50", "p50_ms"), ("99", "p99_ms")):
        m = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        if m:
            out[key] = ms(m.group(1), m.group(2))
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    if m:
        out["errors"] += int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["errors"] += sum(int(x) for x in m.groups())
    return out


def pinned(cpus: str, argv: list[str]) -> list[str]:
    """``argv`` run on the CPUs listed (taskset syntax, e.g. "1" or "0,1"); as is when empty."""
    return ["taskset", "-c", cpus, *argv] if cpus else argv


def wrk(url: str, script: str, connections: int, duration_s: float, cpus: str = "") -> dict:
    cmd = pinned(cpus, ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration_s))}s", "--latency", "-s", script, url])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60)
    if done.returncode != 0 or "Requests/sec" not in done.stdout:
        raise RuntimeError(f"wrk failed against {url}: {done.stdout[-500:]} {done.stderr[-500:]}")
    return parse_wrk(done.stdout)




def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.router", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=int, default=6)
    parser.add_argument("--latency-duration-s", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32, help="short requests")
    parser.add_argument("--stream-connections", type=int, default=64)
    parser.add_argument("--chunks", type=int, default=16, help="SSE chunks per streaming response")
    parser.add_argument("--token-delay-ms", type=float, default=0.0, help="pause between SSE chunks")
    parser.add_argument("--meridian-workers", default="1,2", help="comma list of --workers values to bench")
    parser.add_argument("--policy", default="latency", help="Meridian routing policy")
    parser.add_argument("--scenarios", default="short,stream,short-tls,prefix")
    parser.add_argument("--router-cpus", default="",
                        help="CPUs for both routers, taskset syntax (e.g. 1 or 0,1; default: not pinned)")
    parser.add_argument("--load-cpus", default="", help="CPUs for wrk and the backends (default: not pinned)")
    prefix.add_arguments(parser)
    args = parser.parse_args()
    scenarios = [s for s in args.scenarios.split(",") if s and s != "prefix"]
    run_prefix = "prefix" in args.scenarios.split(",")
    if not scenarios:  # the prefix scenario alone needs neither wrk nor nginx
        print(f"machine: {common.machine()}")
        sys.exit(1 if run_prefix and prefix.run(args) else 0)
    ensure_tools()
    py = sys.executable
    workdir = tempfile.mkdtemp(prefix="meridian-bench-router-")
    stack = common.Stack(workdir)
    try:
        short_ports, stream_ports = [common.free_port(), common.free_port()], [common.free_port(), common.free_port()]
        tls_ports = [common.free_port(), common.free_port()] if "short-tls" in scenarios else []
        certs = make_certs(workdir) if tls_ports else None
        stack.start("nginx", pinned(args.load_cpus, [nginx_binary(), "-c", nginx_conf(workdir, short_ports, tls_ports,
                                                                                    certs)]), short_ports[0])
        for p in short_ports[1:] + tls_ports:
            common.wait_port(p)
        for i, p in enumerate(stream_ports):
            stack.start(f"sse{i}", pinned(args.load_cpus, [
                py, "-m", "bench.router.sse_backend", "--port", str(p), "--chunks", str(args.chunks),
                "--token-delay-ms", str(args.token_delay_ms)]), p)
        routes = os.path.join(workdir, "routes.yaml")
        with open(routes, "w") as fh:
            fh.write("models:\n")
            for name, ports, scheme in (("m-short", short_ports, "http"), ("m-stream", stream_ports, "http"),
                                        ("m-short-tls", tls_ports, "https")):
                if not ports:
                    continue
                fh.write(f"  - served_model_name: {name}\n    replicas:\n")
                for i, p in enumerate(ports):
                    fh.write(f"      - {{replica_id: {name}-{i}, endpoint: '{scheme}://127.0.0.1:{p}', region: us-east-1}}\n")
        targets: dict[str, dict[str, str]] = {s: {} for s in scenarios}
        # Target -> the process whose tree's CPU time is the target's (direct: the backend it hits).
        pids: dict[str, dict[str, int]] = {s: {} for s in scenarios}
        if "short-tls" in scenarios:
            targets["short-tls"]["direct"] = f"https://127.0.0.1:{tls_ports[0]}"
            pids["short-tls"]["direct"] = stack.pid("nginx")
        for s in [s for s in scenarios if s != "short-tls"]:
            ports = short_ports if s == "short" else stream_ports
            targets[s]["direct"] = f"http://127.0.0.1:{ports[0]}"
            pids[s]["direct"] = stack.pid("nginx" if s == "short" else "sse0")
            sp = common.free_port()
            stack.start(f"sglang-router-{s}", pinned(args.router_cpus, [py, "-m", "sglang_router.launch_router", "--worker-urls",
                                               *[f"http://127.0.0.1:{p}" for p in ports], "--policy", "round_robin",
                                               "--host", "127.0.0.1", "--port", str(sp), "--log-level", "warn",
                                               "--prometheus-port", str(common.free_port())]),
                        sp, timeout_s=60)
            targets[s]["sglang-router"] = f"http://127.0.0.1:{sp}"
            pids[s]["sglang-router"] = stack.pid(f"sglang-router-{s}")
        for w in [int(x) for x in args.meridian_workers.split(",") if x]:
            mp = common.free_port()
            stack.start(f"meridian-w{w}", pinned(args.router_cpus, [
                py, "-m", "meridian.cli.main", "router", "--listen", f"127.0.0.1:{mp}", "--routes-file", routes,
                "--lkg-store", "none", "--region", "na-east", "--workers", str(w), "--policy", args.policy,
                "--log-level", "warning"]), mp)
            time.sleep(1.0 if w > 1 else 0.2)  # let every worker bind
            for s in scenarios:
                if s != "short-tls":
                    targets[s][f"meridian-w{w}"] = f"http://127.0.0.1:{mp}"
                    pids[s][f"meridian-w{w}"] = stack.pid(f"meridian-w{w}")
            if "short-tls" in scenarios:
                tp = common.free_port()
                stack.start(f"meridian-tls-w{w}", pinned(args.router_cpus, [
                    py, "-m", "meridian.cli.main", "router", "--listen", f"127.0.0.1:{tp}", "--routes-file", routes,
                    "--lkg-store", "none", "--region", "na-east", "--workers", str(w), "--policy", args.policy,
                    "--log-level", "warning", "--tls-cert-file", certs["cert"], "--tls-key-file", certs["key"],
                    "--upstream-tls-ca-file", certs["ca"]]), tp)
                time.sleep(1.0 if w > 1 else 0.2)
                targets["short-tls"][f"meridian-w{w}"] = f"https://127.0.0.1:{tp}"
                pids["short-tls"][f"meridian-w{w}"] = stack.pid(f"meridian-tls-w{w}")
        print(f"machine: {common.machine()}")
        print(f"load: wrk -t1, {args.duration_s:g} s runs x {args.repeats} repeats, interleaved; "
              f"short: {args.connections} connections, nginx static JSON; stream: {args.stream_connections} "
              f"connections, {args.chunks} SSE chunks/response, {args.token_delay_ms:g} ms between chunks; "
              f"Meridian policy {args.policy}; sglang-router round_robin; routers on CPUs "
              f"{args.router_cpus or 'any'}, wrk and backends on CPUs {args.load_cpus or 'any'}")
        for s in scenarios:
            run_scenario(s, targets[s], pids[s], workdir, args)
    finally:
        stack.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    if run_prefix and prefix.run(args):
        sys.exit("bench.router: requests failed in the prefix scenario (see above)")


def loaded_run(url: str, script: str, conns: int, duration_s: float, pid: int, cpus: str) -> dict:
    """One wrk run under load, with the CPU microseconds per request the target's process tree
    (``pid`` and its descendants: every worker and thread) spent serving it."""
    cpu0 = common.tree_cpu_s(pid)
    run = wrk(url, script, conns, duration_s, cpus)
    cpu_s = common.tree_cpu_s(pid) - cpu0
    run["cpu_us"] = cpu_s * 1e6 / run["requests"] if run["requests"] else float("nan")
    return run


def median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def run_scenario(scenario: str, targets: dict[str, str], pids: dict[str, int], workdir: str, args) -> None:
    model = {"short": "m-short", "stream": "m-stream", "short-tls": "m-short-tls"}[scenario]
    script = os.path.join(workdir, f"{scenario}.lua")
    with open(script, "w") as fh:
        fh.write(LUA % (model, ',"stream":true' if scenario == "stream" else ""))
    conns = args.stream_connections if scenario == "stream" else args.connections
    for url in targets.values():  # warm up connections and caches
        wrk(url + "/v1/chat/completions", script, conns, 1, args.load_cpus)
    loaded: dict[str, list[dict]] = {t: [] for t in targets}
    single: dict[str, list[dict]] = {t: [] for t in targets}
    loads: list[float] = []
    for _ in range(args.repeats):
        loads.append(os.getloadavg()[0])
        for name, url in targets.items():
            loaded[name].append(loaded_run(url + "/v1/chat/completions", script, conns, args.duration_s, pids[name],
                                           args.load_cpus))
            single[name].append(wrk(url + "/v1/chat/completions", script, 1, args.latency_duration_s, args.load_cpus))
    titles = {"short": "non-streaming chat (nginx backends)", "stream": "streaming chat (SSE backends)",
              "short-tls": "non-streaming chat, TLS on both hops (HTTPS to the router, HTTPS to nginx)"}
    print(f"\n== {scenario}: {titles[scenario]} (load average before each repeat: "
          f"{' '.join(f'{x:.2f}' for x in loads)})")
    med = {}
    for name in targets:
        runs = sorted(loaded[name], key=lambda r: r["rps"])
        mid = runs[len(runs) // 2]
        one = sorted(single[name], key=lambda r: r["p50_ms"])[len(single[name]) // 2]
        med[name] = (runs[-1]["rps"], mid, one, median([r["cpu_us"] for r in loaded[name]]))
    direct_one = med["direct"][2]
    rows = []
    for name, (best, mid, one, cpu_us) in med.items():
        errors = sum(r["errors"] for r in loaded[name])
        added50 = one["p50_ms"] - direct_one["p50_ms"]
        added99 = one["p99_ms"] - direct_one["p99_ms"]
        rows.append((name, f"{best:.0f}", f"{mid['rps']:.0f}", f"{cpu_us:.1f}", f"{mid['p50_ms']:.2f}",
                     f"{mid['p99_ms']:.2f}", errors, f"{one['p50_ms']:.3f}", f"{one['p99_ms']:.3f}", f"{added50:.3f}",
                     f"{added99:.3f}"))
    print(tables.text(["target", "best rps", "median rps", "CPU us/req", "p50 ms", "p99 ms", "errors", "1-conn p50",
                       "1-conn p99", "added p50", "added p99"], rows, right="numbers"))
    sg = med.get("sglang-router")
    if sg:
        for name, (best, mid, _, cpu_us) in med.items():
            if name.startswith("meridian"):
                paired = median([m["rps"] / s["rps"] for m, s in zip(loaded[name], loaded["sglang-router"])
                                 if s["rps"]])
                print(f"{name} / sglang-router throughput: median of per-repeat ratios {paired:.2f}x "
                      f"(median {mid['rps'] / sg[1]['rps']:.2f}x, best {best / sg[0]:.2f}x); "
                      f"CPU per request {cpu_us / sg[3]:.2f}x")
    print("(CPU us/req: user+system CPU of the target's processes during the loaded runs, over the requests "
          "served, median run; direct: the backend's. added p50/p99: single-connection latency minus direct's; "
          "p50/p99 ms: under load, median run)")


if __name__ == "__main__":
    main()
