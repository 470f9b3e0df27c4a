"""A private event loop in a daemon thread, so blocking code runs the very same async client: one
implementation of retries, hedging, timeouts and streams, not two that drift apart. Blocking
callers hand it coroutines and wait for their result; a caller interrupted while waiting (Ctrl-C)
cancels the coroutine, which closes its connection."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Portal:
    def __init__(self, name: str = "meridian-client") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._closed = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal's loop and wait for it; its exception is raised here."""
        if self._closed:
            coro.close()
            raise RuntimeError("this meridian.client Client is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a blocking meridian.client call from inside the client's own loop (an on_event hook) "
                               "would wait for itself; use AsyncClient there")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # a no-op when it finished; stops it when the caller was interrupted
            raise

    def close(self, last: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run ``last`` (the client's cleanup), then stop the loop and its thread. Idempotent."""
        if self._closed:
            if last is not None:
                last.close()
            return
        try:
            if last is not None:
                self.run(last)
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._thread.is_alive():
                self._loop.close()
