"""Replica supervising real emulator processes: readiness, restart, give-up, drain, SIGKILL
escalation, health, scraping, adoption and no orphans on any path."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import aiohttp
import pytest

from meridian import fleet, latency
from runtime_adapter import AdoptError, Replica, ReplicaFailed, SupervisorConfig, emulator, records
from tests.conftest import free_port
from tests.integration.runtime_adapter.conftest import FAST, pid_gone

SPEC = fleet.RuntimeSpec(model_path="meta-llama/Llama-3.1-8B-Instruct", served_model_name="llama")
CHILD = os.path.join(os.path.dirname(__file__), "supervisor_child.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def emu_env(**kw) -> dict[str, str]:
    settings = dict(startup_delay_s=0.2, warmup_s=0.1, speedup=5.0, gpu_type="H100")
    settings.update(kw)
    return emulator.environment(**settings)


def replica(tmp_path, *, env: dict[str, str] | None = None, config: SupervisorConfig = FAST,
            spec: fleet.RuntimeSpec = SPEC, replica_id: str = "r-1") -> Replica:
    return Replica(spec, replica_id, port=free_port(), engine_command=emulator.command(), env=env or emu_env(),
                   config=config, state_dir=str(tmp_path))


async def wait_until(predicate, timeout_s: float = 30.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def chat(session: aiohttp.ClientSession, endpoint: str, max_tokens: int = 20, stream: bool = False) -> dict:
    body = {"model": "llama", "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens,
            "ignore_eos": True, "stream": stream, "stream_options": {"include_usage": True}}
    async with session.post(endpoint + "/v1/chat/completions", json=body) as resp:
        if not stream:
            return {"status": resp.status, "body": await resp.json()}
        text = (await resp.read()).decode()
        events = [e[6:] for e in text.split("\n\n") if e.startswith("data: ")]
        usage = json.loads(events[-2])["usage"] if len(events) >= 2 and events[-1] == "[DONE]" else None
        return {"status": resp.status, "body": {"usage": usage}}


async def test_readiness_report_and_stop(tmp_path):
    """STARTING until /health_generate answers 200, then READY with time-to-ready and phases; stop leaves no process."""
    r = replica(tmp_path, env=emu_env(startup_delay_s=2.0, speedup=1.0))
    try:
        await r.start()
        assert r.state == fleet.ReplicaState.STARTING
        assert await r.wait_ready(60)
        assert r.state == fleet.ReplicaState.READY
        assert r.time_to_ready_s >= 1.5 and r.phases.load_s >= 1.5
        report = r.report("chat", "rev1", "pool-a", 1)
        assert (report.state, report.endpoint, report.served_model_name) == (fleet.ReplicaState.READY, r.endpoint, "llama")
        assert report.time_to_ready_s == r.time_to_ready_s and report.restarts == 0
        pid = r.pid
        assert pid is not None and not pid_gone(pid)
    finally:
        await r.stop()
    assert r.state == fleet.ReplicaState.STOPPED
    await wait_until(lambda: pid_gone(pid), what="engine exit")


async def test_crash_restarts_with_backoff(tmp_path):
    """An engine that dies is restarted (new pid) and becomes READY again; the crash is counted."""
    r = replica(tmp_path, env=emu_env(crash_after_requests=1))
    try:
        await r.start()
        await r.wait_ready(60)
        first_pid = r.pid
        async with aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.ClientError):
                await chat(s, r.endpoint)
        await wait_until(lambda: r.restarts == 1 and r.state == fleet.ReplicaState.READY, 60, "restart")
        assert r.pid != first_pid and pid_gone(first_pid)
        assert "exited with code 134" in r.last_crash and "Emulated fault: crashing" in r.last_crash
        assert r.message == ""  # cleared once READY again
    finally:
        await r.stop()


async def test_gives_up_after_repeated_crashes(tmp_path):
    """An engine that never starts ends FAILED after max_crashes, quoting its last log lines."""
    r = replica(tmp_path, env=emu_env(fail_startup=True))
    try:
        await r.start()
        with pytest.raises(ReplicaFailed, match="gave up after 3"):
            await r.wait_ready(60)
        assert r.state == fleet.ReplicaState.FAILED
        assert r.restarts == 2
        assert "out of memory (emulated fault fail_startup)" in r.message
        assert "exited with code 1" in r.message
        assert r.report("d", "v").message == r.message
    finally:
        await r.stop()
    assert r.pid is None or pid_gone(r.pid)


async def test_drain_under_load_loses_no_request(tmp_path):
    """Drain reports DRAINING, lets every in-flight request finish (200, full length), then stops the engine."""
    r = replica(tmp_path, env=emu_env(speedup=1.0))
    states: list[fleet.ReplicaState] = []
    try:
        await r.start()
        await r.wait_ready(60)
        pid = r.pid
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
            # ~150 decode steps of ~9 ms each: in flight for well over a scrape interval.
            calls = [asyncio.create_task(chat(s, r.endpoint, max_tokens=150, stream=i % 2 == 0)) for i in range(16)]
            await wait_until(lambda: r.load().outstanding > 0, 30, "load visible in /metrics")

            async def watch() -> None:
                while r.state != fleet.ReplicaState.STOPPED:
                    states.append(r.state)
                    await asyncio.sleep(0.02)

            watcher = asyncio.create_task(watch())
            result = await r.drain(deadline_s=90)
            results = await asyncio.gather(*calls)
            await watcher
        assert all(x["status"] == 200 and x["body"]["usage"]["completion_tokens"] == 150 for x in results)
        assert fleet.ReplicaState.DRAINING in states
        assert not result.killed and not result.deadline_hit and result.outstanding_at_term == 0
        assert r.state == fleet.ReplicaState.STOPPED
        await wait_until(lambda: pid_gone(pid), what="engine exit")
    finally:
        await r.stop()


async def test_drain_escalates_to_sigkill(tmp_path):
    """An engine stuck with in-flight work ignores SIGTERM (as SGLang waits forever); drain then SIGKILLs it."""
    config = FAST.model_copy(update={"term_grace_s": 1.0})
    r = replica(tmp_path, config=config)
    try:
        await r.start()
        await r.wait_ready(60)
        pid = r.pid
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
            async with s.post(r.endpoint + "/_emulator/faults", json={"hang": True}) as resp:
                assert resp.status == 200
            stuck = asyncio.create_task(chat(s, r.endpoint))
            await asyncio.sleep(0.5)
            result = await r.drain(deadline_s=1.0)
            with pytest.raises(aiohttp.ClientError):
                await stuck
        assert result.deadline_hit and result.killed
        assert r.state == fleet.ReplicaState.STOPPED
        await wait_until(lambda: pid_gone(pid), what="engine exit after SIGKILL")
    finally:
        await r.stop()


async def test_hung_engine_is_restarted(tmp_path):
    """Failed health probes (a hung engine) count as a crash: the engine is replaced."""
    r = replica(tmp_path, env=emu_env(speedup=1.0, startup_delay_s=0.1, health_timeout_s=1.0))
    try:
        await r.start()
        await r.wait_ready(60)
        first_pid = r.pid
        async with aiohttp.ClientSession() as s:
            async with s.post(r.endpoint + "/_emulator/faults", json={"hang": True}) as resp:
                assert resp.status == 200
        await wait_until(lambda: r.restarts == 1 and r.state == fleet.ReplicaState.READY, 60, "restart after hang")
        assert r.pid != first_pid and pid_gone(first_pid)
    finally:
        await r.stop()


async def test_load_is_scraped_from_emulator_metrics(tmp_path):
    """Replica.load() reflects the emulator's /metrics: in-flight counts, then TTFT/ITL percentiles and rates."""
    r = replica(tmp_path, env=emu_env(speedup=1.0))
    try:
        await r.start()
        await r.wait_ready(60)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
            # ~300 decode steps of ~9 ms: long enough for several 0.2 s scrapes to see them running.
            calls = [asyncio.create_task(chat(s, r.endpoint, max_tokens=300)) for _ in range(8)]
            await wait_until(lambda: r.load().running_requests > 0, 30, "running requests in the load")
            assert r.load().kv_cache_usage > 0
            await asyncio.gather(*calls)
        await wait_until(lambda: r.load().running_requests == 0 and r.load().ttft.p50_ms > 0, 30, "percentiles")
        load = r.load()
        assert 0 < load.ttft.p50_ms <= load.ttft.p99_ms
        assert 0 < load.inter_token_latency.p50_ms < 1000
        assert load.requests_per_s > 0 and load.observed_at > 0
        # The queue time before prefill (sglang:queue_time_seconds) is part of the TTFT.
        assert load.queue_time is not None
        assert 0 <= load.queue_time.p50_ms <= load.queue_time.p99_ms <= load.ttft.p99_ms
    finally:
        await r.stop()


