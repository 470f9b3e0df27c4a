"""The prefix-routing benchmark runs end to end on real parts: emulator replicas, Meridian's
router and sglang-router, with figures read from the replicas' /metrics."""

from __future__ import annotations

import re
import subprocess
import sys

from meridian import traces


def test_prefix_scenario_replays_the_trace_through_both_routers(repo_root):
    """A small replay (8 Mooncake requests, 2 replicas) answers every request through both routers
    and prints each one's row: all requests counted on the replicas' /metrics, no failure, a hit
    rate, and the verdict on the targets."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.router", "--scenarios", "prefix", "--prefix-requests", "8",
         "--prefix-replicas", "2", "--prefix-time-scale", "10", "--prefix-warmup-requests", "4"],
        cwd=repo_root, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    for target in ("meridian", "sglang-router", "ideal, 454k"):
        row = re.search(rf"^{re.escape(target)}\s+(.*)$", out, re.MULTILINE)
        assert row, (target, out)
        # TTFT p50, p99, hit rate, of ideal, errors, CPU ms/req, KV used, requests per replica, ...
        cells = row.group(1).split()
        assert cells[2].endswith("%")
        assert sum(int(n) for n in cells[7].split("/")) == 8  # every request reached a replica once
        if not target.startswith("ideal"):
            assert cells[4] == "0"  # no failed request
    assert "first 8 requests of Mooncake FAST'25 synthetic trace" in out
    assert re.search(r"^targets: Meridian hit rate within 10% of the ideal's: (yes|NO)", out, re.MULTILINE)


def test_prefix_scenario_replays_a_mooncake_format_file(repo_root, tmp_path):
    """``--prefix-trace FILE`` replays another trace in Mooncake's format (here rows of the shipped
    one from its middle, as one of Mooncake's other traces would come): the report names the file
    and every request is answered through both routers."""
    shipped = traces.shipped("mooncake").path.read_text().splitlines()
    path = tmp_path / "conversation.jsonl"
    path.write_text("\n".join(shipped[1500:1506]) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "bench.router", "--scenarios", "prefix", "--prefix-trace", str(path),
         "--prefix-requests", "6", "--prefix-replicas", "2", "--prefix-time-scale", "10",
         "--prefix-warmup-requests", "0"],
        cwd=repo_root, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"first 6 requests of the trace {path}" in done.stdout
    for target in ("meridian", "sglang-router"):
        row = re.search(rf"^{re.escape(target)}\s+(.*)$", done.stdout, re.MULTILINE)
        assert row and row.group(1).split()[4] == "0", done.stdout


def test_prefix_scenario_refuses_a_trace_without_block_hashes(repo_root, tmp_path):
    """A trace that records no prompt content (Azure's) cannot drive a prefix benchmark: the run
    stops before starting anything and says which format it needs."""
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    done = subprocess.run(
        [sys.executable, "-m", "bench.router", "--scenarios", "prefix", "--prefix-trace", str(path)],
        cwd=repo_root, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "needs a trace that records prompts as block hashes (Mooncake's .jsonl format)" in done.stderr
