"""Test doubles shipped with the scheduler (a supported testing module, as httpx ships its mock
transport): ``FakeAgent``, a minimal real CapacityService client, and ``FakeCluster``, which carries
directives out instantly the way an agent would report them. Used by the scheduler's tests, the
demo and other components' tests that need a scheduler to talk to something real over gRPC."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Sequence

import grpc

import meridian
from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import capacity_pb2, capacity_pb2_grpc
from scheduler import config as config_mod
from scheduler.server import capacity

log = logging.getLogger("meridian.scheduler.testing")


class Refused(Exception):
    """The scheduler ended the stream; ``code`` is the gRPC status, ``leader`` the redirect hint."""

    def __init__(self, code: grpc.StatusCode, details: str, leader: str = ""):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
        self.leader = leader


class StreamEnded(RuntimeError):
    """A write on a stream the scheduler had already ended (a new term, a standby): reconnect."""


class FakeAgent:
    """One Connect stream for ``cluster_id``. ``connect`` tries ``addresses`` in order and follows the
    standby's ``meridian-leader`` hint; directives land in ``directives`` (and ``received``)."""

    def __init__(self, addresses: Sequence[str], cluster_id: str, token: str, *, cloud: fm.Cloud = fm.Cloud.LOCAL,
                 region: str = "us-east-1", completed: Sequence[str] = ()):
        self.addresses = list(addresses)
        self.identity = fm.ClusterIdentity(cluster_id, cloud, region, "", f"fake-agent/{meridian.__version__}")
        self.token = token
        self.completed = list(completed)
        self.directives: asyncio.Queue[fm.Directive] = asyncio.Queue()
        self.received: list[fm.Directive] = []
        self.welcome: capacity_pb2.Welcome | None = None
        self.address = ""
        self.ended: Refused | None = None
        self._seq = itertools.count(1)
        self._channel: grpc.aio.Channel | None = None
        self._call = None
        self._reader: asyncio.Task | None = None

    async def connect(self, timeout_s: float = 10.0) -> capacity_pb2.Welcome:
        """Hello and wait for Welcome; raises ``Refused`` when every address refuses."""
        last: Refused | None = None
        tried: list[str] = []
        queue = list(self.addresses)
        while queue:
            address = queue.pop(0)
            tried.append(address)
            try:
                return await self._connect_one(address, timeout_s)
            except Refused as exc:
                last = exc
                if exc.leader and exc.leader not in tried and exc.leader not in queue:
                    queue.insert(0, exc.leader)
        assert last is not None
        raise last

    async def _connect_one(self, address: str, timeout_s: float) -> capacity_pb2.Welcome:
        await self.close()
        self.ended = None
        self._channel = grpc.aio.insecure_channel(address)
        self._call = capacity_pb2_grpc.CapacityServiceStub(self._channel).Connect()
        hello = wire.hello_to_pb(self.identity, self.token, self.completed)
        try:
            await self._call.write(capacity_pb2.AgentMessage(sequence=next(self._seq), hello=hello))
            first = await asyncio.wait_for(self._call.read(), timeout_s)
        except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.TimeoutError):
            first = grpc.aio.EOF
        if first is grpc.aio.EOF or first.WhichOneof("payload") != "welcome":
            code = await self._call.code()
            details = await self._call.details()
            trailers = await self._call.trailing_metadata() or ()
            leader = dict((k, v) for k, v in trailers).get(capacity.LEADER_METADATA, "")
            await self.close()
            raise Refused(code, details or "", leader)
        self.welcome = first.welcome
        self.address = address
        self._reader = asyncio.create_task(self._read())
        return first.welcome

    async def _read(self) -> None:
        try:
            while True:
                msg = await self._call.read()
                if msg is grpc.aio.EOF:
                    break
                if msg.WhichOneof("payload") == "directive":
                    d = wire.directive_from_pb(msg.directive)
                    self.received.append(d)
                    self.directives.put_nowait(d)
        except grpc.aio.AioRpcError as exc:
            log.info("event=fake_agent_stream_ended cluster=%s code=%s", self.identity.cluster_id, exc.code())
        try:
            self.ended = Refused(await self._call.code(), await self._call.details() or "")
        except grpc.aio.AioRpcError:
            self.ended = Refused(grpc.StatusCode.UNKNOWN, "stream broke")

    @property
    def connected(self) -> bool:
        return self._reader is not None and not self._reader.done()

    async def wait_closed(self, timeout_s: float = 10.0) -> Refused:
        if self._reader is not None:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout_s)
        assert self.ended is not None
        return self.ended

    async def _send(self, **payload) -> None:
        try:
            await self._call.write(capacity_pb2.AgentMessage(sequence=next(self._seq), **payload))
        except asyncio.InvalidStateError as exc:  # the scheduler ended the stream before this write
            raise StreamEnded(f"cluster {self.identity.cluster_id}: the stream ended before this message") from exc

    async def inventory(self, pools: Sequence[fm.GpuPool], complete: bool = True) -> None:
        await self._send(inventory=capacity_pb2.Inventory(pools=[wire.pool_to_pb(p) for p in pools], complete=complete))

    async def replicas(self, reports: Sequence[fm.ReplicaReport], complete: bool = True) -> None:
        await self._send(replicas=capacity_pb2.ReplicaReports(replicas=[wire.report_to_pb(r) for r in reports],
                                                              complete=complete))

    async def ack(self, directive_id: str, outcome: fm.DirectiveOutcome, reason: str = "") -> None:
        await self._send(ack=wire.ack_to_pb(fm.DirectiveAck(directive_id, outcome, reason)))

    async def event(self, event: fm.Event) -> None:
        await self._send(event=wire.event_to_pb(event))

    async def heartbeat(self) -> None:
        await self._send(heartbeat=capacity_pb2.Heartbeat())

    async def hello_again(self, cluster_id: str) -> None:
        """A second Hello on the same stream (the scheduler must refuse it)."""
        ident = dataclasses.replace(self.identity, cluster_id=cluster_id)
        await self._send(hello=wire.hello_to_pb(ident, self.token))

    async def next_directive(self, timeout_s: float = 10.0) -> fm.Directive:
        return await asyncio.wait_for(self.directives.get(), timeout_s)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        if self._call is not None:
            self._call.cancel()
            self._call = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


