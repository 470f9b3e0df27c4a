"""The hot path: admit, route, relay, retry.

For each inference request: authenticate, read and validate the body, resolve the model, apply the
key's rate limit, take an admission slot (bounded queue per model), then try replicas chosen by the
model's policy until one answers. A retry goes to a replica not yet tried, only while nothing was
sent to the client, only under the retry budget, and only for connect failures, resets, 5xx and
429. Streaming responses are relayed chunk by chunk as they arrive; the client's first byte is sent
only after the replica produced its first body chunk, so a replica that fails before that is still
retried. A client that disconnects cancels the handler (``router.listener``), which
closes the upstream connection, which is how SGLang learns to abort the request."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time

from router import auth, deadlines, errors, health, pertry, sse, upstream, validation
from router.listener import Request
from router.responses import Response, StreamResponse
from router.validation import Kind

log = logging.getLogger("meridian.router.proxy")

# Upstream statuses worth another replica: overloaded (429, 503) or broken (5xx).
_RETRY_STATUS_MIN = 500
_FAILURE_PENALTY_MS = 1000.0
_DEADLINE_HEADER = "x-meridian-timeout-s"
# Sent to replicas with the client region the router resolved (emulators model network distance
# from it; replica logs show it).
_REGION_HEADER = "X-Meridian-Client-Region"
# UpstreamError kind of a try abandoned by its per-try limit (router.pertry).
FIRST_BYTE_TIMEOUT = "first_byte_timeout"


class _Outcome:
    """What one request did, for metrics and traffic reports."""

    __slots__ = ("replica", "revision", "status", "ttft_s", "prompt_tokens", "completion_tokens", "response",
                 "timed_out", "renew_s", "renewed_at")

    def __init__(self):
        self.response: StreamResponse | None = None
        self.timed_out = False
        # A stream under the router's own deadline (no x-meridian-timeout-s): each stretch of it
        # may take that long, so its deadline moves on as chunks flow (0: a fixed deadline).
        self.renew_s = 0.0
        self.renewed_at = 0.0
        self.replica = ""
        self.revision = ""
        self.status = 0
        self.ttft_s: float | None = None
        self.prompt_tokens = 0
        self.completion_tokens = 0


class Proxy:
    def __init__(self, *, state, config, metrics, traffic, outlier: health.OutlierDetector, budget,
                 keys=None, limiter=None, known_regions: frozenset[str] = frozenset()):
        self.state = state
        self.config = config
        self.metrics = metrics
        self.traffic = traffic
        self.outlier = outlier
        self.budget = budget
        self.keys = keys
        self.limiter = limiter
        self.known_regions = known_regions
        self.region = config.region
        self.trusted_header = config.trusted_region_header
        self.timeout_s = config.request_timeout_s
        self.cold_start_wait_s = config.cold_start_wait_s
        self.max_attempts = config.retry.max_attempts
        self.panic_percent = config.outlier.panic_threshold_percent
        api_key = config.upstream_api_key()
        self.upstream_auth = f"Authorization: Bearer {api_key}\r\n".encode() if api_key else b""
        self._id_prefix = os.urandom(4).hex() + "-"
        self._ids = itertools.count(1)
        self._content_types: dict[bytes, str] = {}
        # Client region -> its header line; bounded by the latency map's region names.
        self._region_lines: dict[str, bytes] = {}
        # Tries waiting for their first byte: connection -> (monotonic limit, entry, endpoint,
        # replicas tried before, attempts so far); the deadlines' sweeper abandons the overdue ones.
        self._tries: dict[upstream.Connection, tuple] = {}
        self._deadlines = deadlines.Deadlines(on_tick=self._sweep_tries)
        self.per_try_enabled = config.retry.per_try_ttft_multiplier > 0
        # Open streams per API key hash (keys with a stream limit only), for this router process.
        self._streams: dict[str, int] = {}
        self.default_max_streams = config.default_max_concurrent_streams

    def start(self) -> None:
        """Start the deadline sweeper (call from the running loop)."""
        self._deadlines.start()

    async def stop(self) -> None:
        await self._deadlines.stop()

    def _sweep_tries(self, now: float) -> None:
        """Abandon the tries past their per-try limit that can be retried; the others go on waiting
        (the last try is never cut short by its limit: a slow answer is late, not failed)."""
        if not self._tries:
            return
        overdue = [(conn, info) for conn, info in self._tries.items() if info[0] <= now]
        for conn, (_, entry, ep, tried, attempts, limit_s) in overdue:
            del self._tries[conn]
            if attempts >= self.max_attempts:
                continue
            pool, _ = health.candidates(entry.routable, now, self.panic_percent, tried + (ep,))
            if not pool or not self._grant_retry(entry, attempts, FIRST_BYTE_TIMEOUT):
                continue
            log.warning("event=per_try_timeout model=%s replica=%s limit_s=%.2f attempt=%d", entry.name,
                        ep.replica_id, limit_s, attempts)
            conn.abort(upstream.UpstreamError(
                FIRST_BYTE_TIMEOUT, f"nothing received from {ep.authority} within the per-try limit of {limit_s:.2f} s"))

    def _try_limit_s(self, entry, parsed) -> float | None:
        """This request's per-try limit (router.pertry), or None for none."""
        if not self.per_try_enabled:
            return None
        return pertry.limit_s(entry.first_byte_s, entry.token_s, stream=parsed.stream,
                              max_new_tokens=parsed.max_new_tokens(), context_length=entry.context_length,
                              prompt_tokens=parsed.prompt_tokens_estimate,
                              embedding=parsed.kind is Kind.EMBEDDING or entry.is_embedding, prompt_s=entry.prompt_s)

    # ------------------------------------------------------------ request entry

    def request_id(self, request: Request) -> str:
        given = request.headers.get("X-Request-Id")
        if given and len(given) <= 128 and given.isascii() and given.isprintable():
            return given
        return self.new_request_id()

    def new_request_id(self) -> str:
        """A fresh id (for answers to requests that give none, the listener's own refusals too)."""
        return f"{self._id_prefix}{next(self._ids):x}"

    def _client_region(self, request: Request) -> str:
        if self.trusted_header:
            value = request.headers.get(self.trusted_header)
            if value and value in self.known_regions:
                return value
        return self.region

    def _deadline_s(self, request: Request) -> float:
        value = request.headers.get(_DEADLINE_HEADER)
        if value is None:
            return self.timeout_s
        try:
            asked = float(value)
        except ValueError:
            raise errors.bad_request(f"header {_DEADLINE_HEADER} must be a number of seconds, got {value!r}",
                                     param=_DEADLINE_HEADER) from None
        if not asked > 0:
            raise errors.bad_request(f"header {_DEADLINE_HEADER} must be > 0, got {value!r}",
                                     param=_DEADLINE_HEADER)
        return min(asked, self.timeout_s)

    async def serve(self, request: Request, kind: Kind) -> Response | StreamResponse:
        started = time.monotonic()
        rid = self.request_id(request)
        region = self._client_region(request)
        model = ""
        headers = request.headers
        stream_key = None
        try:
            key = None
            if self.keys is not None:
                key = await self.keys.authenticate(headers.get("Authorization"), headers.get("X-Api-Key"))
            timeout_s = self._deadline_s(request) if _DEADLINE_HEADER in headers else self.timeout_s
            # The listener refused bodies over max_body_bytes (413) before the request got here.
            parsed = validation.parse(kind, request.body, headers.get("Content-Type"), self.state.model_names)
            entry = self.state.models.get(parsed.model)
            if entry is None:
                if self.state.table is None:
                    raise errors.not_ready()
                # Not a served model: metrics label it "" (a client's made-up names must not grow
                # the label sets without bound). The names listed are those the key may use.
                raise errors.model_not_found(parsed.model,
                                             [n for n in self.state.model_names if auth.may_use(key, n)])
            model = parsed.model
            if key is not None:
                if not key.allows(model):
                    raise errors.forbidden(f"This API key may not use model {model!r}")
                if self.limiter is not None:
                    wait_s = await self.limiter.check(key)
                    if wait_s > 0:
                        raise errors.rate_limited(wait_s)
                if parsed.stream:
                    stream_key = self._open_stream(key)
            try:
                entry = await self._admit(entry, model, region, started + timeout_s, timeout_s)
            except BaseException:
                self._close_stream(stream_key)
                raise
        except errors.ApiError as err:
            self.metrics.rejected[(model, err.code or str(err.status))] += 1
            self.metrics.observe_request(model, region, "", err.status, time.monotonic() - started, None)
            return err.response(rid)
        parsed.client_region = region
        parsed.path = request.raw_path.encode("latin-1")
        outcome = _Outcome()
        flight_key = (model, region)
        in_flight = self.traffic.in_flight
        in_flight[flight_key] = in_flight.get(flight_key, 0) + 1
        task = asyncio.current_task()
        self._deadlines.set(task, started + timeout_s, outcome)  # type: ignore[arg-type]
        if _DEADLINE_HEADER not in request.headers:
            outcome.renew_s = timeout_s
        try:
            if parsed.stream:
                return await self._stream(request, entry, parsed, rid, started, outcome)
            return await self._unary(entry, parsed, rid, outcome)
        except asyncio.CancelledError:
            if not outcome.timed_out:
                self.metrics.disconnects[model] += 1
                outcome.status = outcome.status or 499
                raise
            task.uncancel()  # type: ignore[union-attr]  # our own deadline, not the client leaving
            err = errors.deadline_exceeded(model, timeout_s)
            outcome.status = 504
            if outcome.response is None:
                return err.response(rid)
            # The stream already started: end it with an error event, the only signal left.
            try:
                await outcome.response.write(b"data: " + err.body() + b"\n\n")
                await outcome.response.write_eof()
            except ConnectionError:
                self.metrics.disconnects[model] += 1
            return outcome.response
        finally:
            self._deadlines.clear(task)  # type: ignore[arg-type]
            entry.admission.leave()
            if stream_key is not None:
                self._close_stream(stream_key)
            in_flight[flight_key] -= 1
            self.metrics.observe_request(model, region, outcome.replica, outcome.status,
                                         time.monotonic() - started, outcome.ttft_s)
            self.traffic.record(model, region, outcome.prompt_tokens or parsed.prompt_tokens_estimate,
                                outcome.completion_tokens, outcome.status >= 500 or outcome.status == 0,
                                outcome.ttft_s * 1000.0 if outcome.ttft_s is not None else None, outcome.revision)

    async def _admit(self, entry, model: str, region: str, deadline: float, timeout_s: float):
        """Wait for a replica if the model has none yet (cold start), then take an admission slot,
        neither past the request's deadline (``deadline``, monotonic; ``timeout_s`` the whole of it);
        the entry to serve from. Raises ApiError (503 no replica, 429 queue full, 504 deadline)."""
        if not entry.endpoints and self.cold_start_wait_s > 0:
            # No replica at all: scaled to zero or not placed yet. The traffic report counts this
            # request, the autoscaler wakes the model, and the request waits for the replica.
            self.metrics.cold_start_waits[model] += 1
            waiting = self.traffic.in_flight
            waiting[(model, region)] = waiting.get((model, region), 0) + 1
            self.traffic.urgent.set()
            try:
                entry = await self.state.wait_for_replica(
                    model, max(0.0, min(self.cold_start_wait_s, deadline - time.monotonic())))
            finally:
                waiting[(model, region)] -= 1
            if entry is None:
                raise errors.no_replica(model)
        gate = entry.admission
        if not gate.try_enter():
            await gate.enter(deadline - time.monotonic(), timeout_s)
        return entry

    def _open_stream(self, key) -> str | None:
        """Count one more open stream for ``key``; its hash (to close it with), or None when the key
        has no limit. Raises ApiError 429 when the key already holds its limit."""
        limit = key.max_concurrent_streams if key.max_concurrent_streams is not None else self.default_max_streams
        if not limit:
            return None
        streams = self._streams
        open_now = streams.get(key.key_hash, 0)
        if open_now >= limit:
            raise errors.too_many_streams(limit)
        streams[key.key_hash] = open_now + 1
        return key.key_hash

    def _close_stream(self, key_hash: str | None) -> None:
        if key_hash is None:
            return
        left = self._streams[key_hash] - 1
        if left:
            self._streams[key_hash] = left
        else:
            del self._streams[key_hash]

    # ------------------------------------------------------------ choosing and failing

    def _choose(self, entry, parsed, tried: tuple):
        now = time.monotonic()
        pool, panic = health.candidates(entry.routable, now, self.panic_percent, tried)
        if panic != entry.panic:
            entry.panic = panic
            log.warning("event=panic_mode model=%s on=%s routable=%d", entry.name, panic, len(entry.routable))
        if not pool:
            return None
        if tried:
            pool = health.elsewhere(pool, tried)
        elif entry.max_rtt_ms:
            pool = health.within_reach(pool, parsed.client_region, entry.max_rtt_ms, self.state.rtt_ms)
        ep = pool[0] if len(pool) == 1 else entry.policy.select(pool, parsed, now)
        entry.policy.on_routed(ep, parsed)
        return ep

    def _failed(self, entry, ep, kind: str) -> None:
        now = time.monotonic()
        self.metrics.upstream_errors[(entry.name, ep.replica_id, kind)] += 1
        ep.ewma.observe(max(ep.ewma.cost_ms * 4.0, _FAILURE_PENALTY_MS), now)
        if kind != "status_429" and kind != "timeout":
            if self.outlier.on_failure(ep, entry.endpoints, now):
                self.metrics.ejections[(entry.name, ep.replica_id)] += 1

    def _succeeded(self, ep, elapsed_s: float) -> None:
        now = time.monotonic()
        server_ms = elapsed_s * 1000.0 - self.state.rtt_ms(self.region, ep.region)
        ep.ewma.observe(server_ms if server_ms > 0 else 0.0, now)
        if ep.consecutive_failures:
            self.outlier.on_success(ep, now)

    def _may_retry(self, entry, attempts: int, reason: str) -> bool:
        if reason == FIRST_BYTE_TIMEOUT:
            return True  # granted (budget taken) when the sweeper abandoned the try
        return self._grant_retry(entry, attempts, reason)

    def _grant_retry(self, entry, attempts: int, reason: str) -> bool:
        if attempts >= self.max_attempts:
            return False
        if not self.budget.try_withdraw():
            self.metrics.budget_exhausted[entry.name] += 1
            return False
        self.metrics.retries[(entry.name, reason)] += 1
        return True

    def _region_line(self, region: str) -> bytes:
        """The ``X-Meridian-Client-Region`` header line for ``region`` (b"" when no region is known).
        Regions are latency-map names (the router's own, validated at start, or a trusted header's
        value found in the map), so they are safe to write into a header as they are."""
        line = self._region_lines.get(region)
        if line is None:
            line = f"{_REGION_HEADER}: {region}\r\n".encode() if region else b""
            self._region_lines[region] = line
        return line

    def _request_bytes(self, ep, request_path: bytes, body: bytes, rid: bytes, region_line: bytes) -> bytes:
        return b"".join((b"POST ", request_path, b" HTTP/1.1\r\nHost: ", ep.host_header,
                         b"\r\nContent-Type: application/json\r\nContent-Length: ", str(len(body)).encode(),
                         b"\r\nX-Request-Id: ", rid, b"\r\n", region_line, self.upstream_auth, b"\r\n", body))

    async def _open(self, ep, data: bytes, try_info: tuple | None) -> upstream.Connection:
        """Send the request on a pooled connection (or a new one) and wait for the response head.
        A pooled connection the replica had closed meanwhile is replaced once, transparently.
        ``try_info`` (per-try limit, see ``_sweep_tries``) arms the try's first-byte limit on the
        connection; the caller disarms it (``self._tries.pop``)."""
        pool = ep.pool
        conn = pool.take_idle()
        if conn is not None:
            try:
                conn.send(data)
                if try_info is not None:
                    self._tries[conn] = try_info
                await conn.read_head()
                return conn
            except upstream.UpstreamError as exc:
                conn.close()
                self._tries.pop(conn, None)
                if exc.kind != "reset" or conn.received_any:
                    raise
            except BaseException:
                conn.close()
                self._tries.pop(conn, None)
                raise
        conn = await pool.connect()
        try:
            conn.send(data)
            if try_info is not None:
                self._tries[conn] = try_info
            await conn.read_head()
        except BaseException:
            conn.close()
            self._tries.pop(conn, None)
            raise
        return conn

    def _content_type(self, raw: bytes) -> str:
        value = self._content_types.get(raw)
        if value is None:
            value = raw.decode("latin-1") or "application/json"
            if len(self._content_types) < 64:
                self._content_types[raw] = value
        return value

    def _relayed(self, status: int, content_type: bytes, body: bytes, rid: str) -> Response:
        """A replica's whole answer as the client gets it: its status, body and content type; an
        error body in the OpenAI shape (``errors.envelope``), as the router's own errors are."""
        if status >= 400:
            body = errors.envelope(body)
        return Response(body=body, status=status,
                        headers=[("Content-Type", self._content_type(content_type)), ("X-Request-Id", rid)])

    # ------------------------------------------------------------ non-streaming

    async def _unary(self, entry, parsed, rid: str, outcome: _Outcome) -> Response:
        self.budget.on_call()
        rid_b = rid.encode()
        path = parsed.path
        region_line = self._region_line(parsed.client_region)
        tried: tuple = ()
        last_response: tuple[int, bytes, bytes] | None = None
        last_error: upstream.UpstreamError | None = None
        attempts = 0
        limit_s = self._try_limit_s(entry, parsed)
        while True:
            ep = self._choose(entry, parsed, tried)
            if ep is None:
                break
            attempts += 1
            outcome.replica = ep.replica_id
            outcome.revision = ep.revision
            data = self._request_bytes(ep, path, parsed.body, rid_b, region_line)
            ep.pending += 1
            t0 = time.monotonic()
            try_info = None if limit_s is None else (t0 + limit_s, entry, ep, tried, attempts, limit_s)
            conn = None
            try:
                conn = await self._open(ep, data, try_info)
                body = await conn.read_all()
            except upstream.UpstreamError as exc:
                last_error, reason = exc, exc.kind
                self._failed(entry, ep, reason)
            else:
                status = conn.status
                if status < _RETRY_STATUS_MIN and status != 429:
                    self._succeeded(ep, time.monotonic() - t0)
                    outcome.status = status
                    outcome.ttft_s = None
                    usage = sse.usage(body) if status == 200 else None
                    if usage is not None:
                        outcome.prompt_tokens, outcome.completion_tokens = usage
                    return self._relayed(status, conn.content_type, body, rid)
                reason = "status_429" if status == 429 else "status_5xx"
                self._failed(entry, ep, reason)
                last_response = (status, conn.content_type, body)
            finally:
                ep.pending -= 1
                if conn is not None:
                    if try_info is not None:
                        self._tries.pop(conn, None)
                    conn.pool.release(conn) if conn.complete else conn.close()
            if not self._may_retry(entry, attempts, reason):
                break
            tried += (ep,)
        return self._give_up(entry, last_response, last_error, rid, outcome)

    def _give_up(self, entry, last_response, last_error, rid: str, outcome) -> Response:
        """No attempt succeeded: relay the last replica answer as it was, or say why there was none."""
        if last_response is not None:
            status, content_type, body = last_response
            outcome.status = status
            return self._relayed(status, content_type, body, rid)
        err = errors.no_replica(entry.name) if last_error is None else errors.upstream_failed(entry.name, str(last_error))
        outcome.status = err.status
        return err.response(rid)

    # ------------------------------------------------------------ streaming

    async def _stream(self, request: Request, entry, parsed, rid: str, started: float,
                      outcome: _Outcome) -> Response | StreamResponse:
        self.budget.on_call()
        rid_b = rid.encode()
        region_line = self._region_line(parsed.client_region)
        tried: tuple = ()
        last_response: tuple[int, bytes, bytes] | None = None
        last_error: upstream.UpstreamError | None = None
        attempts = 0
        limit_s = self._try_limit_s(entry, parsed)
        while True:
            ep = self._choose(entry, parsed, tried)
            if ep is None:
                break
            attempts += 1
            outcome.replica = ep.replica_id
            outcome.revision = ep.revision
            data = self._request_bytes(ep, parsed.path, parsed.body, rid_b, region_line)
            ep.pending += 1
            t0 = time.monotonic()
            try_info = None if limit_s is None else (t0 + limit_s, entry, ep, tried, attempts, limit_s)
            conn = None
            try:
                conn = await self._open(ep, data, try_info)
                status = conn.status
                if status != 200:
                    body = await conn.read_all()
                    if status < _RETRY_STATUS_MIN and status != 429:
                        outcome.status = status
                        return self._relayed(status, conn.content_type, body, rid)
                    reason = "status_429" if status == 429 else "status_5xx"
                    self._failed(entry, ep, reason)
                    last_response = (status, conn.content_type, body)
                else:
                    first = await conn.read_chunk()
                    if try_info is not None:
                        self._tries.pop(conn, None)  # the first byte came: committed, never retried
                    self._succeeded(ep, time.monotonic() - t0)
                    return await self._relay(request, entry, ep, conn, first, rid, started, outcome)
            except upstream.UpstreamError as exc:
                last_error, reason = exc, exc.kind
                self._failed(entry, ep, reason)
            finally:
                ep.pending -= 1
                if conn is not None:
                    if try_info is not None:
                        self._tries.pop(conn, None)
                    conn.pool.release(conn) if conn.complete else conn.close()
            if not self._may_retry(entry, attempts, reason):
                break
            tried += (ep,)
        return self._give_up(entry, last_response, last_error, rid, outcome)

    async def _relay(self, request: Request, entry, ep, conn: upstream.Connection, first: bytes, rid: str,
                     started: float, outcome: _Outcome) -> StreamResponse:
        """Relay an SSE body chunk by chunk; the replica is committed to (no retry past this point).

        A client that goes away is normal (mid-stream, or right after ``[DONE]`` before the end
        of the response was written): it is counted, never raised, so nothing logs an error."""
        resp = StreamResponse(status=200, headers=sse.HEADERS + (("X-Request-Id", rid),))
        outcome.status = 200
        outcome.response = resp
        tally = sse.Tally()
        chunk = first
        # Written with the chunked terminator: the replica's last bytes (or the error event).
        last = b""
        # Only whole events go to the client: the bytes after a chunk's last event boundary wait
        # for the rest of their event. An error event (a broken stream, the deadline) then never
        # lands inside a half-sent one, which would read as bad JSON rather than as an error.
        held = b""
        try:
            await resp.prepare(request)
            outcome.ttft_s = time.monotonic() - started
            try:
                while chunk:
                    tally.feed(chunk)
                    if held:
                        chunk, held = held + chunk, b""
                    if conn.complete:  # nothing more will come: one send for the end of the stream
                        last = chunk
                        break
                    if not chunk.endswith(b"\n\n"):
                        chunk, held = sse.split_events(chunk)
                    if chunk:
                        await resp.write(chunk)
                        if outcome.renew_s and time.monotonic() - outcome.renewed_at >= 1.0:
                            self._renew(outcome)
                    chunk = await conn.read_chunk()
            except upstream.UpstreamError as exc:
                self._failed(entry, ep, exc.kind)
                outcome.status = 502
                log.warning("event=stream_broken model=%s replica=%s request_id=%s error=%s", entry.name,
                            ep.replica_id, rid, exc)
                err = errors.upstream_failed(entry.name, f"replica stream broke: {exc}")
                last = b"data: " + err.body() + b"\n\n"
            self._account_stream(outcome, tally)
            await resp.write_eof(last)
        except ConnectionError:
            if conn.complete and outcome.status == 200:
                # Everything the replica sent was written; the client left before the end of the
                # response was: it has its answer.
                self._account_stream(outcome, tally)
                log.debug("event=client_closed_after_stream model=%s request_id=%s", entry.name, rid)
                return resp
            # The client went away mid-stream; closing the upstream connection (finally, in the
            # caller) tells the replica to abort.
            self.metrics.disconnects[entry.name] += 1
            outcome.status = 499
        return resp

    def _renew(self, outcome: _Outcome) -> None:
        """A stream that is flowing is not cut at ``request_timeout_s`` from its start (a long
        answer, a reasoning model's): its deadline moves to ``request_timeout_s`` after the last
        chunk, at most once a second. A client's own deadline header is never moved."""
        now = time.monotonic()
        outcome.renewed_at = now
        self._deadlines.move(asyncio.current_task(), now + outcome.renew_s, outcome)  # type: ignore[arg-type]

    @staticmethod
    def _account_stream(outcome: _Outcome, tally: sse.Tally) -> None:
        usage = tally.usage()
        if usage is not None:
            outcome.prompt_tokens, outcome.completion_tokens = usage
        else:
            outcome.completion_tokens = max(0, tally.events - 3)  # less role, finish and [DONE] events
