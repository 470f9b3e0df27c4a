"""Exec a command that the kernel kills (SIGKILL) when its parent, the supervisor, dies (Linux).

    python -I -S deathsig.py PARENT_PID COMMAND [ARG...]

Run as a fresh, single-threaded interpreter between the supervisor's fork and the engine's exec:
it sets ``PR_SET_PDEATHSIG(SIGKILL)`` (kept across exec), checks that its parent is still the
supervisor (had the supervisor died before the call, no signal would ever come: exit instead), and
execs the engine in place, so the engine keeps this pid. This replaces a ``preexec_fn``, which runs
Python code in the forked child of a threaded process, where a lock another thread held at the
fork (the import lock, an allocator's, logging's) stays held for ever.

This file is run by path and imports only the standard library (never the ``runtime_adapter``
package): it must start fast and must not load anything the engine does not need."""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
EXIT_USAGE, EXIT_PARENT_GONE, EXIT_EXEC_FAILED = 126, 125, 127


def main(argv: list[str]) -> int:
    if len(argv) < 3 or not argv[1].isdigit():
        sys.stderr.write("usage: deathsig.py PARENT_PID COMMAND [ARG...]\n")
        return EXIT_USAGE
    parent, command = int(argv[1]), argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)  # the C library already loaded: no search, no subprocess
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        sys.stderr.write(f"deathsig: prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}\n")
        return EXIT_EXEC_FAILED
    if os.getppid() != parent:
        sys.stderr.write(f"deathsig: the supervisor (pid {parent}) is gone; not starting {command[0]}\n")
        return EXIT_PARENT_GONE
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"deathsig: cannot exec {command[0]}: {exc}\n")
    return EXIT_EXEC_FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
