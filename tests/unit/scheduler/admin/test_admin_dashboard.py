"""The web dashboard's server side: its static files are served without a token under a strict
Content-Security-Policy, and the recent-events route it polls needs a token of any role."""

from __future__ import annotations

import re

import aiohttp
import pytest

from scheduler.admin import access, dashboard
from scheduler.server import auth
from tests.unit.scheduler import service_harness

VIEWER = "viewer-token-0123456789"


@pytest.fixture
async def svc(tmp_path):
    book = auth.AdminAuth(auth.digest(service_harness.ADMIN_TOKEN),
                          principals=[(auth.digest(VIEWER), access.Principal("watcher", access.Role.VIEWER))])
    async with service_harness.service_factory(tmp_path, admin_auth=book) as make:
        yield await service_harness.leading(await make())


async def test_page_and_files_need_no_token_and_carry_a_strict_csp(svc):
    """GET /dashboard and its script and style answer 200 without a token, each with CSP
    default-src 'self' (no inline script allowed) and nosniff; an unknown file is 404."""
    base = f"http://127.0.0.1:{svc.admin_port}"
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{base}/dashboard") as resp:
            assert resp.status == 200 and resp.content_type == "text/html"
            page = await resp.text()
            csp = resp.headers["Content-Security-Policy"]
            assert "default-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
            assert resp.headers["X-Content-Type-Options"] == "nosniff"
            assert resp.headers["Referrer-Policy"] == "no-referrer"
        # Every script and stylesheet is a file of ours (no inline code, no CDN).
        assert not re.search(r"<script(?![^>]*\bsrc=)", page), "inline <script> in index.html"
        assert "<style" not in page and " on" + "click=" not in page
        srcs = re.findall(r'(?:src|href)="([^"]+)"', page)
        assert srcs and all(u.startswith("/dashboard/") for u in srcs), srcs
        for url, kind in (("/dashboard/dashboard.js", "text/javascript"), ("/dashboard/dashboard.css", "text/css")):
            async with s.get(base + url) as resp:
                assert resp.status == 200 and resp.content_type == kind, url
                assert resp.headers["Content-Security-Policy"] == dashboard.CSP
        async with s.get(f"{base}/dashboard/../api.py") as resp:
            assert resp.status == 404
        async with s.get(f"{base}/dashboard/secrets.txt") as resp:
            assert resp.status == 404 and "dashboard.js" in await resp.text()


async def test_events_route_needs_a_token_and_pages_from_a_sequence_number(svc):
    """GET /v1/events is 401 without a token; with a viewer's it lists the journal after ``after``
    (at most ``limit``), and bad parameters are a 400 naming them."""
    base = f"http://127.0.0.1:{svc.admin_port}/v1/events"
    svc.journal.record(100.0, "stock_out", cluster_id="c1", subject="c1/l4", message="no capacity")
    svc.journal.record(101.0, "replica_crash", cluster_id="c1", subject="r1", message="exit -9")
    svc.journal.record(102.0, "cluster_lost", cluster_id="c2", message="silent")
    viewer = {"Authorization": f"Bearer {VIEWER}"}
    async with aiohttp.ClientSession() as s:
        async with s.get(base) as resp:
            assert resp.status == 401
        async with s.get(base, headers=viewer) as resp:
            body = await resp.json()
        assert resp.status == 200 and body["last_seq"] == 3 and body["dropped"] == 0 and body["leader"] is True
        assert [e["kind"] for e in body["events"]] == ["stock_out", "replica_crash", "cluster_lost"]
        assert body["events"][0] == {"seq": 1, "at": 100.0, "kind": "stock_out", "cluster_id": "c1",
                                     "subject": "c1/l4", "message": "no capacity"}
        async with s.get(base, params={"after": "1", "limit": "1"}, headers=viewer) as resp:
            assert [e["seq"] for e in (await resp.json())["events"]] == [3]
        for bad in ({"after": "x"}, {"limit": "-1"}):
            async with s.get(base, params=bad, headers=viewer) as resp:
                assert resp.status == 400 and "after" in (await resp.json())["error"]


def test_static_files_ship_in_the_package():
    """The page, script and style are package data (what a wheel installs), found by name."""
    for name in dashboard.FILES:
        assert (dashboard.STATIC / name).is_file(), name
