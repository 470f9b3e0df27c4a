"""Generation endpoints of the emulator: /v1/chat/completions, /v1/completions, /generate and
/v1/embeddings, with SGLang's validation, error bodies and streaming sequences.

Streaming waits for the first token before sending the 200 (SGLang kick-starts its generator so a
validation error can still be a 400); a full queue while streaming is a 200 with an error chunk.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import pydantic
from aiohttp import web

from runtime_adapter.emulator import engine as engine_mod
from runtime_adapter.emulator import protocol, tokens

if TYPE_CHECKING:
    from runtime_adapter.emulator.server import EmulatorServer

log = logging.getLogger(__name__)

SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
EMBEDDING_DIMS = 1024
QUEUE_FULL = "The request queue is full."


class _Reject(Exception):
    """Ends a handler with ``response``."""

    def __init__(self, response: web.StreamResponse) -> None:
        super().__init__()
        self.response = response


def _openai_error(message: str, err_type: str, code: int) -> web.Response:
    return protocol.json_response(protocol.error_response(message, err_type, code), status=code)


def _finish_reason(req: engine_mod.GenRequest) -> dict[str, Any]:
    if req.abort_reason:
        return {"type": "abort", "message": req.abort_reason}
    if req.finish_type == "stop":
        return {"type": "stop", "matched": tokens.EOS_TOKEN_ID}
    return {"type": "length", "length": req.max_new_tokens}


CLIENT_REGION_HEADER = "X-Meridian-Client-Region"
# What SGLang streams (after a 200) when its queue is full.
_QUEUE_FULL_STREAM = protocol.stream_error(QUEUE_FULL, "SERVICE_UNAVAILABLE", 503) + "data: [DONE]\n\n"


class Handlers:
    def __init__(self, server: EmulatorServer) -> None:
        self.s = server
        self._latency = server.config.latency_map()
        self._request_log = server.request_log

    # ----- shared ---------------------------------------------------------------------------------
    async def _body(self, request: web.Request, model: type[pydantic.BaseModel], *, openai: bool) -> Any:
        if openai:
            media = request.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                err = {"loc": ["header", "content-type"],
                       "msg": "Unsupported Media Type: Only 'application/json' is allowed", "type": "value_error"}
                raise _Reject(_openai_error(f"1 validation error:\n  {err!r} {[err]!r}", "Bad Request", 400))
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            err = {"type": "json_invalid", "loc": ("body", getattr(exc, "pos", 0)), "msg": "JSON decode error",
                   "input": {}, "ctx": {"error": getattr(exc, "msg", str(exc))}}
            raise _Reject(_openai_error(f"1 validation error:\n  {err!r} {[err]!r}", "Bad Request", 400)) from exc
        try:
            return model.model_validate(body)
        except pydantic.ValidationError as exc:
            raise _Reject(_openai_error(protocol.validation_message(exc), "Bad Request", 400)) from exc

    def _new_request(self, prompt: Sequence[tokens.Token], max_new: int | None, ignore_eos: bool, stream: bool,
                     rid: str | None) -> engine_mod.GenRequest:
        """Raises ValueError with SGLang's context-length messages."""
        ctx, n = self.s.context_len, len(prompt)
        if n >= ctx:
            raise ValueError(f"The input ({n} tokens) is longer than the model's context length ({ctx} tokens).")
        if max_new is None:
            max_new = ctx - n
        elif max_new + n > ctx:
            raise ValueError(
                f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested "
                f"a total of {max_new + n} tokens: {n} tokens from the input messages and {max_new} tokens for the "
                "completion. Please reduce the number of tokens in the input messages or the completion to fit "
                "within the limit.")
        seed = tokens.seed_of(prompt)
        natural = tokens.natural_length(seed, self.s.config.output_tokens_mean)
        if ignore_eos or natural >= max_new:
            stop_after, finish = max_new, "length"
        else:
            stop_after, finish = natural, "stop"
        return engine_mod.GenRequest(rid=rid or uuid.uuid4().hex, prompt=prompt, max_new_tokens=max_new,
                                     stop_after=stop_after, finish_type=finish, seed=seed, stream=stream)

    async def _wait(self, req: engine_mod.GenRequest) -> None:
        while not req.finished:
            await req.progress.wait()
            req.progress.clear()

    async def _first_output(self, req: engine_mod.GenRequest) -> None:
        while req.generated == 0 and not req.finished:
            await req.progress.wait()
            req.progress.clear()

    @staticmethod
    async def _steps(req: engine_mod.GenRequest) -> AsyncIterator[tuple[int, int, bool]]:
        """(tokens already sent, tokens generated now, finished) at each engine step, until finished."""
        sent = 0
        while True:
            done, now = req.finished, req.generated
            yield sent, now, done
            sent = now
            if done:
                return
            await req.progress.wait()
            req.progress.clear()

    async def _unary(self, req: engine_mod.GenRequest) -> web.Response | None:
        """Admit and wait for the whole answer; the 503 answer when the queue is full, else None."""
        try:
            self._admit(req)
        except engine_mod.QueueFull:
            return _openai_error(QUEUE_FULL, "503", 503)
        try:
            await self._wait(req)
        except asyncio.CancelledError:
            # The client closed the connection: SGLang aborts the request rather than finish it.
            self.s.engine.abort(req, "client disconnected")
            raise
        return None

    async def _sse(self, request: web.Request, req: engine_mod.GenRequest, queue_full: str,
                   body: Callable[[web.StreamResponse], Awaitable[None]]) -> web.StreamResponse:
        """A streamed answer: admit (``queue_full`` is the stream SGLang sends when the queue is full),
        let ``body`` write the events, end the stream; a client gone mid-stream aborts the request."""
        resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        try:
            self._admit(req)
        except engine_mod.QueueFull:
            await resp.prepare(request)
            await resp.write(queue_full.encode())
            await resp.write_eof()
            return resp
        try:
            await body(resp)
            await resp.write_eof()
            self._completed(request)
        except ConnectionError:
            # The client went away mid-stream: the engine drops the request (counted as aborted).
            log.debug("event=client_disconnected rid=%s", req.rid)
        finally:
            self.s.engine.abort(req)
        return resp

    def _usage(self, req: engine_mod.GenRequest) -> dict[str, Any]:
        return protocol.usage(req.prompt_tokens, req.generated, req.cached_tokens, self.s.config.enable_cache_report)

    def _completed(self, request: web.Request) -> None:
        """Note an answered generation request in the request log (``request_log_dir``), if kept."""
        out = self._request_log
        if out is not None:
            out.write(f"{time.time():.3f} {request.headers.get('X-Request-Id') or '-'}\n")

    async def _guarded(self, request: web.Request, run: Any) -> web.StreamResponse:
        """In-flight accounting (graceful exit waits for it) and _Reject handling."""
        self.s.in_flight += 1
        try:
            await self._network_delay(request)
            resp = await run(request)
            if type(resp) is web.Response and resp.status == 200:
                self._completed(request)  # streams note themselves once written to the end
            return resp
        except _Reject as rej:
            return rej.response
        finally:
            self.s.in_flight -= 1
            self.s.check_idle()

    async def _network_delay(self, request: web.Request) -> None:
        """Simulated distance (config.region): the client's request and the first byte back each
        travel half the RTT; both halves are waited here, before the engine sees the request."""
        region = self.s.config.region
        client = request.headers.get(CLIENT_REGION_HEADER) if region else None
        if client and client in self._latency:
            await asyncio.sleep(self._latency.rtt_ms(client, region) / 1000.0 / self.s.config.speedup)

    def _admit(self, req: engine_mod.GenRequest) -> None:
        """Submit; raises QueueFull (the caller answers per endpoint) or _Reject for a request that
        can never fit the KV budget."""
        try:
            self.s.engine.submit(req)
        except engine_mod.TooLarge as exc:
            raise _Reject(_openai_error(str(exc), "BadRequest", 400)) from exc

    # ----- /v1/chat/completions -------------------------------------------------------------------
    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._guarded(request, self._chat)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body: protocol.ChatCompletionRequest = await self._body(request, protocol.ChatCompletionRequest, openai=True)
        if self.s.config.embedding:
            return _openai_error("This model does not support chat completions: it is an embedding model "
                                 "(started with --is-embedding).", "BadRequestError", 400)
        if not body.messages:
            return _openai_error("Messages cannot be empty.", "BadRequestError", 400)
        self.s.count_generation_request()
        if self.s.injected_error():
            return _openai_error("Internal server error: emulated fault (error_rate)", "InternalServerError", 500)
        prompt = tokens.tokenize(tokens.chat_prompt([m.model_dump() for m in body.messages]))
        max_new = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        try:
            req = self._new_request(prompt, max_new, body.ignore_eos, body.stream, body.rid)
        except ValueError as exc:
            return _openai_error(str(exc), "BadRequestError" if body.stream else "BadRequest", 400)
        created = int(time.time())
        if not body.stream:
            refused = await self._unary(req)
            if refused is not None:
                return refused
            text = tokens.output_text(req.seed, 0, req.generated)
            return protocol.json_response(protocol.chat_response(req.rid, created, body.model, text, _finish_reason(req),
                                                            self._usage(req)))
        return await self._chat_stream(request, body, req, created)

    async def _chat_stream(self, request: web.Request, body: protocol.ChatCompletionRequest,
                           req: engine_mod.GenRequest, created: int) -> web.StreamResponse:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        model = body.model

        async def events(resp: web.StreamResponse) -> None:
            await self._first_output(req)
            await resp.prepare(request)
            out = [protocol.chat_chunk(req.rid, created, model, role="assistant", content="")]
            async for sent, now, _done in self._steps(req):
                if now > sent:
                    out.append(protocol.chat_chunk(req.rid, created, model, content=tokens.output_text(req.seed, sent, now)))
                if out:
                    await resp.write("".join(out).encode())
                    out = []
            finish = _finish_reason(req)
            tail = [protocol.chat_chunk(req.rid, created, model, finish_reason=finish["type"], matched_stop=finish.get("matched"))]
            if include_usage:
                tail.append(protocol.chat_usage_chunk(req.rid, created, model, self._usage(req)))
            tail.append("data: [DONE]\n\n")
            await resp.write("".join(tail).encode())

        return await self._sse(request, req, _QUEUE_FULL_STREAM, events)

    # ----- /v1/completions ------------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._guarded(request, self._completions)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body: protocol.CompletionRequest = await self._body(request, protocol.CompletionRequest, openai=True)
        if self.s.config.embedding:
            return _openai_error("This model does not support completions: it is an embedding model "
                                 "(started with --is-embedding).", "BadRequestError", 400)
        prompt = _prompt_tokens(body.prompt)
        if prompt is None:
            return _openai_error("Prompt cannot be empty", "BadRequestError", 400)
        self.s.count_generation_request()
        if self.s.injected_error():
            return _openai_error("Internal server error: emulated fault (error_rate)", "InternalServerError", 500)
        try:
            req = self._new_request(prompt, body.max_tokens, body.ignore_eos, body.stream, body.rid)
        except ValueError as exc:
            return _openai_error(str(exc), "BadRequestError" if body.stream else "BadRequest", 400)
        created = int(time.time())
        if not body.stream:
            refused = await self._unary(req)
            if refused is not None:
                return refused
            text = tokens.output_text(req.seed, 0, req.generated)
            return protocol.json_response(protocol.completion_response(req.rid, created, body.model, text,
                                                                  _finish_reason(req), self._usage(req)))
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def events(resp: web.StreamResponse) -> None:
            await self._first_output(req)
            await resp.prepare(request)
            async for sent, now, done in self._steps(req):
                if now > sent or done:
                    finish = _finish_reason(req) if done else None
                    await resp.write(protocol.completion_chunk(req.rid, created, body.model,
                                                               tokens.output_text(req.seed, sent, now), finish).encode())
            tail = []
            if include_usage:
                tail.append(protocol.completion_usage_chunk(req.rid, created, body.model, self._usage(req)))
            tail.append("data: [DONE]\n\n")
            await resp.write("".join(tail).encode())

        return await self._sse(request, req, _QUEUE_FULL_STREAM, events)

    # ----- /generate ------------------------------------------------------------------------------
    async def generate(self, request: web.Request) -> web.StreamResponse:
        return await self._guarded(request, self._generate)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body: protocol.GenerateRequest = await self._body(request, protocol.GenerateRequest, openai=False)
        if (body.text is None) == (body.input_ids is None):
            return protocol.json_response({"error": "Either text or input_ids should be provided, but not both."}, status=400)
        prompt: list[tokens.Token] = tokens.tokenize(body.text) if body.text is not None else list(body.input_ids or [])
        if not prompt:
            return protocol.json_response({"error": "The input is empty: give non-empty text or input_ids."}, status=400)
        self.s.count_generation_request()
        if self.s.injected_error():
            return protocol.json_response({"error": {"message": "Internal server error: emulated fault (error_rate)"}}, status=500)
        sp = body.sampling_params
        try:
            req = self._new_request(prompt, sp.max_new_tokens if sp.max_new_tokens else None, sp.ignore_eos,
                                    body.stream, body.rid)
        except ValueError as exc:
            return protocol.json_response({"error": {"message": str(exc)}}, status=400)
        if not body.stream:
            refused = await self._unary(req)
            if refused is not None:
                return refused
            return protocol.json_response(self._native(req, finished=True))
        abort = protocol.meta_info(req.rid, {"type": "abort", "message": QUEUE_FULL, "status_code": 503},
                                   req.prompt_tokens, 0, 0, None)
        queue_full = "data: " + protocol.dumps(protocol.generate_response("", [], abort)) + "\n\ndata: [DONE]\n\n"

        async def events(resp: web.StreamResponse) -> None:
            await resp.prepare(request)
            async for sent, now, done in self._steps(req):
                if now > sent or done:
                    await resp.write(("data: " + protocol.dumps(self._native(req, finished=done)) + "\n\n").encode())
            await resp.write(b"data: [DONE]\n\n")

        return await self._sse(request, req, queue_full, events)

    def _native(self, req: engine_mod.GenRequest, *, finished: bool) -> dict[str, Any]:
        e2e = (req.finished_s - req.arrival_s) if finished and req.finished_s is not None else None
        info = protocol.meta_info(req.rid, _finish_reason(req) if finished else None, req.prompt_tokens,
                                  req.generated, req.cached_tokens, e2e)
        return protocol.generate_response(tokens.output_text(req.seed, 0, req.generated),
                                          tokens.output_ids(req.seed, 0, req.generated), info)

    # ----- /v1/embeddings -------------------------------------------------------------------------
    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        return await self._guarded(request, self._embeddings)

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body: protocol.EmbeddingRequest = await self._body(request, protocol.EmbeddingRequest, openai=True)
        if not self.s.config.embedding:
            return _openai_error("This model does not support embeddings: start the server with --is-embedding "
                                 "and an embedding model.", "BadRequestError", 400)
        inputs = _embedding_inputs(body.input)
        if not inputs or any(not i for i in inputs):
            return _openai_error("Input cannot be empty", "BadRequestError", 400)
        self.s.count_generation_request()
        if self.s.injected_error():
            return _openai_error("Internal server error: emulated fault (error_rate)", "InternalServerError", 500)
        reqs = []
        for prompt in inputs:
            if len(prompt) >= self.s.context_len:
                return _openai_error(f"The input ({len(prompt)} tokens) is longer than the model's context length "
                                     f"({self.s.context_len} tokens).", "BadRequest", 400)
            reqs.append(engine_mod.GenRequest(rid=uuid.uuid4().hex, prompt=prompt, max_new_tokens=0, stop_after=0,
                                              finish_type="length", seed=0, is_embedding=True))
        try:
            for req in reqs:
                try:
                    self._admit(req)
                except engine_mod.QueueFull:
                    return _openai_error(QUEUE_FULL, "503", 503)
            for req in reqs:
                await self._wait(req)
        finally:
            for req in reqs:
                self.s.engine.abort(req)
        dims = body.dimensions or EMBEDDING_DIMS
        vectors = [tokens.embedding(req.prompt, dims) for req in reqs]
        return protocol.json_response(protocol.embedding_response(vectors, body.model, sum(r.prompt_tokens for r in reqs)))


def _prompt_tokens(prompt: str | list[str] | list[int] | list[list[int]]) -> list[tokens.Token] | None:
    if isinstance(prompt, str):
        return tokens.tokenize(prompt) or None
    if not prompt:
        return None
    first = prompt[0]
    if isinstance(first, str):
        return tokens.tokenize(first) or None
    if isinstance(first, list):
        return list(first) or None
    return list(prompt)  # type: ignore[arg-type]


def _embedding_inputs(value: str | list[str] | list[int] | list[list[int]]) -> list[list[tokens.Token]]:
    if isinstance(value, str):
        return [tokens.tokenize(value)]
    if not value:
        return []
    if isinstance(value[0], str):
        return [tokens.tokenize(v) for v in value]  # type: ignore[arg-type]
    if isinstance(value[0], list):
        return [list(v) for v in value]  # type: ignore[arg-type]
    return [list(value)]  # type: ignore[arg-type]
