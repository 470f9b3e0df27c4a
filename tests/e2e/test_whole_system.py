"""The whole system on loopback: a scheduler, four agents (sim provider, emulator replicas) across
three clouds, a router, and the official ``openai`` SDK as the client.

The tests run in order on one fleet, as a model owner and an operator would live it: apply ->
placed across clouds -> the SDK streams and non-streams -> a replica dies under load -> a region is
lost -> the scheduler restarts -> a bad spec is applied."""

from __future__ import annotations

import asyncio
import os
import pathlib
import time

import aiohttp
import openai
import pytest
import pytest_asyncio

from meridian.demo import fleet as fleet_mod
from meridian.demo import processes

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]
SPECS = pathlib.Path(__file__).parent / "specs"
MODEL = "chat"


def ready_chat(status: dict, exclude: str = "") -> list[tuple[dict, dict]]:
    """(cluster, replica) pairs of ready chat replicas in live clusters."""
    return [(c, r) for c in status.get("clusters", []) if c["cluster_id"] != exclude and not c.get("lost")
            for r in c.get("replica_details", []) if r["deployment"] == MODEL and r["state"] == "ready"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fleet(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fleet")
    f = fleet_mod.LocalFleet(fleet_mod.FleetConfig(
        workdir=workdir, spec_files=(SPECS / "fleet.yaml",), cluster_file=SPECS / "clusters.yaml",
        provisioning_delay_s=2.0, router_region="na-east",
        # The grace outlasts the agents' reconnect backoff (5 s at most between attempts) with room:
        # at 5 s an agent that came back after it had its replicas re-placed after the restart.
        scheduler_settings=("heartbeat_interval_s=1", "adopt_grace_s=10")))
    f.prepare()
    try:
        await f.start_scheduler()
        async with aiohttp.ClientSession() as session:
            applied = await f.apply(session, [SPECS / "fleet.yaml", workdir / "clusters.yaml"])
            assert applied["status"] == 200, applied
        await f.start_agents()
        await f.start_router()
        yield f
    finally:
        await asyncio.to_thread(f.stop)
        left = await asyncio.to_thread(f.procs.stragglers)
        assert left == [], f"processes of the run outlived it: {processes.describe(left)}"


@pytest_asyncio.fixture(loop_scope="module")
async def session():
    async with aiohttp.ClientSession() as s:
        yield s


def sdk(fleet, region: str = "na-east") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{fleet.router_url}/v1", api_key="e2e", max_retries=0, timeout=60,
                              default_headers={fleet_mod.REGION_HEADER: region})


async def wait_routable(fleet, session, n: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    ready = 0
    while time.monotonic() < deadline:
        try:
            rs = await fleet.router_status(session)
            entry = next((m for m in rs.get("models", []) if m["model"] == MODEL), {})
            ready = sum(1 for r in entry.get("replicas", []) if r["state"] == "ready")
            if ready >= n:
                return
        except (aiohttp.ClientError, ValueError):
            pass
        await asyncio.sleep(0.5)
    raise TimeoutError(f"router has {ready} ready {MODEL} replicas, wanted {n}")


async def load(fleet, stop: asyncio.Event, results: list, workers: int = 4) -> None:
    """Non-streaming chat requests from ``workers`` concurrent clients until ``stop`` is set."""
    client = sdk(fleet)

    async def worker(i: int) -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                resp = await client.chat.completions.create(
                    model=MODEL, max_tokens=8, messages=[{"role": "user", "content": f"ping {i}"}])
                results.append((t0, True, resp.choices[0].message.content))
            except openai.OpenAIError as exc:
                results.append((t0, False, repr(exc)))

    try:
        await asyncio.gather(*(worker(i) for i in range(workers)))
    finally:
        await client.close()


async def test_apply_places_replicas_across_two_clouds(fleet, session):
    """The applied deployment gets its minimum replicas, ready, on at least two clouds, and routed."""
    status = await fleet.wait_for(session, lambda s: len(ready_chat(s)) >= 3, 120, "3 ready chat replicas")
    clouds = {c["cloud"] for c, _ in ready_chat(status)}
    assert len(clouds) >= 2, clouds
    await wait_routable(fleet, session, 3)


async def test_openai_sdk_streams_and_non_streams_through_the_router(fleet):
    """The unchanged openai SDK gets a completion, a stream with a usage chunk, and the model list."""
    client = sdk(fleet, "eu-west")
    try:
        resp = await client.chat.completions.create(model=MODEL, max_tokens=12,
                                                    messages=[{"role": "user", "content": "hello"}])
        assert resp.choices[0].message.content and resp.usage.completion_tokens == 12
        stream = await client.chat.completions.create(model=MODEL, max_tokens=10, stream=True,
                                                      stream_options={"include_usage": True},
                                                      messages=[{"role": "user", "content": "stream please"}])
        deltas, usage = [], None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                deltas.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                usage = chunk.usage
        assert len(deltas) >= 2 and usage is not None and usage.completion_tokens == 10
        models = [m.id for m in (await client.models.list()).data]
        assert MODEL in models
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    finally:
        await client.close()


async def test_replica_killed_under_load_fails_no_request(fleet, session):
    """SIGKILL of a serving replica mid-load: every non-streaming request still succeeds (retried elsewhere)."""
    status = await fleet.status(session)
    _, victim = ready_chat(status)[0]
    port = int(victim["endpoint"].rsplit(":", 1)[1])
    pid = fleet.procs.engine_pid(port)
    assert pid, f"no engine process on port {port}"
    stop, results = asyncio.Event(), []
    runner = asyncio.create_task(load(fleet, stop, results))
    await asyncio.sleep(2.0)
    os.kill(pid, 9)
    await asyncio.sleep(6.0)
    stop.set()
    await runner
    failed = [r for r in results if not r[1]]
    assert len(results) > 20 and not failed, (len(results), failed[:3])


async def test_lost_region_traffic_moves_and_capacity_is_replaced(fleet, session):
    """A whole cluster dies: requests keep succeeding within seconds and its capacity is re-placed elsewhere."""
    await fleet.wait_for(session, lambda s: len(ready_chat(s)) >= 3, 90, "3 ready chat replicas again")
    status = await fleet.status(session)
    by_cluster: dict[str, int] = {}
    for c, _ in ready_chat(status):
        by_cluster[c["cluster_id"]] = by_cluster.get(c["cluster_id"], 0) + 1
    victim = max(by_cluster, key=lambda k: (by_cluster[k], k))
    before = len(ready_chat(status))
    stop, results = asyncio.Event(), []
    runner = asyncio.create_task(load(fleet, stop, results))
    await asyncio.sleep(1.0)
    lost_at = time.monotonic()
    fleet.kill_cluster(victim)
    await asyncio.sleep(12.0)
    stop.set()
    await runner
    late = [r for r in results if r[0] > lost_at + 5.0]
    assert late and all(ok for _, ok, _ in late), [r for r in late if not r[1]][:3]
    status = await fleet.wait_for(session, lambda s: len(ready_chat(s, exclude=victim)) >= before, 150,
                                  f"{before} ready chat replicas outside {victim}")
    lost = next(c for c in status["clusters"] if c["cluster_id"] == victim)
    assert lost["lost"] or not lost["connected"]


async def test_scheduler_restart_loses_nothing_and_restarts_no_replica(fleet, session):
    """After a scheduler restart the specs are all there and the same replica processes keep serving."""
    status = await fleet.wait_for(session, lambda s: len(ready_chat(s)) >= 3 and not s.get("open_directives"), 90,
                                  "a settled fleet")
    specs_before = (await fleet.admin(session, "GET", "/v1/specs"))["items"]
    replicas = {r["replica_id"]: fleet.procs.engine_pid(int(r["endpoint"].rsplit(":", 1)[1]))
                for _, r in ready_chat(status)}
    await fleet.restart_scheduler()
    await fleet.wait_for(session, lambda s: {r["replica_id"] for _, r in ready_chat(s)} >= set(replicas), 60,
                         "the same replicas reported after the restart")
    # The new term's first plan comes after the adoption grace (the lost cluster never reports);
    # then a replacement would start and be ready within seconds (2-s provisioning), and a replica
    # it replaced be drained.
    await fleet.wait_for(session, lambda s: s.get("plan") is not None and not s.get("adopting"), 60,
                         "the first plan after the restart")
    await asyncio.sleep(8.0)
    status = await fleet.status(session)
    after = {r["replica_id"]: fleet.procs.engine_pid(int(r["endpoint"].rsplit(":", 1)[1]))
             for _, r in ready_chat(status)}
    assert {rid: after.get(rid) for rid in replicas} == replicas, "a replica ready before the restart was replaced"
    specs_after = (await fleet.admin(session, "GET", "/v1/specs"))["items"]
    assert [(s["kind"], s["name"]) for s in specs_after] == [(s["kind"], s["name"]) for s in specs_before]


async def test_bad_spec_is_rejected_and_changes_nothing(fleet, session):
    """Applying a broken deployment answers 422 with located errors and leaves specs and placement as they were."""
    before = await fleet.admin(session, "GET", "/v1/specs/ModelDeployment/chat")
    placement_before = (await fleet.status(session))["plan"]["placement"]
    result = await fleet.apply(session, [SPECS / "bad-deployment.yaml"])
    assert result["status"] == 422
    assert any(i["line"] == 10 and i["path"] == "spec.resources.gpu_types.1" for i in result["issues"]), result
    after = await fleet.admin(session, "GET", "/v1/specs/ModelDeployment/chat")
    assert after["document"] == before["document"] and after["generation"] == before["generation"]
    assert (await fleet.status(session))["plan"]["placement"] == placement_before


async def test_new_revision_rolls_out_as_a_canary_without_failing_a_request(fleet, session, tmp_path):
    """A changed engine setting (a new replica revision) with a canary rollout, under load: the new
    revision first gets a third of the replicas beside the old ones, then all; the old drain only
    after that; no request fails; the status shows the rollout complete."""
    status = await fleet.wait_for(session, lambda s: len(ready_chat(s)) >= 3 and not s.get("open_directives"), 120,
                                  "a settled fleet")
    old = {r["revision"] for _, r in ready_chat(status)}
    assert len(old) == 1, old
    text = (SPECS / "fleet.yaml").read_text()
    changed = text.replace("max_running_requests: 64", "max_running_requests: 48").replace(
        "  placement:\n", "  rollout:\n    strategy: canary\n    steps_percent: [34, 100]\n    step_duration_s: 3\n"
                          "  placement:\n", 1)
    assert changed.count("rollout:") == 1 and "max_running_requests: 48" in changed
    path = tmp_path / "fleet-v2.yaml"
    path.write_text(changed)
    stop, results, seen = asyncio.Event(), [], []
    runner = asyncio.create_task(load(fleet, stop, results))
    try:
        applied = await fleet.apply(session, [path])
        assert applied["status"] == 200, applied

        def done(s: dict) -> bool:
            rollout = next((r for r in s.get("rollouts", []) if r["deployment"] == MODEL), None)
            revisions = [r["revision"] for _, r in ready_chat(s)]
            seen.append((rollout and (rollout["phase"], rollout["step"]), sum(1 for r in revisions if r in old),
                         sum(1 for r in revisions if r not in old)))
            return (rollout is not None and rollout["phase"] == "complete" and len(revisions) >= 3
                    and not set(revisions) & old)

        await fleet.wait_for(session, done, 180, "the canary rollout to complete")
    finally:
        stop.set()
        await runner
    failed = [r for r in results if not r[1]]
    assert len(results) > 20 and not failed, (len(results), failed[:3])
    # Step 1 (34%) served beside the old revision before the new one took everything.
    assert any(step == ("progressing", 1) and n_old >= 1 and n_new >= 1 for step, n_old, n_new in seen), seen
    first_all_new = next(i for i, (_, n_old, n_new) in enumerate(seen) if n_old == 0 and n_new >= 1)
    assert any(n_old >= 1 for _, n_old, _ in seen[:first_all_new])