class FakeCluster:
    """A cluster that carries out directives at once: a start becomes a STARTING replica that is READY
    on the next ``step``; a drain removes the replica; a resize sets the pool's nodes. It reports
    after each change and acknowledges every directive once (ACCEPTED; DUPLICATE when seen before)."""

    def __init__(self, agent: FakeAgent, pools: Sequence[fm.GpuPool], replicas: Sequence[fm.ReplicaReport] = ()):
        self.agent = agent
        self.pools = {p.pool_id: p for p in pools}
        self.replicas = {r.replica_id: r for r in replicas}
        self.done: list[str] = list(agent.completed)
        self.seen: set[str] = set(agent.completed)
        self.max_fence = 0
        # connect() and step() take turns: both write on the stream, and gRPC ends a stream written
        # by two tasks at once with INTERNAL (a test that drives steps in a task while it connects).
        self._turn = asyncio.Lock()

    def _free(self, pool_id: str) -> int:
        p = self.pools[pool_id]
        used = sum(r.gpu_count for r in self.replicas.values() if r.pool_id == pool_id)
        return max(0, p.nodes_current * p.gpus_per_node - used)

    def _pools(self) -> list[fm.GpuPool]:
        return [dataclasses.replace(p, gpus_free=self._free(p.pool_id)) for p in self.pools.values()]

    async def report(self) -> None:
        await self.agent.inventory(self._pools())
        await self.agent.replicas(list(self.replicas.values()))

    async def connect(self, timeout_s: float = 10.0) -> capacity_pb2.Welcome:
        async with self._turn:
            self.agent.completed = self.done[-256:]
            welcome = await self.agent.connect(timeout_s)
            await self.report()
            return welcome

    async def step(self) -> list[fm.Directive]:
        """Promote STARTING replicas to READY, carry out queued directives, report. Returns them."""
        async with self._turn:
            return await self._step()

    async def _step(self) -> list[fm.Directive]:
        for rid, r in list(self.replicas.items()):
            if r.state is fm.ReplicaState.STARTING:
                self.replicas[rid] = dataclasses.replace(r, state=fm.ReplicaState.READY)
        handled = []
        while not self.agent.directives.empty():
            d = self.agent.directives.get_nowait()
            handled.append(d)
            if d.fencing_token < self.max_fence:
                await self.agent.ack(d.directive_id, fm.DirectiveOutcome.REFUSED, "stale fencing token")
                continue
            self.max_fence = d.fencing_token
            if d.directive_id in self.seen:
                await self.agent.ack(d.directive_id, fm.DirectiveOutcome.DUPLICATE)
                continue
            self.seen.add(d.directive_id)
            self._apply(d.action)
            self.done.append(d.directive_id)
            await self.agent.ack(d.directive_id, fm.DirectiveOutcome.ACCEPTED)
        await self.report()
        return handled

    def _apply(self, a: fm.Action) -> None:
        if isinstance(a, fm.StartReplica):
            self.replicas[a.replica_id] = fm.ReplicaReport(
                replica_id=a.replica_id, deployment=a.deployment, revision=a.revision,
                endpoint=f"http://127.0.0.1:9/{a.replica_id}", state=fm.ReplicaState.STARTING, pool_id=a.pool_id,
                gpu_count=a.gpu_count, served_model_name=a.runtime.served_model_name)
        elif isinstance(a, fm.DrainReplica):
            self.replicas.pop(a.replica_id, None)
        elif isinstance(a, fm.ResizePool) and a.pool_id in self.pools:
            p = self.pools[a.pool_id]
            self.pools[a.pool_id] = dataclasses.replace(p, nodes_current=min(p.nodes_max, a.target_nodes))


