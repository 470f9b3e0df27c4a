"""The retry loop, hedging and the timeouts around attempts (the executor of ``retry.decide``).

A call runs under its ``total_s`` deadline. Each attempt opens with the ``connect_s`` limit; a
stream's attempt must also deliver its first event within ``first_token_s`` of its start. A failed
attempt goes to ``retry.decide``; a retry also needs a token from the client's retry budget. With
hedging on, a non-streaming call whose attempt has not answered after ``hedge_after_s`` gets a
second attempt on another connection (the first one's is busy); the first answer wins and the
other attempt is cancelled, which closes its connection."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from meridian.client import config, errors, events, retry, sse, stream, transport
from meridian import retrybudget as budget_mod


class Caller:
    def __init__(self, settings: config.ClientSettings, tx: transport.Transport, *,
                 reporter: events.Reporter, rng: random.Random, clock: Callable[[], float],
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.tx = tx
        self.reporter = reporter
        self.rng = rng
        self.wall_clock = wall_clock
        policy = settings.retry
        self.budget: budget_mod.RetryBudget | budget_mod.NoBudget = (
            budget_mod.NoBudget() if policy.budget_ratio is None else
            budget_mod.RetryBudget(policy.budget_ratio, policy.budget_min_per_s, policy.budget_window_s, clock))

    # ------------------------------------------------------------ shared

    def new_call(self, method: str, path: str, body: Any, *, stream_: bool, request_id: str,
                 timeouts: config.Timeouts) -> transport.Call:
        now = asyncio.get_running_loop().time()
        deadline = None if timeouts.total_s is None else now + timeouts.total_s
        data = None if body is None else orjson.dumps(body)
        self.budget.on_call()
        return transport.Call(method, path, data, stream_, request_id, timeouts, now, deadline)

    def _event(self, kind: str, call: transport.Call, attempt: int, reason: str, *, status: int = 0,
               delay_s: float = 0.0, failure: str = "") -> None:
        elapsed = asyncio.get_running_loop().time() - call.started
        self.reporter.emit(events.ClientEvent(kind, call.request_id, call.method, call.path, attempt, reason, elapsed,
                                              status, delay_s, failure))

    def _give_up(self, call: transport.Call, failure: retry.Failure, why: str) -> errors.ClientError:
        self._event("give_up", call, call.attempts, why, status=failure.status, failure=failure.reason)
        return failure.error.finish(method=call.method, path=call.path, request_id=call.request_id,
                                    attempts=call.attempts, gave_up=why)

    async def _after_failure(self, call: transport.Call, failed: transport.AttemptFailed) -> None:
        """Wait before the next attempt, or raise the failure's error when there is none."""
        failure = failed.failure
        call.failed_rounds += 1
        now = asyncio.get_running_loop().time()
        decision = retry.decide(failure, attempts=call.attempts, policy=self.settings.retry,
                                backoff_s=retry.delay_s(call.failed_rounds, self.settings.retry, self.rng),
                                remaining_s=call.remaining_s(now))
        if decision.retry and not self.budget.try_withdraw():
            decision = retry.Decision(False, gave_up="budget")
        if not decision.retry:
            raise self._give_up(call, failure, decision.gave_up) from failed.__cause__
        self._event("retry", call, call.attempts, failure.reason, status=failure.status, delay_s=decision.delay_s)
        await asyncio.sleep(decision.delay_s)

    def _total_timeout(self, call: transport.Call) -> errors.ClientError:
        last = call.last_failure
        detail = f"last failure: {last.reason}" if last is not None else "no attempt had answered"
        err = errors.RequestTimeout("total", call.timeouts.total_s or 0.0, detail)
        self._event("give_up", call, call.attempts, "deadline", status=last.status if last else 0,
                    failure="total_timeout")
        return err.finish(method=call.method, path=call.path, request_id=call.request_id, attempts=call.attempts,
                          gave_up="deadline")

    async def _attempt(self, call: transport.Call, run: Callable[[int], Awaitable[Any]]) -> Any:
        """One attempt with its number and its ``attempt`` event."""
        call.attempts += 1
        n = call.attempts
        try:
            result = await run(n)
        except transport.AttemptFailed as failed:
            call.last_failure = failed.failure
            self._event("attempt", call, n, failed.failure.reason, status=failed.failure.status)
            raise
        except asyncio.CancelledError:  # a hedge that lost, a call past its deadline or given up
            self._event("attempt", call, n, "cancelled")
            raise
        self._event("attempt", call, n, "ok", status=200)
        return result

    # ------------------------------------------------------------ non-streaming

    async def unary(self, call: transport.Call, hedge_after_s: float | None) -> Any:
        """The answer's JSON (any 2xx), after retries; raises the last failure's typed error."""
        limit = asyncio.timeout_at(call.deadline)
        try:
            async with limit:
                while True:
                    try:
                        if hedge_after_s is None:
                            return await self._attempt(call, lambda n: self._unary_attempt(call, n))
                        return await self._hedged(call, hedge_after_s)
                    except transport.AttemptFailed as failed:
                        await self._after_failure(call, failed)
        except TimeoutError:
            if not limit.expired():
                raise  # a RequestTimeout of an attempt (connect, first token), already final
            raise self._total_timeout(call) from None

    async def _unary_attempt(self, call: transport.Call, n: int) -> Any:
        loop = asyncio.get_running_loop()
        resp = await self.tx.open(call, n, loop.time())
        if not 200 <= resp.status < 300:
            raise transport.AttemptFailed(await transport.read_error(resp, self.wall_clock()))
        try:
            body = await resp.read()
        except aiohttp.ClientError as exc:
            raise transport.AttemptFailed(transport.body_failure(exc, resp.content.total_bytes)) from exc
        finally:
            resp.release()
        try:
            return orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            failure = retry.Failure("protocol", errors.ProtocolError(f"the answer is not JSON: {body[:200]!r}"),
                                    body_bytes=len(body))
            raise transport.AttemptFailed(failure) from None

    async def _hedged(self, call: transport.Call, hedge_after_s: float) -> Any:
        """A first attempt, and a second one if the first has not answered within ``hedge_after_s``;
        the first success wins, the other is cancelled."""
        tasks = {asyncio.ensure_future(self._attempt(call, lambda n: self._unary_attempt(call, n)))}
        hedged = False
        last: transport.AttemptFailed | None = None
        try:
            while tasks:
                done, _ = await asyncio.wait(tasks, timeout=None if hedged else hedge_after_s,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    hedged = True
                    if call.attempts < self.settings.retry.max_attempts and self.budget.try_withdraw():
                        self._event("hedge", call, call.attempts + 1, "slow")
                        tasks.add(asyncio.ensure_future(self._attempt(call, lambda n: self._unary_attempt(call, n))))
                    continue
                for task in done:
                    tasks.discard(task)
                    exc = task.exception()
                    if exc is None:
                        return task.result()
                    if not isinstance(exc, transport.AttemptFailed) or not retry.retryable(exc.failure):
                        raise exc
                    last = exc
            assert last is not None
            raise last
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, transport.AttemptFailed):
                    await task

    # ------------------------------------------------------------ streaming

    async def open_stream(self, call: transport.Call) -> stream.AsyncStream:
        """A stream whose first event has arrived, after retries."""
        limit = asyncio.timeout_at(call.deadline)
        try:
            async with limit:
                while True:
                    try:
                        return await self._attempt(call, lambda n: self._stream_attempt(call, n))
                    except transport.AttemptFailed as failed:
                        await self._after_failure(call, failed)
        except TimeoutError:
            if not limit.expired():
                raise
            raise self._total_timeout(call) from None

    async def _stream_attempt(self, call: transport.Call, n: int) -> stream.AsyncStream:
        loop = asyncio.get_running_loop()
        start = loop.time()
        first_token_s = call.timeouts.first_token_s
        limit = None if first_token_s is None else start + first_token_s
        if limit is not None and call.deadline is not None and limit >= call.deadline:
            limit = None  # the total deadline comes first: let it fire (one timer, one name)
        progress = [0]
        timer = asyncio.timeout_at(limit)
        try:
            async with timer:
                return await self._first_event(call, n, start, progress)
        except TimeoutError:
            if not timer.expired():
                raise
            err = errors.RequestTimeout("first_token", first_token_s or 0.0,
                                        f"{progress[0]} bytes of the body had arrived")
            raise transport.AttemptFailed(retry.Failure("first_token_timeout", err, body_bytes=progress[0])) from None

    async def _first_event(self, call: transport.Call, n: int, start: float, progress: list[int]) -> stream.AsyncStream:
        """Send, check the status, read until the first complete SSE event. ``progress[0]`` counts
        body bytes (for the timeout's report)."""
        resp = await self.tx.open(call, n, start)
        if resp.status != 200:
            raise transport.AttemptFailed(await transport.read_error(resp, self.wall_clock()))
        try:
            content_type = resp.headers.get("Content-Type", "")
            if not content_type.startswith("text/event-stream"):
                body = await resp.read()
                raise transport.AttemptFailed(retry.Failure("protocol", errors.ProtocolError(
                    f"expected an SSE stream (text/event-stream), got {content_type or 'no Content-Type'}: "
                    f"{body[:200]!r}"), body_bytes=len(body)))
            decoder = sse.SSEDecoder()
            pending: list[str] = []
            while not pending:
                try:
                    chunk = await resp.content.readany()
                except aiohttp.ClientError as exc:
                    raise transport.AttemptFailed(_early_break(progress[0], f"the connection broke ({exc})")) from exc
                if not chunk:
                    raise transport.AttemptFailed(_early_break(progress[0], "the stream ended before its first event"))
                progress[0] += len(chunk)
                pending = decoder.feed(chunk)
        except BaseException:
            resp.close()
            raise
        return stream.AsyncStream(resp, decoder, pending, call, progress[0])


def _early_break(body_bytes: int, detail: str) -> retry.Failure:
    """A stream that broke before its first event: retryable while no byte of it had arrived."""
    if body_bytes == 0:
        return retry.Failure("reset", errors.ConnectError("reset", f"closed by the server before the body: {detail}"))
    return retry.Failure("broken", errors.StreamError("disconnected", f"{detail}, after {body_bytes} bytes", events=0),
                         body_bytes=body_bytes)