async def test_no_orphan_when_the_supervisor_is_killed(tmp_path):
    """SIGKILL of the supervisor process takes its (non-adoptable) engine down with it."""
    port = free_port()
    child = subprocess.Popen([sys.executable, CHILD, str(port), str(tmp_path), "die"], stdout=subprocess.PIPE,
                             text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    engine_pid = None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), timeout=90)
        engine_pid = json.loads(line)["pid"]
        assert not pid_gone(engine_pid)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        await wait_until(lambda: pid_gone(engine_pid), 15, "engine to die with its supervisor")
    finally:
        child.kill()
        child.wait(timeout=10)
        if engine_pid and not pid_gone(engine_pid):
            os.kill(engine_pid, signal.SIGKILL)


async def test_adoptable_engine_survives_supervisor_and_is_adopted(tmp_path):
    """In survive mode the engine outlives a killed supervisor; a new Replica adopts it from the record and stops it."""
    port = free_port()
    child = subprocess.Popen([sys.executable, CHILD, str(port), str(tmp_path), "survive"], stdout=subprocess.PIPE,
                             text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    engine_pid = None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), timeout=90)
        engine_pid = json.loads(line)["pid"]
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        await asyncio.sleep(0.5)
        assert not pid_gone(engine_pid)
        [record] = records.load_all(str(tmp_path))
        assert record.pid == engine_pid and record.port == port
        config = FAST.model_copy(update={"survive_supervisor_exit": True})
        adopted = await Replica.adopt(record, config=config, state_dir=str(tmp_path))
        try:
            await adopted.wait_ready(30)
            assert adopted.pid == engine_pid and adopted.endpoint == f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as s:
                assert (await chat(s, adopted.endpoint))["status"] == 200
        finally:
            await adopted.stop()
        await wait_until(lambda: pid_gone(engine_pid), 15, "adopted engine to stop")
        assert records.load_all(str(tmp_path)) == []
        with pytest.raises(AdoptError, match="gone"):
            await Replica.adopt(record, config=config, state_dir=str(tmp_path))
    finally:
        child.kill()
        child.wait(timeout=10)
        if engine_pid and not pid_gone(engine_pid):
            os.kill(engine_pid, signal.SIGKILL)


