"""The web dashboard: static HTML, CSS and JavaScript shipped in the package (``static/``, package
data; no CDN, nothing fetched from the internet), served by the admin API at ``GET /dashboard``.

The page and its files need no token: they hold no data. Every figure on the page comes from the
``/v1/`` routes, called by the page with a bearer token of any role (a viewer's suffices: reads are
open to every role, ``scheduler.admin.access``). The page takes the token from the URL fragment
(``/dashboard#token=...``: a fragment never reaches the server, so no request line or log holds it),
keeps it in the tab's ``sessionStorage``, strips it from the address bar, and asks for one when it
has none or the API answers 401. It computes no figure itself: the bill is ``GET /v1/cost``'s (the
one cost module's), the SLA the deployments' ``sla`` (``scheduler.control.sla``), the events
``GET /v1/events``.

Every answer carries a Content-Security-Policy of ``default-src 'self'`` with no inline script or
style, so the page runs only the files below and talks only to the API that served it."""

from __future__ import annotations

import importlib.resources

from aiohttp import web

STATIC = importlib.resources.files("scheduler.admin") / "static"
FILES = {"index.html": "text/html", "dashboard.js": "text/javascript", "dashboard.css": "text/css"}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _load() -> dict[str, bytes]:
    """The files' bytes, read once (a missing file is a broken install: fail at start, by name)."""
    out = {}
    for name in FILES:
        resource = STATIC / name
        if not resource.is_file():
            raise FileNotFoundError(f"the dashboard's {name} is missing from the installed package "
                                    f"(expected at {resource}); reinstall meridian")
        out[name] = resource.read_bytes()
    return out


def add_routes(app: web.Application) -> None:
    """``GET /dashboard`` (the page) and ``GET /dashboard/{file}`` (its script and style)."""
    files = _load()

    def respond(name: str) -> web.Response:
        return web.Response(body=files[name], content_type=FILES[name], charset="utf-8", headers=HEADERS)

    async def page(request: web.Request) -> web.Response:
        return respond("index.html")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["file"]
        if name not in files:
            raise web.HTTPNotFound(text=f"no dashboard file {name!r}; there are {', '.join(sorted(files))}",
                                   headers=HEADERS)
        return respond(name)

    app.router.add_get("/dashboard", page)
    app.router.add_get("/dashboard/", page)
    app.router.add_get("/dashboard/{file}", asset)
