"""The benchmarks' CPU accounting (``bench.common.tree_cpu_s``): CPU time of a process tree read
from the kernel's /proc/<pid>/stat, as ``bench.router`` uses it for CPU microseconds per request,
and ``bench.router``'s reading of wrk's request count."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import common
from bench.router import __main__ as router_bench

# A stat line whose command name holds spaces and a ")" (as a thread or process may name itself).
_STAT = ("4242 (py (w) 1) S 4200 4242 4200 0 -1 4194560 900 0 0 0 "
         "250 75 3 1 20 0 2 0 12345 1000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")

# Burns CPU for about 0.4 s and starts a child that does the same (so the tree has a grandchild);
# prints the child's pid once both are done, then sleeps until killed.
_BURNER = """
import subprocess, sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
if sys.argv[1] == "parent":
    child = subprocess.Popen([sys.executable, "-c", sys.argv[2], "child", sys.argv[2]], stdout=subprocess.PIPE)
    burn(0.4)
    child.stdout.readline()
    print(child.pid, flush=True)
    time.sleep(60)
else:
    burn(0.4)
    print("done", flush=True)
    time.sleep(60)
"""


def test_parse_stat_counts_fields_after_the_command_name():
    """The parent pid and utime + stime are read after the last ')' of a command name that holds
    spaces and parentheses."""
    assert common.parse_stat(_STAT) == (4200, 325)


def test_tree_cpu_counts_descendants_from_a_fake_proc(tmp_path):
    """A tree's CPU time sums the process and its live descendants, not unrelated processes, and
    skips entries that are not process directories."""
    tick = os.sysconf("SC_CLK_TCK")
    rows = {10: (1, 100, 50), 11: (10, 30, 20), 12: (11, 5, 5), 13: (1, 999, 999)}
    for pid, (ppid, utime, stime) in rows.items():
        (tmp_path / str(pid)).mkdir()
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 10
        (tmp_path / str(pid) / "stat").write_text(f"{pid} (proc {pid}) " + " ".join(fields) + "\n")
    (tmp_path / "self").mkdir()
    (tmp_path / "20").mkdir()  # a process that exited before its stat was read: no stat file
    assert common.tree_cpu_s(10, proc_root=str(tmp_path)) == (150 + 50 + 10) / tick
    assert common.tree_cpu_s(12, proc_root=str(tmp_path)) == 10 / tick


def test_tree_cpu_of_a_real_process_tree_includes_its_child():
    """A process that burns ~0.4 s of CPU and starts a child that burns ~0.4 s is measured, from
    /proc, at ~0.8 s (the child's time counted), and a sleeping tree uses no more."""
    proc = subprocess.Popen([sys.executable, "-c", _BURNER, "parent", _BURNER], stdout=subprocess.PIPE, text=True)
    child_pid = 0
    try:
        child_pid = int(proc.stdout.readline())
        used_s = common.tree_cpu_s(proc.pid)
        assert 0.75 <= used_s <= 2.0, used_s
        time.sleep(0.3)
        assert common.tree_cpu_s(proc.pid) - used_s < 0.1  # sleeping costs no CPU
        assert common.tree_cpu_s(child_pid) < used_s - 0.35  # the child alone: its own share only
    finally:
        if child_pid:
            os.kill(child_pid, 9)
        proc.kill()
        proc.wait(timeout=10)


def test_wrk_request_count_is_read_for_cpu_per_request():
    """wrk's "N requests in" line gives the request count the CPU time is divided by."""
    text = """Running 6s test @ http://127.0.0.1:1/v1/chat/completions
  1 threads and 32 connections
  Latency Distribution
     50%    2.10ms
     99%    5.00ms
  54321 requests in 6.00s, 20.00MB read
Requests/sec:   9053.50
"""
    run = router_bench.parse_wrk(text)
    assert run["requests"] == 54321 and run["rps"] == 9053.5 and run["p50_ms"] == 2.1
