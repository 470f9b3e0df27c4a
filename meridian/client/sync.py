"""``Client``: the blocking face of ``AsyncClient``, with the same methods, knobs and errors.

Each ``Client`` runs one ``AsyncClient`` on a private event loop thread (``portal.py``), so it has
the same single connection pool, retry budget, hedging and timeouts. It is safe to share between
threads (calls are serialised onto that loop, where they run concurrently). Close it with
``close()`` or ``with``; a client dropped without closing is closed when garbage-collected."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Self

from meridian.client import aio
from meridian.client import portal as portal_mod
from meridian.client import stream as stream_mod


def _shutdown(portal: portal_mod.Portal, inner: aio.AsyncClient) -> None:
    portal.close(inner.aclose())


class Stream:
    """A started stream, iterated with ``for``; see ``AsyncStream``. ``close()`` (or leaving
    ``with``) before the end closes its connection."""

    def __init__(self, portal: portal_mod.Portal, inner: stream_mod.AsyncStream) -> None:
        self._portal = portal
        self._inner = inner

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self

    def __next__(self) -> dict[str, Any]:
        try:
            return self._portal.run(self._inner.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._portal.run(self._inner.aclose())

    @property
    def usage(self) -> dict[str, Any] | None:
        return self._inner.usage

    @property
    def events(self) -> int:
        return self._inner.events

    @property
    def request_id(self) -> str:
        return self._inner.request_id

    @property
    def attempts(self) -> int:
        return self._inner.attempts


class Client:
    """Blocking client; the arguments are ``AsyncClient``'s."""

    def __init__(self, base_url: str, **options: Any) -> None:
        self._async = aio.AsyncClient(base_url, **options)
        self.settings = self._async.settings
        self._portal = portal_mod.Portal()
        self._finalizer = weakref.finalize(self, _shutdown, self._portal, self._async)

    def __repr__(self) -> str:  # never the key
        return f"Client(base_url={self.settings.base_url!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections and stop the client's thread."""
        self._finalizer()

    @property
    def retry_budget(self) -> float:
        return self._async.retry_budget

    def chat(self, model: str, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> dict[str, Any]:
        """See ``AsyncClient.chat``."""
        return self._portal.run(self._async.chat(model, messages, **kwargs))

    def chat_stream(self, model: str, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> Stream:
        """See ``AsyncClient.chat_stream``."""
        return Stream(self._portal, self._portal.run(self._async.chat_stream(model, messages, **kwargs)))

    def completions(self, model: str, prompt: Any, **kwargs: Any) -> dict[str, Any]:
        """See ``AsyncClient.completions``."""
        return self._portal.run(self._async.completions(model, prompt, **kwargs))

    def completions_stream(self, model: str, prompt: Any, **kwargs: Any) -> Stream:
        """See ``AsyncClient.completions_stream``."""
        return Stream(self._portal, self._portal.run(self._async.completions_stream(model, prompt, **kwargs)))

    def embeddings(self, model: str, input: Any, **kwargs: Any) -> dict[str, Any]:
        """See ``AsyncClient.embeddings``."""
        return self._portal.run(self._async.embeddings(model, input, **kwargs))

    def models(self, **kwargs: Any) -> dict[str, Any]:
        """See ``AsyncClient.models``."""
        return self._portal.run(self._async.models(**kwargs))
