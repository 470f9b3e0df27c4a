"""The faults, as data: each is injected under the steady load, held, undone, and judged against its
``Expect`` (see outcome.py). A new fault is a few lines: an inject coroutine, how long to hold it,
what undoes it, what it may cost. Order matters only in that the harshest come last; each starts
from a whole fleet (``World.whole``) and leaves it whole again.

Recovery bounds here are the ones docs/reliability.md promises; the shared 2-core machine the suite
runs on is slower than production, so they are loose where the fleet itself must restart a process."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import aiohttp

from tests.chaos import world as world_mod
from tests.chaos.outcome import Evidence, Expect, Fault

W = world_mod.World


async def _victim(world: W) -> dict:
    """The ready chat replica the router would pick first (the lowest latency estimate among those
    it routes to healthily), so the fault meets traffic."""
    by_id = {r["replica_id"]: r for _, r in world.ready(await world.status())}
    rs = await world.router_status()
    routed = sorted((r["cost_ms"], r["pending"], r["replica_id"]) for m in rs["models"] for r in m["replicas"]
                    if r["active_up"] and r["ejected_for_s"] == 0 and r["replica_id"] in by_id)
    if not routed:
        raise RuntimeError("no routed replica to inject the fault into")
    return by_id[routed[0][2]]


def _emulator_fault(**faults):
    async def inject(world: W) -> dict:
        victim = await _victim(world)
        await world.emulator_faults(victim, **faults)
        return {"victim": victim, "pid": world.engine_pid(victim)}
    return inject


def _emulator_reset(**faults):
    async def restore(world: W, token: dict) -> None:
        await world.emulator_faults(token["victim"], **faults)
    return restore


def _router_saw(*counters: str):
    """The fault took effect: the router counted one of ``counters`` (``upstream_errors:<kind>``)."""
    async def check(world: W, token: dict, evidence: Evidence) -> list[str]:
        if any(evidence.router.get(c) for c in counters):
            return []
        return [f"the router saw none of {', '.join(counters)} (fault not injected)"]
    return check


async def _victim_served(world: W, token: dict, evidence: Evidence) -> list[str]:
    """The fault took effect: the slowed replica answered requests while slow."""
    served = world.answered_by(token["pid"], evidence.injected_unix)
    return [] if served else ["the slowed replica answered nothing meanwhile (fault not injected)"]


async def _sigkill_replica(world: W) -> dict:
    victim = await _victim(world)
    world.kill(world.engine_pid(victim))
    return {"victim": victim}


async def _busiest_cluster(world: W) -> str:
    status = await world.status()
    counts: dict[str, int] = {}
    for c, _ in world.ready(status):
        counts[c["cluster_id"]] = counts.get(c["cluster_id"], 0) + 1
    return max(sorted(counts), key=lambda k: counts[k])


async def _kill_agent(world: W) -> dict:
    cluster = await _busiest_cluster(world)
    status = await world.status()
    engines = {r["replica_id"]: world.engine_pid(r) for c, r in world.ready(status) if c["cluster_id"] == cluster}
    child = world.fleet.procs.children[f"agent-{cluster}"]
    os.kill(child.pid, signal.SIGKILL)
    await asyncio.to_thread(child.proc.wait, 5)
    return {"cluster": cluster, "engines": engines}


async def _restart_agent(world: W, token: dict) -> None:
    await world.fleet.start_agent(token["cluster"])


async def _same_engines(world: W, token: dict, evidence: Evidence) -> list[str]:
    """The agent's restart re-adopted its replicas: the same engine processes serve."""
    status = await world.status()
    now = {r["replica_id"]: world.engine_pid(r) for c, r in world.ready(status) if c["cluster_id"] == token["cluster"]}
    changed = {rid: (pid, now.get(rid)) for rid, pid in token["engines"].items() if now.get(rid) != pid}
    return [f"replicas restarted by the agent's restart: {changed}"] if changed else []


async def _cut_agent_link(world: W) -> dict:
    cluster = await _busiest_cluster(world)
    world.agent_proxies[cluster].cut("reset")
    return {"cluster": cluster, "cut_at": time.monotonic()}


async def _heal_agent_link(world: W, token: dict) -> None:
    status = await world.status()
    entry = next(c for c in status["clusters"] if c["cluster_id"] == token["cluster"])
    token["seen_down"] = not entry["connected"] or entry.get("lost", False)
    world.agent_proxies[token["cluster"]].heal()


