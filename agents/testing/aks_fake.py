"""The AKS part of the local ARM fake (``arm_fake.ArmFake`` serves it on the same port): the
agent pools of managed clusters, as azure-mgmt-containerservice's ``ContainerServiceClient`` reads
and changes them.

- ``agentPools`` list and GET (vmSize, count, scaleSetPriority, enableAutoScaling/minCount/maxCount,
  mode, provisioningState, status.provisioningError, powerState, eTag);
- PUT: a new ``count`` (and the autoscaler settings) as a long-running operation: 200 with
  ``Azure-AsyncOperation`` on ``Microsoft.ContainerService/locations/{loc}/operations/{id}``, the
  pool ``Scaling`` until it ends; If-Match is checked (412), a second operation while one runs is
  refused (409), a system pool keeps one node, vmSize cannot change; on a shrink AKS's own choice
  is modelled as "the newest machines go";
- ``deleteMachines``: 202 with ``Azure-AsyncOperation`` and ``Location`` (``.../operationresults/{id}``,
  the SDK's final GET), the named machines removed and ``count`` lowered by as many;
- machines: a pool's machines (``aks-<pool>-<hash>-vmss00000a``, the Kubernetes node names, with the
  resourceId of their scale set VM), listed once up (after ``provisioning_delay_s``: the Machines
  API has no per-machine state to show one still being created);
- faults: ``capacity_limit`` (the operation ends Failed with an AKS error whose message carries
  ``AllocationFailed``; the pool is left Failed with that provisioningError), family quotas (a
  synchronous 400 QuotaExceeded, AKS's preflight check), ``stop()`` a pool, ``fail_next``."""

from __future__ import annotations

import dataclasses
import zlib
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from agents.testing import arm_fake

API = "/subscriptions/{sub}"
CLUSTER = API + "/resourceGroups/{rg}/providers/Microsoft.ContainerService/managedClusters/{cluster}"
POOL = CLUSTER + "/agentPools/{pool}"
OPERATIONS = API + "/providers/Microsoft.ContainerService/locations/{loc}"
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _base36(n: int) -> str:
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = _DIGITS[r] + out
        if n == 0:
            return out


@dataclasses.dataclass
class _Machine:
    instance_id: int
    ready_at: float


@dataclasses.dataclass
class FakeAgentPool:
    subscription: str
    resource_group: str
    cluster: str
    name: str
    location: str
    vm_size: str
    spot: bool
    zones: list[str]
    machines: list[_Machine]
    count: int = 0
    mode: str = "User"
    autoscaling: bool = False
    min_count: int | None = None
    max_count: int | None = None
    capacity_limit: int | None = None
    provisioning_state: str = "Succeeded"
    provisioning_error: dict | None = None
    power_state: str = "Running"
    etag: int = 1
    serial: int = 0
    busy: bool = False  # an operation is running
    op_id: str | None = None  # the last operation
    puts: list[dict] = dataclasses.field(default_factory=list)  # accepted PUT bodies' properties, in order
    if_match: list[str | None] = dataclasses.field(default_factory=list)  # their If-Match headers
    deleted: list[str] = dataclasses.field(default_factory=list)  # machines removed by deleteMachines

    @property
    def scale_set(self) -> str:
        digest = zlib.crc32(f"{self.cluster}/{self.name}".encode()) % 10**8
        return f"aks-{self.name}-{digest:08d}-vmss"

    @property
    def node_resource_group(self) -> str:
        return f"MC_{self.resource_group}_{self.cluster}_{self.location}"

    def machine_name(self, m: _Machine) -> str:
        return f"{self.scale_set}{_base36(m.instance_id):0>6}"

    def vm_id(self, m: _Machine) -> str:
        return (f"/subscriptions/{self.subscription}/resourceGroups/{self.node_resource_group}/providers/"
                f"Microsoft.Compute/virtualMachineScaleSets/{self.scale_set}/virtualMachines/{m.instance_id}")

    def vm_name(self, machine_name: str) -> str:
        """The Scheduled Events name of a machine's VM: ``<scale set>_<instance id>``."""
        m = next(m for m in self.machines if self.machine_name(m) == machine_name)
        return f"{self.scale_set}_{m.instance_id}"

    def ready(self, now: float) -> list[str]:
        return [self.machine_name(m) for m in self.machines if m.ready_at <= now]


