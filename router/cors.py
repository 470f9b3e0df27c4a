"""Cross-origin calls from browser pages (CORS, the Fetch standard), off unless configured.

A page on another origin that calls the router with an ``Authorization`` header or a JSON body
first sends a preflight (``OPTIONS`` with ``Access-Control-Request-Method``), which carries no API
key; the browser then reads the answer only when it names the page's origin. So with
``cors_allow_origins`` set, the router answers preflights for its own paths itself (before any key
check: the real request is checked as usual) and adds the allow headers to every answer to a listed
origin, streams and errors included. With it empty (the default) no CORS header is sent and a
preflight gets 405, as any unlisted method does; browsers then refuse the cross-origin call.

Why not on by default (SGLang allows every origin): API keys are bearer tokens, not cookies, so a
page cannot use a visitor's key, but a router without keys on a private network would be readable
by any page its users open."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Collection, Iterable

from router.responses import Response

# Headers a page's script may read beyond the CORS-safelisted ones.
EXPOSED = "X-Request-Id, Retry-After"
VARY = b"Vary: Origin\r\n"
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ORIGIN_CHARS = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[A-Za-z0-9.:\[\]-]+$")


def origin_problem(origin: str) -> str | None:
    """Why ``origin`` is not a valid ``cors_allow_origins`` entry, or None."""
    if origin == "*":
        return None
    parts = urllib.parse.urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{origin!r}: give scheme://host[:port] (https://app.example.com) or '*'"
    if parts.path or parts.query or parts.fragment or parts.username or origin.endswith("/"):
        return f"{origin!r}: an origin has no path, query or user (https://app.example.com)"
    if not _ORIGIN_CHARS.match(origin):
        return f"{origin!r}: an origin is scheme://host[:port] in letters, digits and . - : [ ] only"
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port == -1 or port == 0 or (port is None and parts.netloc.endswith(":")):
        return f"{origin!r}: the port must be a number from 1 to 65535"
    if port == {"http": 80, "https": 443}[parts.scheme]:
        # Browsers leave the default port out of Origin, so this entry would never match.
        host = parts.netloc.rsplit(":", 1)[0]  # as written: an IPv6 address keeps its brackets
        return f"{origin!r}: leave out the default port ({parts.scheme}://{host}), as browsers send it"
    return None


class Cors:
    """The allow list and the header lines it adds. ``allow`` is the configured origins."""

    def __init__(self, allow: Iterable[str], max_age_s: int):
        origins = list(allow)
        self.any = "*" in origins
        self.origins = frozenset(o.lower() for o in origins if o != "*")
        self.max_age_s = max_age_s
        self._heads: dict[str, bytes] = {}

    def allows(self, origin: str) -> bool:
        return self.any or origin.lower() in self.origins

    def head(self, origin: str) -> bytes:
        """Header lines for an answer to a page of ``origin`` (an allowed one)."""
        cached = self._heads.get(origin)
        if cached is None:
            cached = (self._allow_origin(origin) + f"Access-Control-Expose-Headers: {EXPOSED}\r\n").encode("latin-1")
            if len(self._heads) < 256:
                self._heads[origin] = cached
        return cached

    def _allow_origin(self, origin: str) -> str:
        if self.any:
            return "Access-Control-Allow-Origin: *\r\n"
        # The answer depends on the Origin header: caches must key on it.
        return f"Access-Control-Allow-Origin: {origin}\r\nVary: Origin\r\n"

    def preflight(self, origin: str, methods: Collection[str], requested_headers: str) -> Response:
        """The answer to a preflight for a path taking ``methods``: which methods and headers the
        page may use (the headers it asked for, when each is a valid header name)."""
        names = [h.strip() for h in requested_headers.split(",") if h.strip()]
        headers = [("Access-Control-Allow-Methods", ", ".join(sorted({*methods, "OPTIONS"}))),
                   ("Access-Control-Max-Age", str(self.max_age_s))]
        if names and all(_TOKEN.match(n) for n in names):
            headers.append(("Access-Control-Allow-Headers", ", ".join(names)))
        if self.any:
            headers.append(("Access-Control-Allow-Origin", "*"))
        else:
            headers += [("Access-Control-Allow-Origin", origin), ("Vary", "Origin")]
        return Response(status=200, headers=headers)  # 204 may not carry the Content-Length the listener sends