async def _link_was_cut(world: W, token: dict, evidence: Evidence) -> list[str]:
    return [] if token.get("seen_down") else [f"the cut did not disconnect {token['cluster']} (fault not injected)"]


async def _cut_router_link(world: W) -> dict:
    world.router_proxy.cut("reset")
    await asyncio.sleep(1.0)
    return {"connected_during_cut": await world.router_connected()}


async def _heal_router_link(world: W, token: dict) -> None:
    world.router_proxy.heal()


async def _router_link_was_cut(world: W, token: dict, evidence: Evidence) -> list[str]:
    return ["the router stayed connected through the cut (fault not injected)"] if token["connected_during_cut"] else []


async def _flood(world: W) -> dict:
    """Twelve applies of the deployment within three seconds, its size swinging 3 -> 5 -> 3: every
    one a new plan and directives for the agents; the last puts it back as it was."""
    text = (world_mod.SPECS / "fleet.yaml").read_text()
    sizes = [4, 5, 3, 5, 4, 3, 5, 4, 5, 3, 4, 3]
    for n in sizes:
        body = {"files": [{"name": "flood.yaml", "text": text.replace("min_replicas: 3", f"min_replicas: {n}")}]}
        result = await world.fleet.admin(world.session, "POST", "/v1/apply", body)
        if result["status"] != 200:
            raise RuntimeError(f"flood apply refused: {result}")
        await asyncio.sleep(0.25)
    return {"applies": len(sizes), "last": sizes[-1]}


async def _flood_landed(world: W, token: dict, evidence: Evidence) -> list[str]:
    doc = await world.fleet.admin(world.session, "GET", "/v1/specs/ModelDeployment/chat")
    got = doc["document"]["spec"]["scaling"]["min_replicas"]
    return [] if got == token["last"] else [f"the last applied min_replicas {token['last']} was lost: {got}"]


async def _restart_redis(world: W) -> dict:
    token = {"fencing_token": await _fencing_token(world)}
    await world.redis.stop()
    await asyncio.sleep(6.0)  # past the lease's TTL: the leader cannot have renewed it
    await world.redis.start()
    return token


async def _kill_leader(world: W) -> dict:
    node = await world.follow_leader()
    name = world.fleet.scheduler_name(node)
    child = world.fleet.procs.children[name]
    killed_at = time.monotonic()
    os.kill(child.pid, signal.SIGKILL)
    await asyncio.to_thread(child.proc.wait, 5)
    return {"node": node, "killed_at": killed_at}


async def _standby_takes_over(world: W, token: dict) -> None:
    other = 1 - token["node"]
    url = world.fleet.admin_urls[other]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if (await world.fleet.admin(world.session, "GET", "/v1/status", url=url)).get("leader"):
                break
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError):
            pass  # the node is busy taking over: ask again
        await asyncio.sleep(0.2)
    token["took_over_s"] = time.monotonic() - token["killed_at"]
    await world.follow_leader()
    await world.fleet.start_scheduler(token["node"])  # back as a standby


async def _took_over_in_time(world: W, token: dict, evidence: Evidence) -> list[str]:
    s = token.get("took_over_s", 99.0)
    return [] if s <= 10.0 else [f"the standby took {s:.1f} s to lead (promised: 10 s)"]


async def _spot_replicas(world: W) -> set[str]:
    status = await world.status()
    spot_pools = {(c["cluster_id"], p["pool_id"]) for c in status["clusters"] for p in c.get("pool_details", [])
                  if p["tier"] == "spot"}
    return {r["replica_id"] for c, r in world.ready(status) if (c["cluster_id"], r.get("pool_id")) in spot_pools}


async def _reclaim_spot(world: W) -> dict:
    on_spot = await _spot_replicas(world)
    if not on_spot:
        raise RuntimeError("no chat replica runs on a spot node: the fault would hit nothing")
    hit = await world.fleet.preempt_spot(world.session, notice_s=10.0)
    if not hit:
        raise RuntimeError("no spot node was running")
    return {"hit": hit, "replicas": on_spot}