def local_config(state_url: str, **overrides) -> config_mod.SchedulerConfig:
    """A scheduler config for tests: loopback, any free ports, fast heartbeats, short grace."""
    values: dict = dict(grpc_address="127.0.0.1:0", admin_address="127.0.0.1:0", state_url=state_url,
                        heartbeat_interval_s=1.0, lost_after_intervals=3, lease_ttl_s=3.0, lease_renew_interval_s=0.5,
                        standby_poll_interval_s=0.25, adopt_grace_s=1.0, tick_interval_s=0.25, plan_interval_s=30.0,
                        solve_time_limit_s=2.0, pool_scale_down_delay_s=3600.0)
    values.update(overrides)
    return config_mod.SchedulerConfig(**values)


async def wait_for(predicate, timeout_s: float = 15.0, interval_s: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` (sync or async) until it returns something truthy; bounded by ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if loop.time() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s}s")
        await asyncio.sleep(interval_s)


def gpu_pool(pool_id: str, *, gpu_type: str = "L4", nodes: int = 2, nodes_max: int = 4, gpus_per_node: int = 1,
             tier: fm.Tier = fm.Tier.ON_DEMAND, instance_type: str = "g6.xlarge",
             price_per_node_hour_usd: float = 0.80) -> fm.GpuPool:
    return fm.GpuPool(pool_id=pool_id, gpu_type=gpu_type, gpu_memory_gib=24, gpus_per_node=gpus_per_node,
                      instance_type=instance_type, nodes_current=nodes, nodes_min=0, nodes_max=nodes_max,
                      gpus_free=nodes * gpus_per_node, tier=tier, price_per_node_hour_usd=price_per_node_hour_usd,
                      quota_headroom_gpus=64)
