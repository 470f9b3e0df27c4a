"""Engine processes: spawn in their own process group, identify them across restarts of the
supervisor (pid + kernel start time), signal the whole group, and keep a bounded tail of the log.

No orphans: in the default mode the child gets ``PR_SET_PDEATHSIG(SIGKILL)`` so the kernel kills it
when the supervisor dies, even by SIGKILL. (Linux delivers it when the *thread* that forked exits;
the supervisor forks from its event-loop thread, which lives as long as the process.) The signal is
set by ``deathsig.py``, a tiny interpreter exec'd between fork and the engine (no ``preexec_fn``:
Python code in the child of a threaded process can deadlock on a lock held at the fork), so the
fork itself runs only CPython's async-signal-safe C path. In the adoptable mode
(``survive_supervisor_exit``) the engine outlives the supervisor on purpose, writes its log to a
file, and a later supervisor re-attaches with ``Replica.adopt``.

Secrets: files a launch plan holds secrets in (the API key's ``--config``) are written with mode
0600 (``write_private_file``), the engine's log file too, and ``LogTail`` replaces each secret it is
given with ``***`` before a line is kept or logged (SGLang logs its server arguments, the API key
among them, at start).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import pathlib
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import TextIO
from meridian import waits

log = logging.getLogger(__name__)

LOG_READ_CHUNK_BYTES = 65536
DEATHSIG_HELPER = str(pathlib.Path(__file__).with_name("deathsig.py"))
REDACTED = "***"


def with_death_signal(argv: Sequence[str], parent_pid: int) -> list[str]:
    """``argv`` run through ``deathsig.py``: killed when ``parent_pid`` dies (see the module doc)."""
    return [sys.executable, "-I", "-S", DEATHSIG_HELPER, str(parent_pid), *argv]


def write_private_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` readable by this user only (0600), atomically (temp file + rename)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".secret-")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _open_private_log(path: str):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")


def proc_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), or None when
    no such process. A pid reused by another process has a different start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def proc_state(pid: int) -> str | None:
    """The one-letter state from /proc/<pid>/stat ('Z' for a zombie), or None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    return fields[0] if fields else None


def proc_cmdline(pid: int) -> tuple[str, ...] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return proc_state(pid) not in (None, "Z")


