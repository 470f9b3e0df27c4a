"""Azure: GPU pools are virtual machine scale sets in one resource group, read and resized with
azure-mgmt-compute's ``ComputeManagementClient``.

- GPU count and vCPUs per VM size: ``resource_skus.list`` capabilities ("GPUs", "vCPUs") and
  the size's quota family; the GPU type (which the API does not name) and prices: the catalog.
- Nodes: the scale set's VMs in provisioning state Succeeded; ``sku.capacity`` minus those pending.
- Resize: ``virtual_machine_scale_sets.begin_update`` of ``sku.capacity``, a long-running
  operation awaited through azure-core's ARM polling. Azure picks the VMs removed on scale-in
  (its scale-in policy), so ``keep_nodes`` is not honoured here.
- Quota headroom: ``usage.list`` for the size's family (spot: ``lowPriorityCores``), in vCPUs.
- Errors: AllocationFailed/ZonalAllocationFailed/SkuNotAvailable -> insufficient capacity
  (stock-out); OperationNotAllowed "... quota" -> quota exceeded; 429 -> throttled (azure-core's
  retry policy honours Retry-After first); 401/403 and credential errors -> auth failure.
- Eviction notices: Scheduled Events ``Preempt`` from the instance metadata service.

Every SDK call runs in a worker thread."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import azure.core.exceptions as azexc
import azure.core.pipeline.policies
import azure.identity
from azure.mgmt.compute import ComputeManagementClient

from meridian import spec
from meridian.fleet import models
from meridian.spec import cluster as cluster_spec

from agents import providers
from agents.providers import base, common, notices
from agents.providers.errors import CloudError, CloudErrorKind, classify_message

STATIC_TTL_S = 3600.0
QUOTA_TTL_S = 300.0

_CAPACITY = {"AllocationFailed", "ZonalAllocationFailed", "SkuNotAvailable", "OverconstrainedAllocationRequest",
             "OverconstrainedZonalAllocationRequest", "AllocationFailedSpot", "SpotVMCapacityUnavailable"}
_QUOTA = {"QuotaExceeded", "OperationNotAllowed"}  # the latter only when its message says quota
_THROTTLED = {"TooManyRequests", "SubscriptionRequestsThrottled", "ThrottlingError"}
_NOT_FOUND = {"ResourceNotFound", "NotFound", "ResourceGroupNotFound", "AgentPoolNotFound"}
_AUTH = {"AuthenticationFailed", "AuthorizationFailed", "InvalidAuthenticationToken", "ExpiredAuthenticationToken",
         "InvalidAuthenticationTokenTenant", "LinkedAuthorizationFailed"}


def _error_code(exc: azexc.HttpResponseError) -> str:
    err = getattr(exc, "error", None)
    code = getattr(err, "code", None) or ""
    if not code and exc.response is not None:
        code = exc.response.headers.get("x-ms-error-code", "")
    return str(code)


def kind_of(code: str, message: str, status: int = 0) -> CloudErrorKind:
    """The kind an ARM error (code, message, HTTP status) indicates: codes first, then the message."""
    if code in _CAPACITY:
        return CloudErrorKind.INSUFFICIENT_CAPACITY
    if code in _THROTTLED or status == 429:
        return CloudErrorKind.THROTTLED
    if code in _AUTH or status in (401, 403):
        return CloudErrorKind.AUTH_FAILURE
    if code in _QUOTA and (code == "QuotaExceeded" or "quota" in message.lower()):
        return CloudErrorKind.QUOTA_EXCEEDED
    if status == 404 or code in _NOT_FOUND:
        return CloudErrorKind.NOT_FOUND
    if status >= 500:
        return CloudErrorKind.UNAVAILABLE
    return classify_message(f"{code} {message}") or CloudErrorKind.INVALID_REQUEST


def classify(exc: Exception, operation: str = "") -> CloudError:
    if isinstance(exc, CloudError):
        return exc
    if isinstance(exc, (azexc.ClientAuthenticationError, azure.identity.CredentialUnavailableError)):
        return CloudError(CloudErrorKind.AUTH_FAILURE, str(exc).split("\n")[0], code=type(exc).__name__,
                          operation=operation)
    if isinstance(exc, azexc.HttpResponseError):
        code = _error_code(exc)
        message = getattr(getattr(exc, "error", None), "message", None) or exc.message or str(exc)
        status = exc.status_code or 0
        return CloudError(kind_of(code, message, status), message, code=code or str(status), operation=operation)
    if isinstance(exc, (azexc.ServiceRequestError, azexc.ServiceResponseError)):
        return CloudError(CloudErrorKind.UNAVAILABLE, str(exc), code=type(exc).__name__, operation=operation)
    return CloudError(CloudErrorKind.UNKNOWN, f"{type(exc).__name__}: {exc}", operation=operation)


class ComputeReads:
    """What the Compute API tells about a region's VM sizes and quotas, for the azure and aks
    providers: capabilities per size (``resource_skus.list``: "GPUs", "vCPUs", the quota family),
    cached an hour, and vCPU usage and limits per family (``usage.list``), cached five minutes and
    dropped after a resize. Blocking: call from a worker thread."""

    def __init__(self, client: ComputeManagementClient, region: str, sizes: set[str], clock: Callable[[], float]):
        self._client = client
        self._region = region
        self._sizes = sizes
        self._clock = clock
        self._skus: dict[str, dict[str, str]] = {}  # size -> capabilities + "family"
        self._skus_at = -1e18
        self._usage: dict[str, tuple[int, int]] = {}  # family lower -> (current vCPUs, limit)
        self._usage_at = -1e18

    def refresh(self) -> None:
        now = self._clock()
        if not self._skus or now - self._skus_at >= STATIC_TTL_S:
            found: dict[str, dict[str, str]] = {}
            try:
                for sku in self._client.resource_skus.list(filter=f"location eq '{self._region}'"):
                    if sku.resource_type == "virtualMachines" and sku.name in self._sizes:
                        caps = {c.name: c.value for c in (sku.capabilities or [])}
                        caps["family"] = sku.family or ""
                        found[sku.name] = caps
            except Exception as exc:
                raise classify(exc, "resource_skus.list") from exc
            self._skus, self._skus_at = found, now
        if now - self._usage_at >= QUOTA_TTL_S:
            usage: dict[str, tuple[int, int]] = {}
            try:
                for u in self._client.usage.list(self._region):
                    usage[(u.name.value or "").lower()] = (int(u.current_value), int(u.limit))
            except Exception as exc:
                raise classify(exc, "usage.list") from exc
            self._usage, self._usage_at = usage, now

    def invalidate_usage(self) -> None:
        self._usage_at = -1e18

    def caps(self, size: str) -> dict[str, str]:
        return self._skus.get(size, {})

    def headroom_gpus(self, size: str, *, spot: bool, nodes_left: int, gpus_per_node: int, vcpus: int) -> int:
        """GPUs the pool may still add: ``nodes_left`` nodes, fewer when the size's family quota
        (spot: ``lowPriorityCores``) has less vCPU room."""
        headroom = max(0, nodes_left) * gpus_per_node
        family = ("lowPriorityCores" if spot else self.caps(size).get("family", "")).lower()
        if family in self._usage and vcpus:
            current, limit = self._usage[family]
            headroom = min(headroom, (max(0, limit - current) // vcpus) * gpus_per_node)
        return headroom


async def scheduled_preemptions(watcher: notices.MetadataWatcher | None) -> list[notices.NodeNotice]:
    """Scheduled Events ``Preempt`` notices in effect now (none without a watcher)."""
    if watcher is None:
        return []
    try:
        return await watcher.poll()
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
        raise CloudError(CloudErrorKind.UNAVAILABLE, f"scheduled events: {exc}", operation="interruptions") from exc


def client_options(account: cluster_spec.AzureAccount, credential: Any, *, polling_interval_s: float,
                   retry_total: int) -> tuple[Any, dict[str, Any]]:
    """(credential, client keyword arguments) for an Azure management client of ``account``: with
    ``account.endpoint`` (a local fake) requests go there unauthenticated."""
    kwargs: dict[str, Any] = dict(polling_interval=polling_interval_s, retry_total=retry_total)
    if account.endpoint:
        kwargs.update(base_url=account.endpoint, authentication_policy=azure.core.pipeline.policies.SansIOHTTPPolicy())
        credential = credential or _NoCredential()
    return credential or azure.identity.DefaultAzureCredential(), kwargs


class AzureProvider(base.Provider):
    name = "azure"

    def __init__(self, cluster: spec.Cluster, *, clock: Callable[[], float], client: ComputeManagementClient,
                 metadata_url: str | None):
        account = cluster.spec.azure
        if account is None:
            raise ValueError("spec.azure: the azure provider needs azure.subscription_id and azure.resource_group")
        self._rg = account.resource_group
        self._region = cluster.spec.region
        self._zone = cluster.spec.zone or ""
        self._decls = {p.name: p for p in cluster.spec.pools}
        self._clock = clock
        self._client = client
        self._reads = ComputeReads(client, self._region, {d.instance_type for d in self._decls.values()}, clock)
        self._problems: dict[str, CloudError] = {}  # pool -> failure of its last resize
        self._node_pool_of: dict[str, str] = {}
        self._watcher = notices.MetadataWatcher("azure", metadata_url, clock=clock) if metadata_url else None

    def _call(self, operation: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise classify(exc, operation) from exc

    # ------------------------------------------------------------------ discovery

    async def discover(self) -> list[base.PoolStatus]:
        return await asyncio.to_thread(self._discover)

    def _discover(self) -> list[base.PoolStatus]:
        self._reads.refresh()
        return [self._pool_status(decl) for decl in self._decls.values()]

    def _pool_status(self, decl: cluster_spec.PoolDecl) -> base.PoolStatus:
        name = common.pool_resource(decl)
        offer = common.offer("azure", decl.instance_type, self._region)
        gpu_type = offer.gpu_type if offer else "unknown"
        try:
            vmss = self._client.virtual_machine_scale_sets.get(self._rg, name)
        except azexc.ResourceNotFoundError:
            pool = common.build_pool(
                decl, gpu_type=gpu_type, gpus_per_node=offer.gpu_count if offer else 0,
                gpu_memory_gib=offer.gpu_memory_gib if offer else 0, nodes_current=0, nodes_pending=0,
                price_per_node_hour_usd=common.catalog_price("azure", decl.instance_type, self._region, decl.tier),
                quota_headroom_gpus=0, zone=decl.zone or self._zone, state=models.ProvisioningState.ERROR)
            return base.PoolStatus(pool, (), CloudError(CloudErrorKind.NOT_FOUND,
                                                        f"no scale set {name!r} in resource group {self._rg!r}",
                                                        pool_id=decl.name, operation="discover"))
        except Exception as exc:
            raise classify(exc, "virtual_machine_scale_sets.get") from exc
        size = vmss.sku.name
        caps = self._reads.caps(size)
        gpus_per_node = int(caps.get("GPUs") or (offer.gpu_count if offer else 0))
        vcpus = int(caps.get("vCPUs") or (offer.vcpus if offer else 0))
        target = int(vmss.sku.capacity or 0)
        vms = self._call("virtual_machine_scale_set_vms.list", lambda: list(
            self._client.virtual_machine_scale_set_vms.list(self._rg, name)))
        running = tuple(sorted(vm.name for vm in vms if (vm.properties and vm.properties.provisioning_state) == "Succeeded"))
        for node in running:
            self._node_pool_of[node] = decl.name
        pending = max(0, target - len(running))
        profile = vmss.properties.virtual_machine_profile if vmss.properties else None
        spot = bool(profile and (profile.priority or "").lower() in ("spot", "low"))
        headroom = self._reads.headroom_gpus(size, spot=spot, nodes_left=decl.max_nodes - target,
                                             gpus_per_node=gpus_per_node, vcpus=vcpus)
        problem = self._problems.get(decl.name)
        stocked = problem is not None and problem.kind == CloudErrorKind.INSUFFICIENT_CAPACITY
        state = common.provisioning_state(len(running), pending, target, stocked)
        if vmss.properties and vmss.properties.provisioning_state == "Failed" and not stocked:
            state = models.ProvisioningState.ERROR
        zones = list(vmss.zones or [])
        pool = common.build_pool(
            decl, gpu_type=gpu_type, gpus_per_node=gpus_per_node,
            gpu_memory_gib=common.gpu_memory_gib(gpu_type, offer.gpu_memory_gib if offer else 0),
            nodes_current=len(running), nodes_pending=pending,
            price_per_node_hour_usd=common.catalog_price("azure", size, self._region, "spot" if spot else decl.tier),
            quota_headroom_gpus=headroom, zone=decl.zone or (zones[0] if zones else self._zone), state=state,
            tier="spot" if spot else decl.tier)
        return base.PoolStatus(pool, running, problem)

    # ------------------------------------------------------------------ resize

    async def resize(self, pool_id: str, target_nodes: int, *, keep_nodes: frozenset[str] = frozenset()) -> None:
        try:
            await asyncio.to_thread(self._resize, pool_id, target_nodes)
        except CloudError as exc:
            err = exc.with_pool(pool_id, exc.operation or "resize")
            if err.kind in (CloudErrorKind.INSUFFICIENT_CAPACITY, CloudErrorKind.QUOTA_EXCEEDED):
                self._problems[pool_id] = err
            raise err from None
        self._problems.pop(pool_id, None)
        self._reads.invalidate_usage()  # usage changed with the capacity

    def _resize(self, pool_id: str, target: int) -> None:
        decl = self._decls.get(pool_id)
        if decl is None:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no pool {pool_id!r}", operation="resize")
        name = common.pool_resource(decl)
        vmss = self._call("virtual_machine_scale_sets.get", self._client.virtual_machine_scale_sets.get, self._rg, name)
        update = {"sku": {"name": vmss.sku.name, "tier": vmss.sku.tier or "Standard", "capacity": target}}
        poller = self._call("virtual_machine_scale_sets.begin_update",
                            self._client.virtual_machine_scale_sets.begin_update, self._rg, name, update)
        self._call("virtual_machine_scale_sets.begin_update", poller.result)

    # ------------------------------------------------------------------ eviction notices

    async def interruptions(self) -> list[base.Interruption]:
        out = []
        for n in await scheduled_preemptions(self._watcher):
            pool_id = self._node_pool_of.get(n.node)
            if pool_id is None:  # VM names are <scale set>_<instance id>
                prefix = n.node.rsplit("_", 1)[0]
                pool_id = next((d.name for d in self._decls.values() if common.pool_resource(d) == prefix), None)
            if pool_id is not None:
                out.append(base.Interruption(n.notice_id, pool_id, n.deadline, n.node, f"spot eviction of {n.node}"))
        return out

    async def close(self) -> None:
        if self._watcher is not None:
            await self._watcher.close()
        await asyncio.to_thread(self._client.close)


@providers.register("azure")
def create(cluster: spec.Cluster, *, clock: Callable[[], float] = time.time, rng: random.Random | None = None,
           client: ComputeManagementClient | None = None, credential: Any = None, polling_interval_s: float = 15.0,
           retry_total: int = 5, metadata_url: str | None = "auto") -> AzureProvider:
    """Options: an injected ``client`` or ``credential`` (default: DefaultAzureCredential, which
    fails on first use, not here, when no login is available); ``polling_interval_s`` of
    long-running operations; ``retry_total`` for azure-core's retry policy; ``metadata_url``
    ("auto": Scheduled Events if the agent runs on an Azure VM; None: no eviction notices).
    With ``azure.endpoint`` (a local fake) requests are sent there unauthenticated."""
    account = cluster.spec.azure
    if account is None:
        raise ValueError("spec.azure: the azure provider needs azure.subscription_id and azure.resource_group")
    if client is None:
        credential, kwargs = client_options(account, credential, polling_interval_s=polling_interval_s,
                                            retry_total=retry_total)
        client = ComputeManagementClient(credential, account.subscription_id, **kwargs)
    return AzureProvider(cluster, clock=clock, client=client,
                         metadata_url=notices.resolve("azure", metadata_url, notices.AZURE_IMDS_URL))


class _NoCredential:
    """A credential for a local fake ARM endpoint, which checks none (the authentication policy
    is replaced, so this is never asked for a token)."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        raise azexc.ClientAuthenticationError("no credential for a local fake endpoint")