class AgentPools:
    """Agent pools of the fake's managed clusters, with their routes."""

    def __init__(self, fake: arm_fake.ArmFake):
        self._fake = fake
        self.pools: dict[tuple[str, str, str, str], FakeAgentPool] = {}

    def add(self, *, subscription: str, resource_group: str, cluster: str, name: str, location: str, vm_size: str,
            count: int = 0, spot: bool = False, zones: list[str] | None = None, mode: str = "User",
            autoscaling: bool = False, min_count: int | None = None, max_count: int | None = None,
            capacity_limit: int | None = None) -> FakeAgentPool:
        pool = FakeAgentPool(subscription, resource_group, cluster, name, location, vm_size, spot,
                             list(zones or ["1"]), [], count, mode, autoscaling, min_count, max_count, capacity_limit)
        self._grow(pool, count, self._fake.now())
        self.pools[(subscription, resource_group.lower(), cluster.lower(), name)] = pool
        return pool

    def stop(self, pool: FakeAgentPool) -> None:
        """As ``az aks nodepool stop``: no machines, powerState Stopped."""
        pool.machines.clear()
        pool.power_state = "Stopped"

    def family_vcpus_used(self, subscription: str, location: str, family: str) -> int:
        return sum(self._fake.vcpus(p.vm_size, p.location) * p.count for p in self.pools.values()
                   if p.subscription == subscription and p.location == location and self._family(p) == family)

    def _family(self, pool: FakeAgentPool) -> str:
        return ("lowPriorityCores" if pool.spot else self._fake.family_of(pool.vm_size)).lower()

    def _grow(self, pool: FakeAgentPool, count: int, ready_at: float) -> None:
        while len(pool.machines) < count:
            pool.machines.append(_Machine(pool.serial, ready_at))
            pool.serial += 1

    # ------------------------------------------------------------------ routes

    def add_routes(self, app: web.Application) -> None:
        f = self._fake
        app.router.add_get(CLUSTER + "/agentPools", f.op("list_agent_pools", self._list))
        app.router.add_get(POOL, f.op("get_agent_pool", self._get))
        app.router.add_put(POOL, f.op("put_agent_pool", self._put))
        app.router.add_post(POOL + "/deleteMachines", f.op("delete_machines", self._delete_machines))
        app.router.add_get(POOL + "/machines", f.op("list_machines", self._list_machines))
        app.router.add_get(OPERATIONS + "/operations/{op}", f.op("get_aks_operation", self._operation))
        app.router.add_get(OPERATIONS + "/operationresults/{op}", f.op("get_aks_operation_result", self._result))

    def _find(self, request: web.Request) -> FakeAgentPool | None:
        m = request.match_info
        pool = self.pools.get((m["sub"], m["rg"].lower(), m["cluster"].lower(), m["pool"]))
        return None if pool is None else self._settle(pool)

    def _not_found(self, request: web.Request) -> web.Response:
        m = request.match_info
        return self._fake.error(404, "NotFound", f"The agent pool '{m['pool']}' of managed cluster '{m['cluster']}' "
                                                 f"in resource group '{m['rg']}' was not found.")

    def _json(self, pool: FakeAgentPool) -> dict:
        props: dict = {
            "eTag": str(pool.etag), "count": pool.count, "vmSize": pool.vm_size, "osDiskSizeGB": 256,
            "osDiskType": "Managed", "osType": "Linux", "maxPods": 50, "type": "VirtualMachineScaleSets",
            "mode": pool.mode, "enableAutoScaling": pool.autoscaling, "availabilityZones": pool.zones,
            "provisioningState": pool.provisioning_state, "powerState": {"code": pool.power_state},
            "orchestratorVersion": "1.31.2", "currentOrchestratorVersion": "1.31.2",
            "nodeImageVersion": "AKSUbuntu-2204gen2containerd-202611.01.0",
            "scaleSetPriority": "Spot" if pool.spot else "Regular",
            "nodeLabels": {"meridian.dev/pool": pool.name}, "nodeTaints": ["nvidia.com/gpu=present:NoSchedule"],
        }
        if pool.spot:
            props.update(scaleSetEvictionPolicy="Delete", spotMaxPrice=-1)
        if pool.min_count is not None:
            props["minCount"] = pool.min_count
        if pool.max_count is not None:
            props["maxCount"] = pool.max_count
        if pool.provisioning_error is not None:
            props["status"] = {"provisioningError": pool.provisioning_error}
        rid = (f"/subscriptions/{pool.subscription}/resourcegroups/{pool.resource_group}/providers/"
               f"Microsoft.ContainerService/managedClusters/{pool.cluster}/agentPools/{pool.name}")
        return {"id": rid, "name": pool.name, "type": "Microsoft.ContainerService/managedClusters/agentPools",
                "properties": props}

    def _operation_url(self, pool: FakeAgentPool, kind: str, op_id: str, request: web.Request) -> str:
        return (f"{self._fake.url}/subscriptions/{pool.subscription}/providers/Microsoft.ContainerService/locations/"
                f"{pool.location}/{kind}/{op_id}?api-version={request.query.get('api-version', '')}")

    def _start(self, pool: FakeAgentPool, error: dict | None = None) -> str:
        pool.busy, pool.etag = True, pool.etag + 1
        pool.provisioning_state, pool.provisioning_error = "Scaling", None

        def settle(op: arm_fake._Op) -> None:
            pool.busy = False
            pool.provisioning_state = "Failed" if op.error else "Succeeded"
            pool.provisioning_error = op.error

        pool.op_id = self._fake.new_operation(error, settle)
        return pool.op_id

    def _settle(self, pool: FakeAgentPool) -> FakeAgentPool:
        """End the pool's operation if its time has come (as AKS does whether or not anyone polls)."""
        op = self._fake.operation(pool.op_id) if pool.op_id else None
        if op is not None:
            op.done(self._fake.now())
        return pool

    async def _list(self, request: web.Request) -> web.Response:
        m = request.match_info
        return web.json_response({"value": [
            self._json(self._settle(p)) for (sub, rg, cluster, _), p in sorted(self.pools.items())
            if sub == m["sub"] and rg == m["rg"].lower() and cluster == m["cluster"].lower()]})

    async def _get(self, request: web.Request) -> web.Response:
        pool = self._find(request)
        return self._not_found(request) if pool is None else web.json_response(self._json(pool))

    def _refusal(self, request: web.Request, pool: FakeAgentPool) -> web.Response | None:
        if_match = request.headers.get("If-Match")
        if if_match is not None and if_match.strip('"') != str(pool.etag):
            return self._fake.error(412, "PreconditionFailed", f"the agent pool's eTag is {pool.etag}, not {if_match}")
        if pool.busy:
            return self._fake.error(409, "OperationNotAllowed", "Operation is not allowed because there's an in "
                                                                "progress scale node pool operation.")
        if pool.power_state == "Stopped":
            return self._fake.error(400, "OperationNotAllowed", f"agent pool {pool.name} is stopped")
        return None

    async def _put(self, request: web.Request) -> web.Response:
        pool = self._find(request)
        if pool is None:
            return self._not_found(request)
        refused = self._refusal(request, pool)
        if refused is not None:
            return refused
        props = (await request.json()).get("properties") or {}
        count = props.get("count")
        if not isinstance(count, int) or not 0 <= count <= 1000:
            return self._fake.error(400, "InvalidParameter", "properties.count must be an integer in [0, 1000]")
        if pool.mode == "System" and count < 1:
            return self._fake.error(400, "InvalidParameter", "a system agent pool needs at least one node")
        if props.get("vmSize", pool.vm_size) != pool.vm_size:
            return self._fake.error(400, "PropertyChangeNotAllowed", "Changing property 'vmSize' is not allowed.")
        if props.get("enableAutoScaling") and (props.get("minCount") is None or props.get("maxCount") is None):
            return self._fake.error(400, "InvalidParameter", "minCount and maxCount are required with autoscaling")
        quota = self._quota_refusal(pool, count)
        if quota is not None:
            return quota
        pool.puts.append(props)
        pool.if_match.append(request.headers.get("If-Match"))
        pool.autoscaling = bool(props.get("enableAutoScaling"))
        pool.min_count, pool.max_count = props.get("minCount"), props.get("maxCount")
        error = None
        if pool.capacity_limit is not None and count > pool.capacity_limit:
            error = {"code": "ReconcileVMSSAgentPoolFailed", "message": (
                'Code="AllocationFailed" Message="Allocation failed. We do not have sufficient capacity for the '
                'requested VM size in this region. Read more about improving likelihood of allocation success at '
                'http://aka.ms/allocation-guidance"')}
        else:
            now = self._fake.now()
            del pool.machines[count:]  # AKS's choice on a plain count change, as modelled here: the newest go
            self._grow(pool, count, now + self._fake.provisioning_delay_s)
            pool.count = count
        op_id = self._start(pool, error)
        return web.json_response(self._json(pool),
                                 headers={"Azure-AsyncOperation": self._operation_url(pool, "operations", op_id, request)})

    def _quota_refusal(self, pool: FakeAgentPool, count: int) -> web.Response | None:
        family = self._family(pool)
        limit = self._fake.quota_of(pool.subscription, pool.location, family)
        if limit is None or count <= pool.count:
            return None
        used = self.family_vcpus_used(pool.subscription, pool.location, family)
        needed = (count - pool.count) * self._fake.vcpus(pool.vm_size, pool.location)
        if used + needed <= limit:
            return None
        return self._fake.error(400, "QuotaExceeded", (
            f"Preflight validation check for resource(s) for container service {pool.cluster} in resource group "
            f"{pool.node_resource_group} failed. Message: Operation could not be completed as it results in "
            f"exceeding approved {family} Cores quota. Additional details - Deployment Model: Resource Manager, "
            f"Location: {pool.location}, Current Limit: {limit}, Current Usage: {used}, Additional Required: {needed}, "
            f"(Minimum) New Limit Required: {used + needed}."))

    async def _delete_machines(self, request: web.Request) -> web.Response:
        pool = self._find(request)
        if pool is None:
            return self._not_found(request)
        refused = self._refusal(request, pool)
        if refused is not None:
            return refused
        names = (await request.json()).get("machineNames") or []
        by_name = {pool.machine_name(m): m for m in pool.machines}
        unknown = [n for n in names if n not in by_name]
        if not names or unknown:
            return self._fake.error(400, "InvalidParameter", f"machines not in agent pool {pool.name}: {unknown or names}")
        if pool.mode == "System" and len(names) >= pool.count:
            return self._fake.error(400, "InvalidParameter", "a system agent pool needs at least one node")
        for n in names:
            pool.machines.remove(by_name[n])
        pool.count -= len(names)
        pool.deleted.extend(names)
        op_id = self._start(pool)
        return web.Response(status=202, headers={
            "Azure-AsyncOperation": self._operation_url(pool, "operations", op_id, request),
            "Location": self._operation_url(pool, "operationresults", op_id, request)})

    async def _list_machines(self, request: web.Request) -> web.Response:
        pool = self._find(request)
        if pool is None:
            return self._not_found(request)
        now = self._fake.now()
        base = self._json(pool)["id"]
        return web.json_response({"value": [
            {"id": f"{base}/machines/{pool.machine_name(m)}", "name": pool.machine_name(m),
             "type": "Microsoft.ContainerService/managedClusters/agentPools/machines", "zones": pool.zones[:1],
             "properties": {"resourceId": pool.vm_id(m),
                            "network": {"ipAddresses": [{"ip": f"10.224.{m.instance_id // 250}.{m.instance_id % 250 + 4}",
                                                         "family": "IPv4"}]}}}
            for m in pool.machines if m.ready_at <= now]})

    async def _operation(self, request: web.Request) -> web.Response:
        op_id = request.match_info["op"]
        op = self._fake.operation(op_id)
        if op is None:
            return self._fake.error(404, "NotFound", "operation not found")
        body: dict = {"id": request.path, "name": op_id, "status": "InProgress"}
        if op.done(self._fake.now()):
            body["status"] = "Failed" if op.error else "Succeeded"
            if op.error:
                body["error"] = op.error
        return web.json_response(body)

    async def _result(self, request: web.Request) -> web.Response:
        op = self._fake.operation(request.match_info["op"])
        if op is None:
            return self._fake.error(404, "NotFound", "operation not found")
        return web.Response(status=204 if op.done(self._fake.now()) else 202)
