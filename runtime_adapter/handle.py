"""EngineHandle: one launched (or adopted) engine process as the supervisor drives it: its exit
watcher, its log follower, and termination (SIGTERM to the group, SIGKILL after a grace period)."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from runtime_adapter import clock as clock_mod
from runtime_adapter import process

LOG_FOLLOWER_STOP_S = 2.0


class EngineHandle:
    """Owns ``proc``'s exit task and log follower. Waits use the injected clock."""

    def __init__(self, proc: process.EngineProcess, clock: clock_mod.Clock, log_tail: process.LogTail) -> None:
        self.proc = proc
        self._clock = clock
        self._log = log_tail
        self.exit_task: asyncio.Future[int] = asyncio.ensure_future(proc.wait())
        self.started_monotonic = clock.monotonic()
        self._log_task: asyncio.Task[None] | None = None
        self._log_stop = asyncio.Event()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exited(self) -> bool:
        return self.exit_task.done()

    def exit_code(self) -> int | None:
        return self.exit_task.result() if self.exit_task.done() and not self.exit_task.cancelled() else None

    def follow_stream(self, stream: asyncio.StreamReader) -> None:
        self._log_task = asyncio.create_task(self._log.follow_stream(stream))

    def follow_file(self, path: str, interval_s: float, max_bytes: int, *, from_end: bool) -> None:
        self._log_task = asyncio.create_task(
            self._log.follow_file(path, interval_s, max_bytes, self._log_stop, from_end=from_end))

    async def stop_following(self) -> None:
        """Stop the log follower after it has read what is there (a pipe until EOF, briefly)."""
        self._log_stop.set()
        if self._log_task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._log_task), timeout=LOG_FOLLOWER_STOP_S)
        except asyncio.TimeoutError:
            self._log_task.cancel()
        self._log_task = None

    async def wait_exit(self, timeout_s: float) -> bool:
        """True once the engine exited; waits at most ``timeout_s`` of clock time."""
        if not self.exit_task.done() and timeout_s > 0:
            sleeper = asyncio.ensure_future(self._clock.sleep(timeout_s))
            await asyncio.wait({self.exit_task, sleeper}, return_when=asyncio.FIRST_COMPLETED)
            sleeper.cancel()
        return self.exit_task.done()

    async def terminate(self, term_grace_s: float, kill_wait_s: float) -> bool:
        """SIGTERM the group, SIGKILL after ``term_grace_s``; True when SIGKILL was needed."""
        killed = False
        if self.proc.is_running():
            self.proc.signal(signal.SIGTERM)
            killed = not await self.wait_exit(term_grace_s)
        await self.kill(kill_wait_s)
        return killed

    async def kill(self, kill_wait_s: float) -> None:
        """SIGKILL whatever is left of the group (children that outlived the leader too)."""
        if self.proc.is_running() or process.group_alive(self.proc.pgid):
            self.proc.signal(signal.SIGKILL)
        await self.wait_exit(kill_wait_s)

    async def release(self) -> None:
        """Stop watching without touching the process (detach, or after it exited)."""
        await self.stop_following()
        if self.proc.adopted and not self.exit_task.done():
            self.exit_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.exit_task