def group_alive(pgid: int) -> bool:
    """True when any process of group ``pgid`` exists (zombies included)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to the process group; False when the group is already gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


class LogTail:
    """The last ``max_lines`` lines of an engine's output, read from a pipe or a file. ``echo``:
    also write each (redacted) line there, e.g. the container's stdout, which the engine then never
    writes to itself (so a secret it prints is replaced before it reaches ``kubectl logs``)."""

    def __init__(self, max_lines: int = 200, logger_name: str = "runtime_adapter.engine", replica_id: str = "",
                 secrets: Iterable[str] = (), echo: TextIO | None = None) -> None:
        self._echo = echo
        self._lines: collections.deque[str] = collections.deque(maxlen=max_lines)
        self._partial = ""
        self._log = logging.getLogger(logger_name)
        self._replica_id = replica_id
        self._secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))

    def _redact(self, line: str) -> str:
        for secret in self._secrets:
            line = line.replace(secret, REDACTED)
        return line

    def feed(self, data: bytes) -> None:
        text = self._partial + data.decode(errors="replace")
        *complete, self._partial = text.split("\n")
        for line in complete:
            line = self._redact(line.rstrip("\r"))
            self._lines.append(line)
            if self._echo is not None:
                self._echo.write(line + "\n")
                self._echo.flush()
            self._log.debug("replica=%s engine_log=%r", self._replica_id, line)

    def lines(self, n: int | None = None) -> list[str]:
        out = list(self._lines) + ([self._redact(self._partial)] if self._partial else [])
        return out[-n:] if n else out

    async def follow_stream(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(LOG_READ_CHUNK_BYTES):
            self.feed(chunk)

    async def follow_file(self, path: str, interval_s: float, max_bytes: int, stop: asyncio.Event,
                          from_end: bool = False) -> None:
        """Tail ``path``; truncate it once past ``max_bytes`` (the engine writes with O_APPEND, so
        its writes continue at the new end) so a long-lived adopted engine cannot fill the disk."""
        offset = os.path.getsize(path) if from_end and os.path.exists(path) else 0
        while True:
            try:
                size = os.path.getsize(path)
                if size < offset:
                    offset = 0
                if size > offset:
                    with open(path, "rb") as f:
                        f.seek(offset)
                        data = f.read(size - offset)
                    offset += len(data)
                    self.feed(data)
                if size > max_bytes:
                    os.truncate(path, 0)
                    offset = 0
            except FileNotFoundError:
                offset = 0
            if stop.is_set():
                return
            await waits.event_set(stop, interval_s)  # stopped, or the poll period elapsed


class EngineProcess:
    """A running engine: either our child (exit code known) or an adopted process (polled)."""

    def __init__(self, pid: int, start_ticks: int | None, child: asyncio.subprocess.Process | None,
                 poll_interval_s: float = 0.5) -> None:
        self.pid = pid
        self.pgid = pid  # started with start_new_session, so it leads its own group
        self.start_ticks = start_ticks
        self._child = child
        self._poll_interval_s = poll_interval_s

    @property
    def adopted(self) -> bool:
        return self._child is None

    @property
    def returncode(self) -> int | None:
        if self._child is not None:
            return self._child.returncode
        return None if self.is_running() else -1

    def is_running(self) -> bool:
        if self._child is not None:
            return self._child.returncode is None
        return pid_alive(self.pid) and proc_start_ticks(self.pid) == self.start_ticks

    async def wait(self) -> int:
        """Wait for exit; the exit code (negative: killed by that signal; -1 for an adopted process
        whose code cannot be known)."""
        if self._child is not None:
            return await self._child.wait()
        while self.is_running():
            await asyncio.sleep(self._poll_interval_s)
        return -1

    def signal(self, sig: int) -> bool:
        """Signal the engine's whole process group (SGLang runs scheduler/detokenizer children)."""
        if self._child is not None and self._child.returncode is not None and not group_alive(self.pgid):
            return False
        if self._child is None and proc_start_ticks(self.pid) != self.start_ticks:
            return group_alive(self.pgid) and signal_group(self.pgid, sig)
        return signal_group(self.pgid, sig)


async def spawn(argv: Sequence[str], env: Mapping[str, str], *, survive_supervisor_exit: bool,
                log_path: str | None, cwd: str | None = None) -> tuple[EngineProcess, asyncio.StreamReader | None]:
    """Start the engine in its own session/process group.

    Returns the process and, when its output goes to a pipe, the pipe to follow. With
    ``survive_supervisor_exit`` the output goes to ``log_path`` (required: a pipe would break when
    the supervisor dies) and no death signal is set."""
    if survive_supervisor_exit and not log_path:
        raise ValueError("survive_supervisor_exit needs a log_path (a state_dir): the engine's output cannot go to a pipe that dies with the supervisor")
    if shutil.which(argv[0]) is None:  # refuse here, as exec would, rather than inside the helper
        raise FileNotFoundError(2, f"No such file or directory: {argv[0]!r}")
    command = list(argv)
    if not survive_supervisor_exit and sys.platform.startswith("linux"):
        command = with_death_signal(argv, os.getpid())
    if log_path:
        out = _open_private_log(log_path)
        try:
            child = await asyncio.create_subprocess_exec(
                *command, env=dict(env), cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        finally:
            out.close()
        stream = None
    else:
        child = await asyncio.create_subprocess_exec(
            *command, env=dict(env), cwd=cwd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        stream = child.stdout
    proc = EngineProcess(child.pid, proc_start_ticks(child.pid), child)
    log.info("event=engine_spawned pid=%d survive_supervisor_exit=%s argv0=%s", child.pid, survive_supervisor_exit, argv[0])
    return proc, stream


def attach(pid: int, start_ticks: int, poll_interval_s: float = 0.5) -> EngineProcess:
    """An EngineProcess for a still-running process this supervisor did not start."""
    return EngineProcess(pid, start_ticks, None, poll_interval_s)
