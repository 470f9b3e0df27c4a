"""A replica process killed mid-run: no non-streaming request fails (retries absorb it)."""

from __future__ import annotations

import asyncio
import signal

from router import testing
from tests.conftest import free_port


async def test_replica_killed_mid_run_loses_no_request(processes, make_router, http):
    """SIGKILL on one of two replica processes during a load of 240 requests: every answer is 200."""
    ports = [free_port(), free_port()]
    procs = [processes.start(["-m", "router.testing", "--port", str(p), "--name", f"p{i}", "--delay-ms", "20"], p)
             for i, p in enumerate(ports)]
    router = await make_router(testing.table(1, {"m": [testing.replica(f"p{i}", p) for i, p in enumerate(ports)]},
                                             policy="round_robin"))
    url = f"http://127.0.0.1:{router.port}/v1/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    statuses: list[int] = []
    replicas_seen: list[str] = []

    async def worker(n: int) -> None:
        for _ in range(n):
            async with http.post(url, json=body) as resp:
                statuses.append(resp.status)
                if resp.status == 200:
                    replicas_seen.append((await resp.json())["replica"])

    async def killer() -> None:
        while len(statuses) < 60:
            await asyncio.sleep(0.01)
        procs[0].send_signal(signal.SIGKILL)

    await asyncio.gather(killer(), *(worker(30) for _ in range(8)))
    assert len(statuses) == 240
    assert statuses == [200] * 240
    assert "p0" in replicas_seen[:60] and replicas_seen[-40:] == ["p1"] * 40
    assert router.metrics.ejections[("m", "p0")] == 1
    assert sum(router.metrics.retries.values()) >= 1
