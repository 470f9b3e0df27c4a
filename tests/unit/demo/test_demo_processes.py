"""A message about processes left behind names each one by its command line, so a failed
"processes outlived the run" check says which component leaked."""

from __future__ import annotations

import subprocess
import sys

from meridian.demo import processes


def test_describe_names_each_pid_by_its_command_line():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "marker-arg"])
    try:
        [line] = processes.describe([child.pid])
        assert line.startswith(f"{child.pid} (") and "marker-arg" in line
    finally:
        child.kill()
        child.wait()
    assert processes.describe([child.pid]) == [f"{child.pid} (gone)"]
