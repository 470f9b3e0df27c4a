"""AKS: GPU pools are agent pools of one managed cluster, read and sized through
azure-mgmt-containerservice's ``ContainerServiceClient``. AKS owns its node pools' scale sets and
does not support changes made to them directly (it may undo them, and they break upgrades), so this
provider never touches a scale set: the ``azure`` provider is for plain, non-AKS scale sets.

- Discovery: ``agent_pools.list`` (vmSize, count, scaleSetPriority, enableAutoScaling with
  minCount/maxCount, mode, provisioningState and status.provisioningError, powerState) and, per
  declared pool, ``machines.list``: a pool's machines are its nodes, named as their Kubernetes
  nodes are (``aks-<pool>-<hash>-vmss000000``). GPUs, vCPUs and the quota family per VM size from
  ``resource_skus.list``, quotas from ``usage.list`` (``azure.ComputeReads``); GPU type and prices
  from the catalog. Pending nodes: ``count`` minus the machines listed.
- Resize: ``agent_pools.begin_create_or_update`` of the pool as just read, with the new ``count``
  and the cluster autoscaler off (Meridian owns the size; minCount/maxCount cleared), sent with
  If-Match on the pool's eTag so that a concurrent change is not overwritten. A shrink removes
  chosen machines with ``agent_pools.begin_delete_machines`` (AKS lowers ``count`` by as many):
  machines not hosting replicas, newest first; nodes in ``keep_nodes`` are never named. Only when
  too few machines are listed (nodes still being created) is the rest left to a plain ``count``
  change, where AKS picks the nodes to remove. Every operation is awaited through azure-core's ARM
  polling (``Microsoft.ContainerService/locations/{loc}/operations/{id}``).
- Problems: provisioningState Failed with its provisioningError -> classified as any ARM error
  (``AllocationFailed`` inside an AKS error: insufficient capacity, so the pool is STOCKED_OUT
  until a resize succeeds); powerState Stopped -> the pool is reported ERROR and not resized.
- Spot: scaleSetPriority Spot -> tier spot, quota family ``lowPriorityCores``; eviction notices from
  Scheduled Events ``Preempt`` (VM names ``<scale set>_<instance id>``, mapped to machine names
  through each machine's resourceId).

Every SDK call runs in a worker thread."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import azure.core
from azure.mgmt.compute import ComputeManagementClient
from azure.mgmt.containerservice import ContainerServiceClient
from azure.mgmt.containerservice import models as aks_models

from meridian import spec
from meridian.fleet import models
from meridian.spec import cluster as cluster_spec

from agents import providers
from agents.providers import azure as azure_provider
from agents.providers import base, common, notices
from agents.providers.errors import CloudError, CloudErrorKind

log = logging.getLogger("meridian.agent.aks")

# Agent pool provisioning states in which an operation is under way (AKS answers 409 to another).
_BUSY_STATES = {"Creating", "Updating", "Scaling", "Upgrading", "Deleting", "Starting", "Stopping", "Canceling"}


class AksProvider(base.Provider):
    name = "aks"

    def __init__(self, cluster: spec.Cluster, *, clock: Callable[[], float], aks: ContainerServiceClient,
                 compute: ComputeManagementClient, metadata_url: str | None):
        account = cluster.spec.azure
        if account is None or account.aks_cluster is None:
            raise ValueError("spec.azure: the aks provider needs azure.subscription_id, azure.resource_group "
                             "and azure.aks_cluster")
        self._rg = account.resource_group
        self._cluster = account.aks_cluster
        self._region = cluster.spec.region
        self._zone = cluster.spec.zone or ""
        self._decls = {p.name: p for p in cluster.spec.pools}
        self._aks = aks
        self._compute = compute
        self._reads = azure_provider.ComputeReads(compute, self._region,
                                                  {d.instance_type for d in self._decls.values()}, clock)
        self._problems: dict[str, CloudError] = {}  # pool -> capacity/quota failure of its last resize
        self._node_pool_of: dict[str, str] = {}  # machine name -> pool id
        self._machine_of_vm: dict[str, str] = {}  # "<scale set>_<instance id>" -> machine name
        self._watcher = notices.MetadataWatcher("azure", metadata_url, clock=clock) if metadata_url else None

    def _call(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise azure_provider.classify(exc, operation) from exc

    # ------------------------------------------------------------------ discovery

    async def discover(self) -> list[base.PoolStatus]:
        return await asyncio.to_thread(self._discover)

    def _discover(self) -> list[base.PoolStatus]:
        self._reads.refresh()
        found = {p.name: p for p in self._call("agent_pools.list", lambda: list(
            self._aks.agent_pools.list(self._rg, self._cluster)))}
        return [self._pool_status(decl, found.get(common.pool_resource(decl))) for decl in self._decls.values()]

    def _missing(self, decl: cluster_spec.PoolDecl, message: str, kind: CloudErrorKind) -> base.PoolStatus:
        offer = common.offer("azure", decl.instance_type, self._region)
        pool = common.build_pool(
            decl, gpu_type=offer.gpu_type if offer else "unknown", gpus_per_node=offer.gpu_count if offer else 0,
            gpu_memory_gib=offer.gpu_memory_gib if offer else 0, nodes_current=0, nodes_pending=0,
            price_per_node_hour_usd=common.catalog_price("azure", decl.instance_type, self._region, decl.tier),
            quota_headroom_gpus=0, zone=decl.zone or self._zone, state=models.ProvisioningState.ERROR)
        return base.PoolStatus(pool, (), CloudError(kind, message, pool_id=decl.name, operation="discover"))

    def _pool_status(self, decl: cluster_spec.PoolDecl, ap: aks_models.AgentPool | None) -> base.PoolStatus:
        name = common.pool_resource(decl)
        if ap is None:
            return self._missing(decl, f"no agent pool {name!r} in AKS cluster {self._cluster!r} "
                                       f"(resource group {self._rg!r})", CloudErrorKind.NOT_FOUND)
        size = ap.vm_size or decl.instance_type
        offer = common.offer("azure", size, self._region)
        gpu_type = offer.gpu_type if offer else "unknown"
        caps = self._reads.caps(size)
        gpus_per_node = int(caps.get("GPUs") or (offer.gpu_count if offer else 0))
        if gpus_per_node == 0:
            return self._missing(decl, f"agent pool {name!r} runs {size}, which has no GPU",
                                 CloudErrorKind.INVALID_REQUEST)
        vcpus = int(caps.get("vCPUs") or (offer.vcpus if offer else 0))
        machines = self._machines(decl.name, name)
        target = int(ap.count or 0)
        pending = max(0, target - len(machines))
        spot = (ap.scale_set_priority or "").lower() == "spot"
        lo = 1 if (ap.mode or "") == "System" else 0  # AKS keeps at least one node in a system pool
        hi = None
        if ap.enable_auto_scaling:  # until Meridian's first resize turns the cluster autoscaler off
            lo, hi = max(lo, int(ap.min_count or 0)), int(ap.max_count if ap.max_count is not None else decl.max_nodes)
        problem = self._cloud_problem(decl, ap) or self._problems.get(decl.name)
        stocked = problem is not None and problem.kind == CloudErrorKind.INSUFFICIENT_CAPACITY
        state = common.provisioning_state(len(machines), pending, target, stocked)
        if problem is not None and not stocked and problem.kind != CloudErrorKind.QUOTA_EXCEEDED:
            state = models.ProvisioningState.ERROR
        zones = list(ap.availability_zones or [])
        pool = common.build_pool(
            decl, gpu_type=gpu_type, gpus_per_node=gpus_per_node,
            gpu_memory_gib=common.gpu_memory_gib(gpu_type, offer.gpu_memory_gib if offer else 0),
            nodes_current=len(machines), nodes_pending=pending,
            price_per_node_hour_usd=common.catalog_price("azure", size, self._region, "spot" if spot else decl.tier),
            quota_headroom_gpus=self._reads.headroom_gpus(size, spot=spot, nodes_left=decl.max_nodes - target,
                                                          gpus_per_node=gpus_per_node, vcpus=vcpus),
            zone=decl.zone or (zones[0] if zones else self._zone), state=state, nodes_min=lo, nodes_max=hi,
            tier="spot" if spot else decl.tier)
        return base.PoolStatus(pool, tuple(machines), problem)

    def _machines(self, pool_id: str, agent_pool: str) -> list[str]:
        """The pool's machine names, sorted (oldest first: AKS numbers them in creation order)."""
        listed = self._call("machines.list", lambda: list(self._aks.machines.list(self._rg, self._cluster, agent_pool)))
        names = []
        for m in listed:
            names.append(m.name)
            self._node_pool_of[m.name] = pool_id
            rid = (m.properties.resource_id if m.properties else None) or ""
            parts = rid.split("/")
            if len(parts) >= 3 and parts[-2].lower() == "virtualmachines":  # .../virtualMachineScaleSets/S/virtualMachines/N
                self._machine_of_vm[f"{parts[-3]}_{parts[-1]}"] = m.name
        return sorted(names)

    def _cloud_problem(self, decl: cluster_spec.PoolDecl, ap: aks_models.AgentPool) -> CloudError | None:
        """What AKS itself reports wrong with the pool: a stopped pool, or the error of a failed operation."""
        name = common.pool_resource(decl)
        power = ap.power_state.code if ap.power_state is not None else None
        if power == "Stopped":
            return CloudError(CloudErrorKind.INVALID_REQUEST, f"agent pool {name!r} is stopped (az aks nodepool "
                              "start starts it); Meridian does not resize a stopped pool", code="Stopped",
                              pool_id=decl.name, operation="discover")
        if ap.provisioning_state == "Failed":
            detail = ap.status.provisioning_error if ap.status is not None else None
            code = (detail.code if detail is not None else None) or "Failed"
            message = (detail.message if detail is not None else None) or f"agent pool {name!r}: last operation failed"
            return CloudError(azure_provider.kind_of(code, message), message, code=code, pool_id=decl.name,
                              operation="discover")
        return None

    # ------------------------------------------------------------------ resize

    async def resize(self, pool_id: str, target_nodes: int, *, keep_nodes: frozenset[str] = frozenset()) -> None:
        try:
            await asyncio.to_thread(self._resize, pool_id, target_nodes, keep_nodes)
        except CloudError as exc:
            err = exc.with_pool(pool_id, exc.operation or "resize")
            if err.kind in (CloudErrorKind.INSUFFICIENT_CAPACITY, CloudErrorKind.QUOTA_EXCEEDED):
                self._problems[pool_id] = err
            raise err from None
        self._problems.pop(pool_id, None)
        self._reads.invalidate_usage()  # usage changed with the node count

    def _get(self, name: str) -> aks_models.AgentPool:
        ap = self._call("agent_pools.get", self._aks.agent_pools.get, self._rg, self._cluster, name)
        if ap.power_state is not None and ap.power_state.code == "Stopped":
            raise CloudError(CloudErrorKind.INVALID_REQUEST, f"agent pool {name!r} is stopped; start it first",
                             code="Stopped", operation="resize")
        if ap.provisioning_state in _BUSY_STATES:  # AKS would answer 409 to another operation
            raise CloudError(CloudErrorKind.UNAVAILABLE, f"agent pool {name!r} is {ap.provisioning_state}; "
                             "resize again when that operation is done", code=ap.provisioning_state,
                             operation="resize")
        return ap

    def _resize(self, pool_id: str, target: int, keep_nodes: frozenset[str]) -> None:
        decl = self._decls.get(pool_id)
        if decl is None:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no pool {pool_id!r}", operation="resize")
        name = common.pool_resource(decl)
        ap = self._get(name)
        count = int(ap.count or 0)
        if target >= count:
            if target > count or ap.enable_auto_scaling:
                self._put_count(name, ap, target)
            return
        if ap.enable_auto_scaling:  # the autoscaler off first, so that it does not undo the shrink
            ap = self._put_count(name, ap, count)
        machines = self._machines(pool_id, name)
        spare = [m for m in machines if m not in keep_nodes]
        victims = spare[::-1][:count - target]  # newest first: the likeliest still to be starting
        if victims:
            poller = self._call("agent_pools.begin_delete_machines", self._aks.agent_pools.begin_delete_machines,
                                self._rg, self._cluster, name,
                                aks_models.AgentPoolDeleteMachinesParameter(machine_names=victims))
            self._call("agent_pools.begin_delete_machines", poller.result)
            log.info("aks machines deleted pool=%s agent_pool=%s machines=%s", pool_id, name, ",".join(victims))
        if count - len(victims) > target:
            # Fewer machines listed than counted (some still being created): AKS picks the rest.
            log.info("aks count lowered pool=%s agent_pool=%s target=%d (AKS picks %d node(s))", pool_id, name,
                     target, count - len(victims) - target)
            self._put_count(name, self._get(name), target)

    def _put_count(self, name: str, ap: aks_models.AgentPool, target: int) -> aks_models.AgentPool:
        ap.count = target
        ap.enable_auto_scaling = False
        ap.min_count = None
        ap.max_count = None
        extra: dict[str, Any] = {}
        if ap.e_tag:
            extra = {"etag": ap.e_tag, "match_condition": azure.core.MatchConditions.IfNotModified}
        poller = self._call("agent_pools.begin_create_or_update", self._aks.agent_pools.begin_create_or_update,
                            self._rg, self._cluster, name, ap, **extra)
        result = self._call("agent_pools.begin_create_or_update", poller.result)
        log.info("aks agent pool resized agent_pool=%s count=%d", name, target)
        return result

    # ------------------------------------------------------------------ eviction notices

    async def interruptions(self) -> list[base.Interruption]:
        out = []
        for n in await azure_provider.scheduled_preemptions(self._watcher):
            machine = self._machine_of_vm.get(n.node, n.node)
            pool_id = self._node_pool_of.get(machine)
            if pool_id is None:
                log.warning("scheduled event for vm=%s outside every declared pool", n.node)
                continue
            out.append(base.Interruption(n.notice_id, pool_id, n.deadline, machine, f"spot eviction of {machine}"))
        return out

    async def close(self) -> None:
        if self._watcher is not None:
            await self._watcher.close()
        await asyncio.to_thread(self._aks.close)
        await asyncio.to_thread(self._compute.close)