async def test_detach_then_adopt_in_process(tmp_path):
    """detach() leaves an adoptable engine running; adopt() re-attaches and refuses a reused identity."""
    config = FAST.model_copy(update={"survive_supervisor_exit": True})
    first = replica(tmp_path, config=config)
    await first.start()
    pid = None
    try:
        await first.wait_ready(60)
        pid = first.pid
        await first.detach()
        assert not pid_gone(pid)
        [record] = records.load_all(str(tmp_path))
        import dataclasses

        with pytest.raises(AdoptError, match="start time"):
            await Replica.adopt(dataclasses.replace(record, start_ticks=record.start_ticks + 1), config=config,
                                state_dir=str(tmp_path))
        second = await Replica.adopt(record, config=config, state_dir=str(tmp_path), env=emu_env())
        await second.wait_ready(30)
        assert second.pid == pid and second.state == fleet.ReplicaState.READY
        await second.stop()
        await wait_until(lambda: pid_gone(pid), 15, "engine stop")
    finally:
        if pid and not pid_gone(pid):
            os.kill(pid, signal.SIGKILL)


async def test_a_launched_replica_given_a_region_makes_far_clients_wait_the_rtt(tmp_path, http):
    """The region reaches a supervised emulator process through its environment (as the demo's
    agents pass it): a client from Tokyo waits the Virginia RTT, one from Virginia does not."""
    r = replica(tmp_path, env=emu_env(region="us-east-1", speedup=1.0))
    far_s = latency.default().rtt_ms("ap-northeast", "us-east-1") / 1000
    try:
        await r.start()
        assert await r.wait_ready(60)
        body = {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        took = {}
        for client in ("na-east", "ap-northeast"):
            t0 = asyncio.get_running_loop().time()
            async with http.post(r.endpoint + "/v1/chat/completions", json=body,
                                 headers={"X-Meridian-Client-Region": client}) as resp:
                assert resp.status == 200
                await resp.read()
            took[client] = asyncio.get_running_loop().time() - t0
    finally:
        await r.stop()
    assert took["ap-northeast"] >= far_s, took
    assert took["na-east"] < took["ap-northeast"] - far_s / 2, took


async def test_an_engine_still_loading_is_adopted_starting_and_becomes_ready(tmp_path):
    """An agent that restarts while an engine loads its weights (port still closed) adopts that engine
    (same pid) and supervises it to READY, instead of dropping it to run on unsupervised."""
    config = FAST.model_copy(update={"survive_supervisor_exit": True})
    first = replica(tmp_path, config=config, env=emu_env(startup_delay_s=4.0, speedup=1.0))
    await first.start()
    pid = None
    try:
        await wait_until(lambda: records.load_all(str(tmp_path)), 30, "the engine's record")
        pid = first.pid
        await first.detach()
        [record] = records.load_all(str(tmp_path))
        second = await Replica.adopt(record, config=config, state_dir=str(tmp_path), env=emu_env())
        assert second.pid == pid and second.state == fleet.ReplicaState.STARTING
        await second.wait_ready(60)
        assert second.pid == pid and second.state == fleet.ReplicaState.READY
        await second.stop()
        await wait_until(lambda: pid_gone(pid), 15, "engine stop")
    finally:
        if pid and not pid_gone(pid):
            os.kill(pid, signal.SIGKILL)
