"""The prefix-routing benchmark runs end to end on real parts: emulator replicas, Meridian's
router and sglang-router, with figures read from the replicas' /metrics."""

from __future__ import annotations

import re
import subprocess
import sys


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
    assert "first 8 requests of Mooncake's synthetic trace" in out
    assert re.search(r"^targets: Meridian hit rate within 10% of the ideal's: (yes|NO)", out, re.MULTILINE)
