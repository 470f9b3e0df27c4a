"""``AsyncClient``: Meridian's global endpoint (or any OpenAI-compatible server) from asyncio code.

One client holds one pooled aiohttp session (created on first use, bound to that event loop) and
one retry budget; make one per process and share it. Answers are the server's JSON as dicts;
streams yield OpenAI chunk dicts (see ``stream.AsyncStream``)."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

from meridian.client import calls, config, events, stream, transport

API_KEY_ENV = "MERIDIAN_API_KEY"
_CALL_OPTIONS = frozenset({"stream"})


def _body(base: dict[str, Any], params: Mapping[str, Any], method_name: str) -> dict[str, Any]:
    clash = _CALL_OPTIONS & params.keys()
    if clash:
        raise ValueError(f"{method_name}() sets 'stream' itself: call {method_name}_stream() for a stream "
                         f"(got {sorted(clash)})")
    return {**base, **params}


class AsyncClient:
    """A client of one OpenAI-compatible endpoint.

    ``base_url``: the router's address, ``http://router:8080`` (``.../v1`` is accepted too).
    ``api_key``: sent as ``Authorization: Bearer``; default: the ``MERIDIAN_API_KEY`` environment
    variable, else none. ``region``: the client region, sent in ``region_header`` (the router reads
    it only when its ``trusted_region_header`` names that header). ``on_event``: a hook called with
    each ``ClientEvent`` (attempts, retries, hedges, give-ups). ``rng`` and ``clock`` (monotonic
    seconds, for the retry budget) are injectable for tests. Every other knob is documented on
    ``config.ClientSettings``, ``config.Timeouts`` and ``config.RetryPolicy``."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeouts: config.Timeouts | None = None,
                 retry: config.RetryPolicy | None = None, hedge_after_s: float | None = None, region: str = "",
                 region_header: str | None = None, send_deadline: bool = True, max_connections: int = 100,
                 keepalive_s: float = 15.0, headers: Mapping[str, str] | None = None,
                 on_event: events.Hook | None = None, rng: random.Random | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        fields: dict[str, Any] = {"base_url": base_url, "hedge_after_s": hedge_after_s, "region": region,
                                  "send_deadline": send_deadline, "max_connections": max_connections,
                                  "keepalive_s": keepalive_s, "headers": dict(headers or {})}
        if timeouts is not None:
            fields["timeouts"] = timeouts
        if retry is not None:
            fields["retry"] = retry
        if region_header is not None:
            fields["region_header"] = region_header
        self.settings = config.ClientSettings(**fields)
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        self._transport = transport.Transport(self.settings, key)
        self._caller = calls.Caller(self.settings, self._transport, reporter=events.Reporter(on_event),
                                    rng=rng or random.Random(), clock=clock)

    def __repr__(self) -> str:  # never the key
        return f"AsyncClient(base_url={self.settings.base_url!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pooled connections; the client cannot be used afterwards."""
        await self._transport.close()

    @property
    def retry_budget(self) -> float:
        """Retries the budget allows now (inf without a budget)."""
        return self._caller.budget.balance

    # ------------------------------------------------------------ calls

    def _call(self, method: str, path: str, body: Any, *, stream_: bool, timeouts: config.Timeouts | None,
              request_id: str | None) -> transport.Call:
        return self._caller.new_call(method, path, body, stream_=stream_, request_id=request_id or os.urandom(8).hex(),
                                     timeouts=timeouts or self.settings.timeouts)

    def _hedge(self, hedge: bool | None) -> float | None:
        if hedge and self.settings.hedge_after_s is None:
            raise ValueError("hedge=True needs the client's hedge_after_s (the delay before the second try)")
        return None if hedge is False else self.settings.hedge_after_s

    async def _unary(self, method: str, path: str, body: Any, *, timeouts: config.Timeouts | None,
                     request_id: str | None, hedge: bool | None) -> Any:
        call = self._call(method, path, body, stream_=False, timeouts=timeouts, request_id=request_id)
        return await self._caller.unary(call, self._hedge(hedge))

    async def _stream(self, path: str, body: dict[str, Any], *, include_usage: bool,
                      timeouts: config.Timeouts | None, request_id: str | None) -> stream.AsyncStream:
        body["stream"] = True
        if include_usage and "stream_options" not in body:
            body["stream_options"] = {"include_usage": True}
        call = self._call("POST", path, body, stream_=True, timeouts=timeouts, request_id=request_id)
        return await self._caller.open_stream(call)

    async def chat(self, model: str, messages: Sequence[Mapping[str, Any]], *, timeouts: config.Timeouts | None = None,
                   request_id: str | None = None, hedge: bool | None = None, **params: Any) -> dict[str, Any]:
        """``POST /v1/chat/completions``; ``params`` are the request's other fields (max_tokens, ...).
        ``hedge``: None follows the client's ``hedge_after_s``, False turns it off for this call."""
        body = _body({"model": model, "messages": list(messages)}, params, "chat")
        return await self._unary("POST", "/v1/chat/completions", body, timeouts=timeouts, request_id=request_id,
                                 hedge=hedge)

    async def chat_stream(self, model: str, messages: Sequence[Mapping[str, Any]], *, include_usage: bool = True,
                          timeouts: config.Timeouts | None = None, request_id: str | None = None,
                          **params: Any) -> stream.AsyncStream:
        """A started ``stream: true`` chat completion (returns once its first event has arrived);
        ``include_usage`` asks for the usage chunk (``stream_options.include_usage``)."""
        body = _body({"model": model, "messages": list(messages)}, params, "chat_stream")
        return await self._stream("/v1/chat/completions", body, include_usage=include_usage, timeouts=timeouts,
                                  request_id=request_id)

    async def completions(self, model: str, prompt: Any, *, timeouts: config.Timeouts | None = None,
                          request_id: str | None = None, hedge: bool | None = None, **params: Any) -> dict[str, Any]:
        """``POST /v1/completions``."""
        body = _body({"model": model, "prompt": prompt}, params, "completions")
        return await self._unary("POST", "/v1/completions", body, timeouts=timeouts, request_id=request_id,
                                 hedge=hedge)

    async def completions_stream(self, model: str, prompt: Any, *, include_usage: bool = True,
                                 timeouts: config.Timeouts | None = None, request_id: str | None = None,
                                 **params: Any) -> stream.AsyncStream:
        """A started ``stream: true`` completion."""
        body = _body({"model": model, "prompt": prompt}, params, "completions_stream")
        return await self._stream("/v1/completions", body, include_usage=include_usage, timeouts=timeouts,
                                  request_id=request_id)

    async def embeddings(self, model: str, input: Any, *, timeouts: config.Timeouts | None = None,
                         request_id: str | None = None, hedge: bool | None = None, **params: Any) -> dict[str, Any]:
        """``POST /v1/embeddings`` (``input``: a string, a list of strings or token ids)."""
        body = _body({"model": model, "input": input}, params, "embeddings")
        return await self._unary("POST", "/v1/embeddings", body, timeouts=timeouts, request_id=request_id, hedge=hedge)

    async def models(self, *, timeouts: config.Timeouts | None = None, request_id: str | None = None,
                     hedge: bool | None = None) -> dict[str, Any]:
        """``GET /v1/models``: ``{"object": "list", "data": [model cards]}``."""
        return await self._unary("GET", "/v1/models", None, timeouts=timeouts, request_id=request_id, hedge=hedge)