@providers.register("aks")
def create(cluster: spec.Cluster, *, clock: Callable[[], float] = time.time, rng: random.Random | None = None,
           aks: ContainerServiceClient | None = None, compute: ComputeManagementClient | None = None,
           credential: Any = None, polling_interval_s: float = 15.0, retry_total: int = 5,
           metadata_url: str | None = "auto") -> AksProvider:
    """Options as the azure provider's: injected clients (``aks``, ``compute``) or a ``credential``
    (default: DefaultAzureCredential, e.g. Workload Identity in the cluster), ``polling_interval_s``
    of long-running operations, ``retry_total`` of azure-core's retry policy, ``metadata_url``
    (Scheduled Events; "auto" probes for it). With ``azure.endpoint`` (a local fake) both clients
    send their requests there unauthenticated."""
    account = cluster.spec.azure
    if account is None or account.aks_cluster is None:
        raise ValueError("spec.azure: the aks provider needs azure.subscription_id, azure.resource_group "
                         "and azure.aks_cluster")
    credential, kwargs = azure_provider.client_options(account, credential, polling_interval_s=polling_interval_s,
                                                       retry_total=retry_total)
    aks = aks or ContainerServiceClient(credential, account.subscription_id, **kwargs)
    compute = compute or ComputeManagementClient(credential, account.subscription_id, **kwargs)
    return AksProvider(cluster, clock=clock, aks=aks, compute=compute,
                       metadata_url=notices.resolve("azure", metadata_url, notices.AZURE_IMDS_URL))


__all__ = ["AksProvider", "create"]