async def _spot_replicas_replaced(world: W, token: dict, evidence: Evidence) -> list[str]:
    """The reclaimed nodes' replicas are gone, and the fleet whole without them."""
    ready = {r["replica_id"] for _, r in world.ready(await world.status())}
    left = token["replicas"] & ready
    return [f"replicas on reclaimed nodes still serve: {sorted(left)} (fault not injected)"] if left else []


async def _fencing_token(world: W) -> int:
    return int((await world.status()).get("fencing_token", 0))


async def _new_term(world: W, token: dict, evidence: Evidence) -> list[str]:
    """Redis went away long enough for the leader to lose its lease: a new term (fencing token) began."""
    now = await _fencing_token(world)
    return [] if now > token["fencing_token"] else [f"the fencing token stayed {now}: no leader lost its lease"]


async def _lose_region(world: W) -> dict:
    cluster = await _busiest_cluster(world)
    world.fleet.kill_cluster(cluster)
    return {"cluster": cluster}


async def _bring_region_back(world: W, token: dict) -> None:
    # The region's capacity is re-placed elsewhere first; then its agent comes back, empty.
    await world.wait_for(lambda s: len(world.ready(s, exclude=token["cluster"])) >= world_mod.MIN_REPLICAS, 120,
                         f"{world_mod.MIN_REPLICAS} ready replicas outside {token['cluster']}")
    await world.fleet.start_agent(token["cluster"])


FAULTS: tuple[Fault, ...] = (
    Fault("replica_500s", "a replica answers every request 500", _emulator_fault(error_rate=1.0), hold_s=8,
          restore=_emulator_reset(error_rate=0.0), check=_router_saw("upstream_errors:status_5xx"),
          expect=Expect(service_s=5, restored_s=45)),
    Fault("replica_hang", "a replica accepts and never answers", _emulator_fault(hang=True), hold_s=12,
          restore=_emulator_reset(hang=False), check=_router_saw("upstream_errors:first_byte_timeout"),
          expect=Expect(broken_streams=2, service_s=30, restored_s=60)),
    Fault("replica_slow", "a replica slows down 10x", _emulator_fault(slowdown_factor=10.0), hold_s=10,
          restore=_emulator_reset(slowdown_factor=1.0), check=_victim_served,
          expect=Expect(service_s=15, restored_s=45)),
    Fault("replica_sigkill", "a serving replica is SIGKILLed", _sigkill_replica, hold_s=6,
          check=_router_saw("upstream_errors:connect", "upstream_errors:reset"),
          expect=Expect(broken_streams=2, service_s=5, restored_s=60)),
    Fault("agent_restart", "an agent is SIGKILLed and started again", _kill_agent, hold_s=2,
          restore=_restart_agent, check=_same_engines, expect=Expect(service_s=2, restored_s=40)),
    Fault("agent_link_cut", "an agent's link to the scheduler is cut 10 s", _cut_agent_link, hold_s=10,
          restore=_heal_agent_link, check=_link_was_cut, expect=Expect(service_s=5, restored_s=60)),
    Fault("router_link_cut", "the router's link to the scheduler is cut 10 s", _cut_router_link, hold_s=9,
          restore=_heal_router_link, check=_router_link_was_cut, expect=Expect(service_s=2, restored_s=45)),
    Fault("directive_flood", "12 applies in 3 s swing the deployment 3-5 replicas", _flood, hold_s=2,
          check=_flood_landed, changes_specs=True, expect=Expect(service_s=5, restored_s=90)),
    Fault("redis_restart", "Redis (scheduler state) is stopped 6 s and restarted", _restart_redis, hold_s=2,
          check=_new_term, expect=Expect(service_s=2, restored_s=60)),
    Fault("leader_killed", "the scheduler leader is SIGKILLed; the standby takes over", _kill_leader, hold_s=1,
          restore=_standby_takes_over, check=_took_over_in_time, expect=Expect(service_s=2, restored_s=60)),
    Fault("spot_reclaimed", "the spot node under a replica is reclaimed (10 s notice)", _reclaim_spot, hold_s=12,
          check=_spot_replicas_replaced, expect=Expect(service_s=5, restored_s=90)),
    Fault("region_lost", "a whole region (agent and replicas) is SIGKILLed", _lose_region, hold_s=8,
          restore=_bring_region_back, check=_router_saw("upstream_errors:connect", "upstream_errors:reset"),
          expect=Expect(broken_streams=2, service_s=10, restored_s=150)),
)
