"""Meridian's client library: the global endpoint (the router) from Python, async and blocking.

    from meridian import client

    with client.Client("http://router:8080", timeouts=client.Timeouts(first_token_s=10)) as c:
        reply = c.chat("llama-3-8b", [{"role": "user", "content": "Hello"}], max_tokens=64)
        for chunk in c.chat_stream("llama-3-8b", [{"role": "user", "content": "Count"}]):
            ...

Separate connect, first-token and total timeouts; retries with jittered backoff only on failures a
retry can fix and only before a response body delivered a byte, under a retry budget; optional
hedging of non-streaming calls; one pooled connection set per client. See docs/client.md."""

from meridian.client.aio import API_KEY_ENV, AsyncClient
from meridian.client.config import ClientSettings, RetryPolicy, Timeouts
from meridian.client.errors import (APIStatusError, AuthenticationError, BadRequestError, ClientError, ConnectError,
                                    NotFoundError, PermissionDeniedError, ProtocolError, RateLimitError,
                                    RequestTimeout, ServerError, StreamError)
from meridian.client.events import ClientEvent
from meridian.client.stream import AsyncStream
from meridian.client.sync import Client, Stream

__all__ = [
    "API_KEY_ENV", "APIStatusError", "AsyncClient", "AsyncStream", "AuthenticationError", "BadRequestError", "Client",
    "ClientError", "ClientEvent", "ClientSettings", "ConnectError", "NotFoundError", "PermissionDeniedError",
    "ProtocolError", "RateLimitError", "RequestTimeout", "RetryPolicy", "ServerError", "Stream", "StreamError",
    "Timeouts",
]
