"""The web dashboard in a real headless browser (Playwright driving Debian's chromium) over a real
local fleet: a scheduler, four agents on three clouds with emulator replicas, a router.

In order, on one fleet: a viewer's link shows the clusters and replicas (and the token leaves the
address bar) -> a killed replica shows as gone and its replacement as ready, with the crash among
the recent events -> a refused token asks for another -> a scheduler killed outright shows an
error banner while the last figures stay."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil

import aiohttp
import pytest
import pytest_asyncio

from meridian.demo import fleet as fleet_mod
from meridian.demo import processes

playwright_api = pytest.importorskip("playwright.async_api", reason="playwright is in the test extra")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240),
              pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                 reason="Debian's chromium is not installed (make system-deps installs it)")]
SPECS = pathlib.Path(__file__).parent / "specs"
MODEL = "chat"
WAIT_MS = 60_000


def ready_chat(status: dict) -> list[tuple[dict, dict]]:
    return [(c, r) for c in status.get("clusters", []) if not c.get("lost")
            for r in c.get("replica_details", []) if r["deployment"] == MODEL and r["state"] == "ready"]


async def at_least(page, selector: str, n: int, timeout_ms: int = WAIT_MS) -> None:
    """Wait until ``selector`` matches ``n`` elements or more (by locators: the page's CSP forbids
    the string evaluation ``wait_for_function`` relies on, as it should)."""
    await page.locator(selector).nth(n - 1).wait_for(state="attached", timeout=timeout_ms)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fleet(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("dashboard-fleet")
    f = fleet_mod.LocalFleet(fleet_mod.FleetConfig(
        workdir=workdir, spec_files=(SPECS / "fleet.yaml",), cluster_file=SPECS / "clusters.yaml",
        provisioning_delay_s=1.0, router_region="na-east", scheduler_settings=("heartbeat_interval_s=1",)))
    f.prepare()
    try:
        await f.start_scheduler()
        async with aiohttp.ClientSession() as session:
            applied = await f.apply(session, [SPECS / "fleet.yaml", workdir / "clusters.yaml"])
            assert applied["status"] == 200, applied
        await f.start_agents()
        await f.start_router()
        async with aiohttp.ClientSession() as session:
            await f.wait_for(session, lambda s: len(ready_chat(s)) >= 3, 120, "3 ready chat replicas")
        yield f
    finally:
        await asyncio.to_thread(f.stop)
        left = await asyncio.to_thread(f.procs.stragglers)
        assert left == [], f"processes of the run outlived it: {processes.describe(left)}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser():
    async with playwright_api.async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            yield b
        finally:
            await b.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def page(browser):
    context = await browser.new_context()
    pg = await context.new_page()
    pg.problems = []  # console errors (a CSP violation is one) and uncaught page errors
    pg.on("console", lambda m: pg.problems.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.problems.append(str(e)))
    yield pg
    await context.close()


async def test_a_viewer_link_shows_clusters_replicas_and_the_bill(fleet, page):
    """The demo's viewer link opens the page, which drops the token from the address bar, names the
    viewer, and shows every cluster under its cloud, the chat replicas ready, the bill and the SLA."""
    await page.goto(fleet.dashboard_url)
    await at_least(page, "[data-testid=cluster]", len(fleet.cluster_docs))
    assert "token" not in page.url and page.url.endswith("/dashboard")
    assert await page.evaluate("sessionStorage.getItem('meridian.admin.token')") == fleet.viewer_token
    assert await page.text_content("[data-testid=who]") == "dashboard-viewer (viewer)"
    shown = set(await page.eval_on_selector_all("[data-testid=cluster]", "els => els.map(e => e.dataset.cluster)"))
    assert shown == set(fleet.cluster_docs)
    clouds = set(await page.eval_on_selector_all("[data-cloud]", "els => els.map(e => e.dataset.cloud)"))
    assert len(clouds) >= 2, clouds
    ready = f"[data-model={MODEL}] [data-testid=replica][data-state=ready]"
    await at_least(page, ready, 3)
    async with aiohttp.ClientSession() as session:
        status = await fleet.status(session)
    ids = set(await page.eval_on_selector_all(ready, "els => els.map(e => e.dataset.replica)"))
    known = {r["replica_id"] for c in status["clusters"] for r in c["replica_details"]}
    assert len(ids) >= 3 and ids <= known, (ids, known)  # the scheduler's replicas, by their ids
    assert (await page.text_content("[data-testid=bill-total]")).startswith("$")
    assert await page.locator(f"[data-testid=sla-deployment][data-deployment={MODEL}]").count() == 1
    assert await page.is_hidden("[data-testid=banner]")
    assert not [p for p in page.problems if "Content Security Policy" in p or "Refused" in p], page.problems


async def test_a_killed_replica_leaves_the_page_and_its_replacement_shows(fleet, page):
    """SIGKILL of a ready replica's engine: within seconds the page no longer shows it ready, the
    crash appears among the recent events, and three ready chat replicas show again."""
    async with aiohttp.ClientSession() as session:
        status = await fleet.status(session)
    _, victim = ready_chat(status)[0]
    pid = fleet.procs.engine_pid(int(victim["endpoint"].rsplit(":", 1)[1]))
    assert pid, f"no engine process for {victim['replica_id']}"
    before = await page.text_content("[data-testid=updated]")
    os.kill(pid, 9)
    rid = victim["replica_id"]
    await page.locator(f'[data-testid=replica][data-replica="{rid}"][data-state=ready]').wait_for(
        state="detached", timeout=WAIT_MS)
    await page.wait_for_selector("[data-testid=event][data-kind=replica_crash]", state="attached", timeout=WAIT_MS)
    assert rid in await page.text_content("[data-testid=events]")
    ready = f"[data-model={MODEL}] [data-testid=replica][data-state=ready]"
    await at_least(page, ready, 3, timeout_ms=90_000)
    assert await page.text_content("[data-testid=updated]") != before


async def test_a_refused_token_asks_for_another(fleet, browser):
    """A wrong token in the link gets the token form (the API said 401); the viewer's token typed
    in shows the fleet."""
    context = await browser.new_context()
    try:
        pg = await context.new_page()
        await pg.goto(f"{fleet.admin_url}/dashboard#token=not-a-token")
        await pg.wait_for_selector("[data-testid=token-form]", state="visible", timeout=WAIT_MS)
        assert "401" in await pg.text_content("[data-testid=token-form]")
        assert await pg.evaluate("sessionStorage.getItem('meridian.admin.token')") is None
        await pg.fill("#token-input", fleet.viewer_token)
        await pg.click("#token-form button[type=submit]")
        await pg.wait_for_selector("[data-testid=cluster]", state="attached", timeout=WAIT_MS)
        assert await pg.is_hidden("[data-testid=token-form]")
    finally:
        await context.close()


async def test_an_unreachable_scheduler_shows_an_error_banner(fleet, page):
    """When the scheduler dies (SIGKILL: no graceful hand-over, whose last answers would rightly show
    an empty standby view), a banner says the API failed and since when the data is stale; the
    clusters last seen stay on the page."""
    await page.locator("[data-testid=cluster]").nth(len(fleet.cluster_docs) - 1).wait_for(state="attached")
    scheduler = fleet.procs.children["scheduler"]
    os.kill(scheduler.pid, 9)
    await asyncio.to_thread(scheduler.proc.wait, 10)
    await page.wait_for_selector("[data-testid=banner]", state="visible", timeout=WAIT_MS)
    text = await page.text_content("[data-testid=banner]")
    assert "admin API failed" in text and "cannot be reached" in text, text
    assert await page.locator("[data-testid=cluster]").count() >= 4
