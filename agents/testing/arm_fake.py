"""A local fake of the Azure Resource Manager endpoints the azure and aks providers use, for the
real ``ComputeManagementClient`` and ``ContainerServiceClient`` (``base_url`` pointed here, no-op
authentication policy):

- virtual machine scale sets: GET, PATCH of ``sku.capacity`` as a long-running operation (200 +
  ``Azure-AsyncOperation``, then InProgress -> Succeeded/Failed), and their VMs (new VMs come up
  after ``provisioning_delay_s``);
- ``resource_skus.list`` (GPUs and vCPUs per VM size, family), ``usage.list`` (vCPU quotas per
  family, case-insensitive names as Azure has them);
- AKS agent pools (``agents.testing.aks_fake``, on the same server): list, GET, PUT of ``count``
  (and the autoscaler settings) with If-Match, ``deleteMachines``, the pools' machines, and AKS's
  long-running operations (``Microsoft.ContainerService/locations/{loc}/operations/{id}`` and
  ``.../operationresults/{id}``);
- faults: a capacity limit per scale set or agent pool (the operation ends Failed with
  AllocationFailed, as a zone without capacity does), family quotas (a synchronous 409
  OperationNotAllowed for scale sets, 400 QuotaExceeded for agent pools, as each API answers), and
  any injected error answer (``fail_next``: 429 throttling, 401 auth ...)."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import time
from collections.abc import Callable

from aiohttp import web

from meridian import catalog

from agents.testing import aks_fake

API = "/subscriptions/{sub}"
VMSS = API + "/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"
# VM size -> quota family, as Azure names them (usage.list answers these names).
FAMILIES = {
    "Standard_NV36ads_A10_v5": "StandardNVADSA10v5Family",
    "Standard_NC24ads_A100_v4": "standardNCADSA100v4Family",
    "Standard_NC96ads_A100_v4": "standardNCADSA100v4Family",
    "Standard_NC40ads_H100_v5": "standardNCadsH100v5Family",
    "Standard_ND96amsr_A100_v4": "standardNDAMSv4_A100Family",
    "Standard_ND96isr_H100_v5": "standardNDSH100v5Family",
    "Standard_ND96isr_H200_v5": "standardNDSH200v5Family",
}


@dataclasses.dataclass
class _Vm:
    instance_id: int
    ready_at: float


@dataclasses.dataclass
class FakeScaleSet:
    subscription: str
    resource_group: str
    name: str
    location: str
    sku: str
    spot: bool
    zones: list[str]
    vms: list[_Vm]
    capacity_limit: int | None = None
    serial: int = 0
    provisioning_state: str = "Succeeded"

    @property
    def capacity(self) -> int:
        return len(self.vms)


@dataclasses.dataclass
class _Op:
    done_at: float
    error: dict | None
    on_done: Callable[[_Op], None] | None = None  # settles the resource the operation changes
    settled: bool = False

    def done(self, now: float) -> bool:
        if now < self.done_at:
            return False
        if not self.settled:
            self.settled = True
            if self.on_done is not None:
                self.on_done(self)
        return True


class ArmFake:
    def __init__(self, *, host: str = "127.0.0.1", provisioning_delay_s: float = 0.0,
                 operation_delay_s: float = 0.2, clock: Callable[[], float] = time.time):
        self.host = host
        self.provisioning_delay_s = provisioning_delay_s
        self.operation_delay_s = operation_delay_s
        self._clock = clock
        self.scale_sets: dict[tuple[str, str, str], FakeScaleSet] = {}
        self.quotas: dict[tuple[str, str, str], int] = {}  # (subscription, location, family lower) -> vCPU limit
        self.agent_pools = aks_fake.AgentPools(self)
        self._ops: dict[str, _Op] = {}
        self._op_ids = itertools.count(1)
        self._faults: dict[str, collections.deque[tuple[int, str, str]]] = collections.defaultdict(collections.deque)
        self.calls: collections.Counter[str] = collections.Counter()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # ------------------------------------------------------------------ setup

    def add_scale_set(self, *, subscription: str, resource_group: str, name: str, location: str, sku: str,
                      capacity: int = 0, spot: bool = False, zones: list[str] | None = None,
                      capacity_limit: int | None = None) -> FakeScaleSet:
        ss = FakeScaleSet(subscription, resource_group, name, location, sku, spot, list(zones or ["1"]), [],
                          capacity_limit)
        now = self._clock()
        for _ in range(capacity):
            ss.vms.append(self._new_vm(ss, now))
        self.scale_sets[(subscription, resource_group.lower(), name.lower())] = ss
        return ss

    def set_quota(self, subscription: str, location: str, family: str, vcpus: int) -> None:
        self.quotas[(subscription, location, family.lower())] = vcpus

    def fail_next(self, operation: str, status: int, code: str, message: str, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``operation`` (get_vmss, update_vmss, list_vms,
        list_skus, list_usages, get_operation; for agent pools: list_agent_pools, get_agent_pool,
        put_agent_pool, delete_machines, list_machines, get_aks_operation) with an ARM error."""
        self._faults[operation].extend([(status, code, message)] * times)

    def _new_vm(self, ss: FakeScaleSet, ready_at: float) -> _Vm:
        vm = _Vm(ss.serial, ready_at)
        ss.serial += 1
        return vm

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get(VMSS, self._op("get_vmss", self._get_vmss))
        app.router.add_patch(VMSS, self._op("update_vmss", self._patch_vmss))
        app.router.add_get(VMSS + "/virtualMachines", self._op("list_vms", self._list_vms))
        app.router.add_get(API + "/providers/Microsoft.Compute/skus", self._op("list_skus", self._list_skus))
        app.router.add_get(API + "/providers/Microsoft.Compute/locations/{loc}/usages",
                           self._op("list_usages", self._list_usages))
        app.router.add_get(API + "/providers/Microsoft.Compute/locations/{loc}/operations/{op}",
                           self._op("get_operation", self._get_operation))
        self.agent_pools.add_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------------ handlers

    def new_operation(self, error: dict | None = None, on_done: Callable[[_Op], None] | None = None) -> str:
        """A long-running operation that ends after ``operation_delay_s`` (Failed with ``error``)."""
        op_id = f"op-{next(self._op_ids)}"
        self._ops[op_id] = _Op(self._clock() + self.operation_delay_s, error, on_done)
        return op_id

    def operation(self, op_id: str) -> _Op | None:
        return self._ops.get(op_id)

    def now(self) -> float:
        return self._clock()

    def vcpus(self, sku: str, location: str) -> int:
        return self._vcpus(sku, location)

    def family_vcpus_used(self, subscription: str, location: str, family: str) -> int:
        """vCPUs of ``family`` (lower case; spot: lowpriorityCores) in use, over scale sets and agent pools."""
        used = sum(self._vcpus(o.sku, o.location) * o.capacity for o in self.scale_sets.values()
                   if o.subscription == subscription and o.location == location and
                   ("lowPriorityCores" if o.spot else FAMILIES.get(o.sku, o.sku)).lower() == family)
        return used + self.agent_pools.family_vcpus_used(subscription, location, family)

    @staticmethod
    def family_of(sku: str) -> str:
        return FAMILIES.get(sku, sku)

    def quota_of(self, subscription: str, location: str, family: str) -> int | None:
        return self.quotas.get((subscription, location, family.lower()))

    @staticmethod
    def error(status: int, code: str, message: str) -> web.Response:
        return ArmFake._error(status, code, message)

    def op(self, name: str, fn):
        return self._op(name, fn)

    @staticmethod
    def _error(status: int, code: str, message: str) -> web.Response:
        return web.json_response({"error": {"code": code, "message": message}}, status=status,
                                 headers={"x-ms-error-code": code})

    def _op(self, name: str, fn):
        async def handler(request: web.Request) -> web.Response:
            self.calls[name] += 1
            if self._faults[name]:
                status, code, message = self._faults[name].popleft()
                return self._error(status, code, message)
            return await fn(request)

        return handler

    def _find(self, request: web.Request) -> FakeScaleSet | None:
        m = request.match_info
        return self.scale_sets.get((m["sub"], m["rg"].lower(), m["name"].lower()))

    def _vmss_json(self, ss: FakeScaleSet) -> dict:
        rid = (f"/subscriptions/{ss.subscription}/resourceGroups/{ss.resource_group}/providers/"
               f"Microsoft.Compute/virtualMachineScaleSets/{ss.name}")
        profile: dict = {"osProfile": {"computerNamePrefix": ss.name}}
        if ss.spot:
            profile.update(priority="Spot", evictionPolicy="Delete", billingProfile={"maxPrice": -1})
        else:
            profile.update(priority="Regular")
        return {"id": rid, "name": ss.name, "type": "Microsoft.Compute/virtualMachineScaleSets", "location": ss.location,
                "sku": {"name": ss.sku, "tier": "Standard", "capacity": ss.capacity}, "zones": ss.zones,
                "properties": {"provisioningState": ss.provisioning_state, "upgradePolicy": {"mode": "Manual"},
                               "virtualMachineProfile": profile, "uniqueId": f"fake-{ss.name}"}}

    def _not_found(self, request: web.Request) -> web.Response:
        return self._error(404, "ResourceNotFound", f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/"
                                                    f"{request.match_info['name']}' under resource group "
                                                    f"'{request.match_info['rg']}' was not found.")

    async def _get_vmss(self, request: web.Request) -> web.Response:
        ss = self._find(request)
        if ss is None:
            return self._not_found(request)
        self._settle(ss)
        return web.json_response(self._vmss_json(ss))

    def _settle(self, ss: FakeScaleSet) -> None:
        if ss.provisioning_state == "Updating" and all(v.ready_at <= self._clock() for v in ss.vms):
            ss.provisioning_state = "Succeeded"

    def _vcpus(self, sku: str, location: str) -> int:
        offer = catalog.instances.default().lookup("azure", sku, location)
        return offer.vcpus if offer else 0

    async def _patch_vmss(self, request: web.Request) -> web.Response:
        ss = self._find(request)
        if ss is None:
            return self._not_found(request)
        body = await request.json()
        capacity = (body.get("sku") or {}).get("capacity")
        if capacity is None or not isinstance(capacity, int) or capacity < 0:
            return self._error(400, "InvalidParameter", "sku.capacity must be a non-negative integer")
        family = FAMILIES.get(ss.sku, ss.sku)
        quota_key = (ss.subscription, ss.location, ("lowPriorityCores" if ss.spot else family).lower())
        if quota_key in self.quotas and capacity > ss.capacity:
            per_vm = self._vcpus(ss.sku, ss.location)
            used = self.family_vcpus_used(ss.subscription, ss.location, quota_key[2])
            needed = (capacity - ss.capacity) * per_vm
            if used + needed > self.quotas[quota_key]:
                return self._error(409, "OperationNotAllowed", (
                    f"Operation could not be completed as it results in exceeding approved {family} Cores quota. "
                    f"Additional details - Deployment Model: Resource Manager, Location: {ss.location}, Current Limit: "
                    f"{self.quotas[quota_key]}, Current Usage: {used}, Additional Required: {needed}, (Minimum) New "
                    f"Limit Required: {used + needed}."))
        error = None
        if ss.capacity_limit is not None and capacity > ss.capacity_limit:
            error = {"code": "AllocationFailed", "message": (
                "Allocation failed. We do not have sufficient capacity for the requested VM size in this region. "
                "Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance")}
        else:
            now = self._clock()
            while len(ss.vms) > capacity:
                ss.vms.pop()
            while len(ss.vms) < capacity:
                ss.vms.append(self._new_vm(ss, now + self.provisioning_delay_s))
            ss.provisioning_state = "Updating"
        op_id = self.new_operation(error)
        poll = (f"{self.url}/subscriptions/{ss.subscription}/providers/Microsoft.Compute/locations/{ss.location}/"
                f"operations/{op_id}?api-version={request.query.get('api-version', '')}")
        body = self._vmss_json(ss)
        body["properties"]["provisioningState"] = "Updating"
        return web.json_response(body, headers={"Azure-AsyncOperation": poll})

    async def _get_operation(self, request: web.Request) -> web.Response:
        op = self._ops.get(request.match_info["op"])
        if op is None:
            return self._error(404, "NotFound", "operation not found")
        if not op.done(self._clock()):
            return web.json_response({"name": request.match_info["op"], "status": "InProgress"})
        if op.error is not None:
            return web.json_response({"name": request.match_info["op"], "status": "Failed", "error": op.error})
        return web.json_response({"name": request.match_info["op"], "status": "Succeeded"})

    async def _list_vms(self, request: web.Request) -> web.Response:
        ss = self._find(request)
        if ss is None:
            return self._not_found(request)
        now = self._clock()
        return web.json_response({"value": [
            {"name": f"{ss.name}_{vm.instance_id}", "instanceId": str(vm.instance_id), "location": ss.location,
             "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
             "sku": {"name": ss.sku, "tier": "Standard"},
             "properties": {"provisioningState": "Succeeded" if vm.ready_at <= now else "Creating",
                            "latestModelApplied": True}} for vm in ss.vms]})

    async def _list_skus(self, request: web.Request) -> web.Response:
        flt = request.query.get("$filter", "")
        location = flt.split("'")[1] if "'" in flt else None
        out = []
        for offer in catalog.instances.default().offers:
            if offer.cloud != "azure" or (location and offer.region != location):
                continue
            out.append({"resourceType": "virtualMachines", "name": offer.instance_type, "tier": "Standard",
                        "size": offer.instance_type.removeprefix("Standard_"),
                        "family": FAMILIES.get(offer.instance_type, ""),
                        "locations": [offer.region], "restrictions": [],
                        "locationInfo": [{"location": offer.region, "zones": ["1", "2", "3"]}],
                        "capabilities": [{"name": "vCPUs", "value": str(offer.vcpus)},
                                         {"name": "GPUs", "value": str(offer.gpu_count)},
                                         {"name": "MemoryGB", "value": str(offer.memory_gib)},
                                         {"name": "LowPriorityCapable", "value": "True"}]})
        return web.json_response({"value": out})

    async def _list_usages(self, request: web.Request) -> web.Response:
        sub, loc = request.match_info["sub"], request.match_info["loc"]
        return web.json_response({"value": [
            {"unit": "Count", "currentValue": self.family_vcpus_used(sub, loc, family), "limit": limit,
             "name": {"value": family, "localizedValue": family}}
            for (s, l, family), limit in self.quotas.items() if s == sub and l == loc]})
