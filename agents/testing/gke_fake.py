"""A local fake of the GKE API (``google.container.v1.ClusterManager`` over gRPC) and the few
Compute Engine REST calls GKE node pools need (managed instance groups, regional GPU quotas), for
the real ``ClusterManagerClient`` and the gcp provider to talk to in tests and demos.

It keeps node pools with their accelerators, instance groups whose instances come up after
``provisioning_delay_s``, a capacity limit per pool (a resize beyond it ends in an operation error
with ZONE_RESOURCE_POOL_EXHAUSTED and the pool RUNNING_WITH_ERROR, as GKE reports a stock-out),
GPU quotas per region, injected RPC failures (``fail_next``) and HTTP failures (``fail_http_next``),
and, as Compute Engine does, ``listManagedInstances`` in pages (``maxResults``, ``pageToken``, at
most ``page_size`` per page)."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import time
from collections.abc import Callable

import grpc
from aiohttp import web
from google.cloud import container_v1

from agents.providers import common

SERVICE = "google.container.v1.ClusterManager"
quota_metric = common.gke_quota_metric


@dataclasses.dataclass
class _Instance:
    name: str
    ready_at: float


@dataclasses.dataclass
class FakeNodePool:
    project: str
    location: str
    cluster: str
    name: str
    machine_type: str
    accelerator_type: str
    accelerator_count: int
    spot: bool
    zone: str
    instances: list[_Instance]
    autoscaling: container_v1.NodePoolAutoscaling
    capacity_limit: int | None = None
    status: container_v1.NodePool.Status = container_v1.NodePool.Status.RUNNING
    status_message: str = ""
    serial: int = 0
    initial_node_count: int = 0

    @property
    def mig(self) -> str:
        return f"gke-{self.cluster}-{self.name}-grp"


@dataclasses.dataclass
class _Operation:
    op: container_v1.Operation
    done_at: float


class GkeFake:
    """``await start()`` serves gRPC on ``grpc_address`` and Compute REST on ``http_url``."""

    def __init__(self, *, host: str = "127.0.0.1", provisioning_delay_s: float = 0.0,
                 operation_delay_s: float = 0.2, clock: Callable[[], float] = time.time):
        self.host = host
        self.provisioning_delay_s = provisioning_delay_s
        self.operation_delay_s = operation_delay_s
        self._clock = clock
        self.pools: dict[str, FakeNodePool] = {}  # full resource name -> pool
        self.quotas: dict[tuple[str, str, str], float] = {}  # (project, region, metric) -> limit
        self._ops: dict[str, _Operation] = {}
        self._op_ids = itertools.count(1)
        self._faults: dict[str, collections.deque[tuple[grpc.StatusCode, str]]] = collections.defaultdict(collections.deque)
        self._http_faults: dict[str, collections.deque[int]] = collections.defaultdict(collections.deque)
        self.page_size = 500  # listManagedInstances' largest page (Compute Engine's maximum)
        self.calls: collections.Counter[str] = collections.Counter()
        self._grpc: grpc.aio.Server | None = None
        self._http: web.AppRunner | None = None
        self.grpc_port = 0
        self.http_port = 0

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    # ------------------------------------------------------------------ setup

    def add_node_pool(self, *, project: str, location: str, cluster: str, name: str, machine_type: str,
                      accelerator_type: str, accelerator_count: int, node_count: int = 0, spot: bool = False,
                      zone: str | None = None, capacity_limit: int | None = None,
                      autoscaling: tuple[int, int] | None = None) -> FakeNodePool:
        zone = zone or (location if location.count("-") == 2 else f"{location}-a")
        auto = container_v1.NodePoolAutoscaling(enabled=autoscaling is not None,
                                                min_node_count=autoscaling[0] if autoscaling else 0,
                                                max_node_count=autoscaling[1] if autoscaling else 0)
        pool = FakeNodePool(project, location, cluster, name, machine_type, accelerator_type, accelerator_count,
                            spot, zone, [], auto, capacity_limit, initial_node_count=node_count)
        for _ in range(node_count):
            pool.instances.append(self._new_instance(pool, ready_at=self._clock()))
        self.pools[self._pool_name(project, location, cluster, name)] = pool
        return pool

    def set_quota(self, project: str, region: str, metric: str, limit: float) -> None:
        self.quotas[(project, region, metric)] = limit

    def fail_next(self, method: str, code: grpc.StatusCode, message: str, times: int = 1) -> None:
        """Make the next ``times`` calls of RPC ``method`` (e.g. "SetNodePoolSize") fail."""
        self._faults[method].extend([(code, message)] * times)

    def fail_http_next(self, call: str, status: int = 503, times: int = 1) -> None:
        """Make the next ``times`` Compute REST calls of ``call`` ("listManagedInstances",
        "getInstanceGroupManager" or "getRegion") answer ``status``."""
        self._http_faults[call].extend([status] * times)

    def _http_fault(self, call: str) -> web.Response | None:
        self.calls[call] += 1
        if not self._http_faults[call]:
            return None
        status = self._http_faults[call].popleft()
        return web.json_response({"error": {"code": status, "message": "The service is currently unavailable.",
                                            "status": "UNAVAILABLE"}}, status=status)

    def pool(self, name: str) -> FakeNodePool:
        return next(p for p in self.pools.values() if p.name == name)

    @staticmethod
    def _pool_name(project: str, location: str, cluster: str, name: str) -> str:
        return f"projects/{project}/locations/{location}/clusters/{cluster}/nodePools/{name}"

    def _new_instance(self, pool: FakeNodePool, ready_at: float) -> _Instance:
        pool.serial += 1
        return _Instance(f"{pool.mig[:-4]}-{pool.serial:04x}", ready_at)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        c = container_v1
        methods = {
            "ListNodePools": (self._list_node_pools, c.ListNodePoolsRequest, c.ListNodePoolsResponse),
            "GetNodePool": (self._get_node_pool, c.GetNodePoolRequest, c.NodePool),
            "SetNodePoolSize": (self._set_size, c.SetNodePoolSizeRequest, c.Operation),
            "SetNodePoolAutoscaling": (self._set_autoscaling, c.SetNodePoolAutoscalingRequest, c.Operation),
            "GetOperation": (self._get_operation, c.GetOperationRequest, c.Operation),
        }
        handlers = {name: self._rpc(name, *spec) for name, spec in methods.items()}
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        self.grpc_port = server.add_insecure_port(f"{self.host}:0")
        await server.start()
        self._grpc = server
        app = web.Application()
        app.router.add_get("/compute/v1/projects/{project}/zones/{zone}/instanceGroupManagers/{mig}", self._http_mig)
        app.router.add_post("/compute/v1/projects/{project}/zones/{zone}/instanceGroupManagers/{mig}/listManagedInstances",
                            self._http_instances)
        app.router.add_get("/compute/v1/projects/{project}/regions/{region}", self._http_region)
        self._http = web.AppRunner(app, access_log=None)
        await self._http.setup()
        site = web.TCPSite(self._http, self.host, 0)
        await site.start()
        self.http_port = site._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._grpc is not None:
            await self._grpc.stop(None)
        if self._http is not None:
            await self._http.cleanup()

    # ------------------------------------------------------------------ gRPC

    def _rpc(self, name: str, fn, request_type, response_type):
        async def handler(request_bytes_msg, context: grpc.aio.ServicerContext):
            self.calls[name] += 1
            if self._faults[name]:
                code, message = self._faults[name].popleft()
                await context.abort(code, message)
            try:
                return fn(request_bytes_msg)
            except LookupError as exc:
                await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
            except ValueError as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

        return grpc.unary_unary_rpc_method_handler(handler, request_deserializer=request_type.deserialize,
                                                   response_serializer=response_type.serialize)

    def _find(self, name: str) -> FakeNodePool:
        pool = self.pools.get(name)
        if pool is None:
            raise LookupError(f"Not found: node pool {name!r}.")
        return pool

    def _node_pool(self, pool: FakeNodePool) -> container_v1.NodePool:
        url = f"{self.http_url}/compute/v1/projects/{pool.project}/zones/{pool.zone}/instanceGroupManagers/{pool.mig}"
        return container_v1.NodePool(
            name=pool.name, initial_node_count=pool.initial_node_count, locations=[pool.zone],
            config=container_v1.NodeConfig(
                machine_type=pool.machine_type, spot=pool.spot,
                accelerators=[container_v1.AcceleratorConfig(accelerator_count=pool.accelerator_count,
                                                             accelerator_type=pool.accelerator_type)]),
            instance_group_urls=[url], status=pool.status, status_message=pool.status_message,
            autoscaling=pool.autoscaling,
            self_link=f"https://container.googleapis.com/v1/{self._pool_name(pool.project, pool.location, pool.cluster, pool.name)}")

    def _list_node_pools(self, req: container_v1.ListNodePoolsRequest) -> container_v1.ListNodePoolsResponse:
        prefix = req.parent + "/nodePools/"
        return container_v1.ListNodePoolsResponse(
            node_pools=[self._node_pool(p) for n, p in self.pools.items() if n.startswith(prefix)])

    def _get_node_pool(self, req: container_v1.GetNodePoolRequest) -> container_v1.NodePool:
        return self._node_pool(self._find(req.name))

    def _operation(self, pool: FakeNodePool, op_type, error: tuple[int, str] | None) -> container_v1.Operation:
        op_id = f"operation-{next(self._op_ids)}"
        op = container_v1.Operation(
            name=op_id, operation_type=op_type, status=container_v1.Operation.Status.RUNNING,
            location=pool.location,
            target_link=f"https://container.googleapis.com/v1/{self._pool_name(pool.project, pool.location, pool.cluster, pool.name)}",
            self_link=f"https://container.googleapis.com/v1/projects/{pool.project}/locations/{pool.location}/operations/{op_id}")
        done = container_v1.Operation(op)
        done.status = container_v1.Operation.Status.DONE
        if error is not None:
            done.error = {"code": error[0], "message": error[1]}
            done.status_message = error[1]
        self._ops[f"projects/{pool.project}/locations/{pool.location}/operations/{op_id}"] = _Operation(
            done, self._clock() + self.operation_delay_s)
        return op

    def _set_size(self, req: container_v1.SetNodePoolSizeRequest) -> container_v1.Operation:
        pool = self._find(req.name)
        target = req.node_count
        if target < 0:
            raise ValueError("node_count must be >= 0")
        if pool.capacity_limit is not None and target > pool.capacity_limit:
            message = (f"Instance '{pool.mig[:-4]}-new' creation failed: The zone 'projects/{pool.project}/zones/"
                       f"{pool.zone}' does not have enough resources available to fulfill the request. "
                       f"'(resource type:compute)'. ZONE_RESOURCE_POOL_EXHAUSTED")
            pool.status = container_v1.NodePool.Status.RUNNING_WITH_ERROR
            pool.status_message = message
            return self._operation(pool, container_v1.Operation.Type.SET_NODE_POOL_SIZE, (8, message))
        pool.status = container_v1.NodePool.Status.RUNNING
        pool.status_message = ""
        now = self._clock()
        while len(pool.instances) > target:
            pool.instances.pop()
        while len(pool.instances) < target:
            pool.instances.append(self._new_instance(pool, now + self.provisioning_delay_s))
        return self._operation(pool, container_v1.Operation.Type.SET_NODE_POOL_SIZE, None)

    def _set_autoscaling(self, req: container_v1.SetNodePoolAutoscalingRequest) -> container_v1.Operation:
        pool = self._find(req.name)
        pool.autoscaling = container_v1.NodePoolAutoscaling(req.autoscaling)
        return self._operation(pool, container_v1.Operation.Type.SET_NODE_POOL_MANAGEMENT, None)

    def _get_operation(self, req: container_v1.GetOperationRequest) -> container_v1.Operation:
        entry = self._ops.get(req.name)
        if entry is None:
            raise LookupError(f"Not found: operation {req.name!r}.")
        if self._clock() < entry.done_at:
            running = container_v1.Operation(entry.op)
            running.status = container_v1.Operation.Status.RUNNING
            running.error = None
            return running
        return entry.op

    # ------------------------------------------------------------------ Compute REST

    def _pool_of_mig(self, project: str, zone: str, mig: str) -> FakeNodePool:
        for pool in self.pools.values():
            if pool.project == project and pool.zone == zone and pool.mig == mig:
                return pool
        raise web.HTTPNotFound(text='{"error": {"code": 404, "message": "The resource was not found", "status": "NOT_FOUND"}}',
                               content_type="application/json")

    async def _http_mig(self, request: web.Request) -> web.Response:
        fault = self._http_fault("getInstanceGroupManager")
        if fault is not None:
            return fault
        m = request.match_info
        pool = self._pool_of_mig(m["project"], m["zone"], m["mig"])
        now = self._clock()
        creating = sum(1 for i in pool.instances if i.ready_at > now)
        return web.json_response({
            "kind": "compute#instanceGroupManager", "name": pool.mig, "targetSize": len(pool.instances),
            "zone": f"{self.http_url}/compute/v1/projects/{pool.project}/zones/{pool.zone}",
            "currentActions": {"none": len(pool.instances) - creating, "creating": creating, "deleting": 0,
                               "recreating": 0, "restarting": 0, "abandoning": 0, "refreshing": 0, "verifying": 0},
            "status": {"isStable": creating == 0}})

    async def _http_instances(self, request: web.Request) -> web.Response:
        fault = self._http_fault("listManagedInstances")
        if fault is not None:
            return fault
        m = request.match_info
        pool = self._pool_of_mig(m["project"], m["zone"], m["mig"])
        now = self._clock()
        base = f"{self.http_url}/compute/v1/projects/{pool.project}/zones/{pool.zone}/instances"
        size = min(self.page_size, int(request.query.get("maxResults", "500")))
        start = int(request.query.get("pageToken") or 0)
        page = pool.instances[start:start + size]
        body: dict = {"managedInstances": [
            {"instance": f"{base}/{i.name}", "name": i.name, "id": str(abs(hash(i.name)) % 10**18),
             "instanceStatus": "RUNNING" if i.ready_at <= now else "PROVISIONING",
             "currentAction": "NONE" if i.ready_at <= now else "CREATING"} for i in page]}
        if start + size < len(pool.instances):
            body["nextPageToken"] = str(start + size)
        return web.json_response(body)

    async def _http_region(self, request: web.Request) -> web.Response:
        fault = self._http_fault("getRegion")
        if fault is not None:
            return fault
        project, region = request.match_info["project"], request.match_info["region"]
        usage: dict[str, float] = collections.Counter()
        for pool in self.pools.values():
            if pool.project == project and pool.zone.startswith(region):
                usage[quota_metric(pool.accelerator_type, pool.spot)] += len(pool.instances) * pool.accelerator_count
        quotas = [{"metric": metric, "limit": limit, "usage": float(usage.get(metric, 0))}
                  for (p, r, metric), limit in self.quotas.items() if p == project and r == region]
        return web.json_response({"kind": "compute#region", "name": region, "quotas": quotas})

