"""GCP: GPU pools are GKE node pools of one cluster (``gcp.project``/``gcp.location``/
``gcp.gke_cluster``), read and resized with google-cloud-container's ``ClusterManagerClient``.

- GPU type and count: ``NodeConfig.accelerators``; spot: ``NodeConfig.spot``/``preemptible``.
- Nodes: GKE's NodePool has no node count, so the pool's managed instance groups
  (``instance_group_urls``) are read through the Compute Engine API: running instances are nodes,
  target size minus those are pending.
- Prices: the offline catalog (the machine type's price per region).
- Quota headroom: the region's Compute Engine GPU quota metric (e.g. NVIDIA_L4_GPUS,
  PREEMPTIBLE_NVIDIA_L4_GPUS): limit minus usage.
- Resize: ``set_node_pool_size`` (per-zone node count), after ``set_node_pool_autoscaling`` turns
  GKE's own autoscaler off for the pool (Meridian decides its size); operations are awaited.
  GKE picks the nodes to remove on a shrink, so ``keep_nodes`` cannot be honoured here.
- Stock-outs: an operation error or pool status message saying ZONE_RESOURCE_POOL_EXHAUSTED.
- Preemption notices: the GCE metadata server's ``instance/preempted`` on the agent's instance.

Retries: transient errors and throttling are retried by google-api-core's ``Retry`` passed to each
GKE call, and by ``ComputeApi`` for Compute REST calls (429 and 5xx answers and broken connections,
with the agent's jittered backoff, honouring ``Retry-After``); blocking calls run in worker threads,
Compute REST calls on aiohttp. ``listManagedInstances`` is paged (``maxResults``/``pageToken``): a
large node pool's instances come over several pages, all of them read."""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import google.auth
import google.auth.credentials
import google.auth.exceptions
import google.auth.transport.requests
import grpc
from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from google.cloud import container_v1
from google.cloud.container_v1.services.cluster_manager.transports import grpc as gke_grpc

from meridian import backoff as backoff_mod
from meridian import spec
from meridian.fleet import models
from meridian.spec import cluster as cluster_spec

from agents import providers
from agents.providers import base, common, notices
from agents.providers.errors import CloudError, CloudErrorKind, classify_message

log = logging.getLogger(__name__)
COMPUTE_URL = "https://compute.googleapis.com/compute/v1"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
QUOTA_TTL_S = 300.0
_RETRYABLE = (gexc.ServiceUnavailable, gexc.TooManyRequests, gexc.DeadlineExceeded, gexc.InternalServerError)

# google.rpc.Code numbers -> kinds (operation errors carry a code, not an exception class).
_RPC_CODES = {3: CloudErrorKind.INVALID_REQUEST, 4: CloudErrorKind.UNAVAILABLE, 5: CloudErrorKind.NOT_FOUND,
              7: CloudErrorKind.AUTH_FAILURE, 8: CloudErrorKind.THROTTLED, 9: CloudErrorKind.INVALID_REQUEST,
              13: CloudErrorKind.UNAVAILABLE, 14: CloudErrorKind.UNAVAILABLE, 16: CloudErrorKind.AUTH_FAILURE}


def classify_status(code: int, message: str, operation: str = "") -> CloudError:
    """A google.rpc.Status (operation error) as a CloudError: the message decides between
    capacity, quota and rate limits, which GCP all report as RESOURCE_EXHAUSTED."""
    kind = _RPC_CODES.get(code, CloudErrorKind.UNKNOWN)
    if code in (8, 9, 13, 2, 0) or kind == CloudErrorKind.UNKNOWN:
        kind = classify_message(message) or kind
    return CloudError(kind, message, code=str(code), operation=operation)


def classify(exc: Exception, operation: str = "") -> CloudError:
    if isinstance(exc, CloudError):
        return exc
    if isinstance(exc, (google.auth.exceptions.DefaultCredentialsError, google.auth.exceptions.RefreshError,
                        gexc.PermissionDenied, gexc.Unauthenticated, gexc.Forbidden, gexc.Unauthorized)):
        return CloudError(CloudErrorKind.AUTH_FAILURE, str(exc), code=type(exc).__name__, operation=operation)
    if isinstance(exc, gexc.ResourceExhausted):
        return CloudError(classify_message(exc.message or "") or CloudErrorKind.THROTTLED, exc.message or str(exc),
                          code="RESOURCE_EXHAUSTED", operation=operation)
    # ResourceExhausted is a TooManyRequests in api-core: it is told apart above, by its message.
    if isinstance(exc, gexc.TooManyRequests):
        return CloudError(CloudErrorKind.THROTTLED, str(exc), code="429", operation=operation)
    if isinstance(exc, gexc.NotFound):
        return CloudError(CloudErrorKind.NOT_FOUND, str(exc), code="NOT_FOUND", operation=operation)
    if isinstance(exc, (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError, gexc.RetryError)):
        return CloudError(CloudErrorKind.UNAVAILABLE, str(exc), code=type(exc).__name__, operation=operation)
    if isinstance(exc, gexc.GoogleAPICallError):
        kind = classify_message(exc.message or "") or CloudErrorKind.INVALID_REQUEST
        return CloudError(kind, exc.message or str(exc), code=type(exc).__name__, operation=operation)
    return CloudError(CloudErrorKind.UNKNOWN, f"{type(exc).__name__}: {exc}", operation=operation)


def _http_kind(status: int, message: str) -> CloudErrorKind:
    if status in (401, 403):
        return classify_message(message) if "quota" in message.lower() else CloudErrorKind.AUTH_FAILURE
    if status == 429:
        return CloudErrorKind.THROTTLED
    if status == 404:
        return CloudErrorKind.NOT_FOUND
    if status >= 500:
        return CloudErrorKind.UNAVAILABLE
    return classify_message(message) or CloudErrorKind.INVALID_REQUEST


_RETRY_KINDS = (CloudErrorKind.UNAVAILABLE, CloudErrorKind.THROTTLED)
MANAGED_INSTANCES_PAGE_SIZE = 500  # Compute Engine's maximum for listManagedInstances
MAX_PAGES = 1000  # a server that keeps answering with a next page token is refused past this


class ComputeApi:
    """The few Compute Engine REST calls node pools need, on one aiohttp session. Transient failures
    (429, 5xx, a broken connection) are retried ``retries`` times with jittered exponential backoff
    (``Retry-After`` honoured up to the backoff's cap); anything else raises at once."""

    def __init__(self, credentials: Callable[[], google.auth.credentials.Credentials], *, timeout_s: float = 30.0,
                 retries: int = 4, backoff: Callable[[], backoff_mod.Backoff] | None = None,
                 sleep: Callable[[float], Any] = asyncio.sleep):
        self._credentials = credentials
        self._timeout_s = timeout_s
        self._retries = retries
        self._backoff = backoff or (lambda: backoff_mod.Backoff(initial_s=0.5, max_s=8.0))
        self._sleep = sleep
        self._http: aiohttp.ClientSession | None = None
        self.retried = 0  # transient failures retried (status and tests read it)

    async def _headers(self) -> dict[str, str]:
        try:
            creds = await asyncio.to_thread(self._credentials)
            if isinstance(creds, google.auth.credentials.AnonymousCredentials):
                return {}
            if not creds.valid:
                await asyncio.to_thread(creds.refresh, google.auth.transport.requests.Request())
        except Exception as exc:
            raise classify(exc, "compute_auth") from exc
        return {"Authorization": f"Bearer {creds.token}"}

    async def call(self, method: str, url: str, operation: str, params: dict[str, str] | None = None) -> dict:
        """One REST call, retried while it fails transiently; the JSON answer or a classified CloudError."""
        delays = self._backoff()
        while True:
            try:
                return await self._once(method, url, operation, params)
            except _Transient as exc:
                if delays.attempts >= self._retries:
                    raise exc.error from None
                delay = delays.next_delay_s(exc.retry_after_s)
                self.retried += 1
                log.warning("event=compute_retry operation=%s attempt=%d delay_s=%.2f error=%r", operation,
                            delays.attempts, delay, str(exc.error))
                await self._sleep(delay)

    async def _once(self, method: str, url: str, operation: str, params: dict[str, str] | None) -> dict:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        try:
            async with self._http.request(method, url, params=params, headers=await self._headers()) as resp:
                text = await resp.text()
                if resp.status != 200:
                    error = CloudError(_http_kind(resp.status, text), f"{method} {url} answered {resp.status}: "
                                       f"{text[:300]}", code=str(resp.status), operation=operation)
                    if error.kind in _RETRY_KINDS:
                        raise _Transient(error, backoff_mod.parse_retry_after(resp.headers.get("Retry-After"),
                                                                              time.time()))
                    raise error
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = CloudError(CloudErrorKind.UNAVAILABLE, f"{method} {url}: {exc}", operation=operation)
            raise _Transient(error, None) from exc

    async def managed_instances(self, group_url: str) -> list[dict]:
        """Every managed instance of an instance group manager, over as many pages as it takes."""
        out: list[dict] = []
        token = ""
        for _ in range(MAX_PAGES):
            params = {"maxResults": str(MANAGED_INSTANCES_PAGE_SIZE), **({"pageToken": token} if token else {})}
            page = await self.call("POST", f"{group_url}/listManagedInstances", "list_managed_instances", params)
            out += page.get("managedInstances", [])
            token = page.get("nextPageToken") or ""
            if not token:
                return out
        raise CloudError(CloudErrorKind.UNKNOWN, f"{group_url}/listManagedInstances: more than {MAX_PAGES} pages "
                         "(a page token that never ends?)", operation="list_managed_instances")

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()


class _Transient(Exception):
    """A failure worth retrying: the CloudError to raise when retries run out, and the server's
    Retry-After in seconds if it sent one."""

    def __init__(self, error: CloudError, retry_after_s: float | None):
        super().__init__(str(error))
        self.error = error
        self.retry_after_s = retry_after_s


class GcpProvider(base.Provider):
    name = "gcp"

    def __init__(self, cluster: spec.Cluster, *, clock: Callable[[], float],
                 client_factory: Callable[[], container_v1.ClusterManagerClient], compute: ComputeApi,
                 compute_url: str | None, metadata_url: str | None, operation_timeout_s: float = 600.0,
                 operation_poll_s: float = 1.0):
        account = cluster.spec.gcp
        if account is None:
            raise ValueError("spec.gcp: the gcp provider needs gcp.project, gcp.location and gcp.gke_cluster")
        self._project = account.project
        self._location = account.location
        self._parent = f"projects/{account.project}/locations/{account.location}/clusters/{account.gke_cluster}"
        self._region = cluster.spec.region
        self._decls = {p.name: p for p in cluster.spec.pools}
        self._clock = clock
        self._client_factory = client_factory
        self._client: container_v1.ClusterManagerClient | None = None
        self._compute = compute
        self._compute_url = compute_url.rstrip("/") if compute_url else None
        self._retry = gretry.Retry(predicate=gretry.if_exception_type(*_RETRYABLE), initial=0.5, maximum=10.0,
                                   multiplier=2.0, timeout=60.0)
        self._operation_timeout_s = operation_timeout_s
        self._operation_poll_s = operation_poll_s
        self._quotas: dict[str, tuple[float, float]] = {}
        self._quotas_at = -1e18
        self._node_pool_of: dict[str, str] = {}
        self._watcher = notices.MetadataWatcher("gcp", metadata_url, clock=clock) if metadata_url else None

    def _gke(self, operation: str) -> container_v1.ClusterManagerClient:
        if self._client is None:
            try:
                self._client = self._client_factory()
            except Exception as exc:
                raise classify(exc, operation) from exc
        return self._client

    async def _call(self, operation: str, method: str, **kwargs: Any) -> Any:
        def run() -> Any:
            fn = getattr(self._gke(operation), method)
            try:
                return fn(retry=self._retry, timeout=60.0, **kwargs)
            except Exception as exc:
                raise classify(exc, operation) from exc

        return await asyncio.to_thread(run)

    # ------------------------------------------------------------------ discovery

    async def _region_quotas(self) -> dict[str, tuple[float, float]]:
        if self._compute_url is None or self._clock() - self._quotas_at < QUOTA_TTL_S:
            return self._quotas
        data = await self._compute.call("GET", f"{self._compute_url}/projects/{self._project}/regions/{self._region}",
                                        "region_quotas")
        self._quotas = {q["metric"]: (float(q.get("limit", 0)), float(q.get("usage", 0))) for q in data.get("quotas", [])}
        self._quotas_at = self._clock()
        return self._quotas

    async def discover(self) -> list[base.PoolStatus]:
        resp = await self._call("list_node_pools", "list_node_pools", parent=self._parent)
        by_name = {np.name: np for np in resp.node_pools}
        quotas = await self._region_quotas()
        out = []
        for decl in self._decls.values():
            out.append(await self._pool_status(decl, by_name.get(common.pool_resource(decl)), quotas))
        return out

    def _missing(self, decl: cluster_spec.PoolDecl, why: str, kind: CloudErrorKind) -> base.PoolStatus:
        offer = common.offer("gcp", decl.instance_type, self._region)
        pool = common.build_pool(
            decl, gpu_type=offer.gpu_type if offer else "unknown", gpus_per_node=offer.gpu_count if offer else 0,
            gpu_memory_gib=offer.gpu_memory_gib if offer else 0, nodes_current=0, nodes_pending=0,
            price_per_node_hour_usd=common.catalog_price("gcp", decl.instance_type, self._region, decl.tier),
            quota_headroom_gpus=0, zone=decl.zone or "", state=models.ProvisioningState.ERROR)
        return base.PoolStatus(pool, (), CloudError(kind, why, pool_id=decl.name, operation="discover"))

    async def _pool_status(self, decl: cluster_spec.PoolDecl, np: container_v1.NodePool | None,
                           quotas: dict) -> base.PoolStatus:
        if np is None:
            return self._missing(decl, f"no node pool {common.pool_resource(decl)!r} in {self._parent}",
                                 CloudErrorKind.NOT_FOUND)
        accelerators = [a for a in np.config.accelerators if a.accelerator_count > 0]
        if not accelerators:
            return self._missing(decl, f"node pool {np.name!r} has no GPU accelerators", CloudErrorKind.INVALID_REQUEST)
        acc = accelerators[0]
        gpu_type = common.gpu_type_from_gke(acc.accelerator_type)
        gpus_per_node = int(acc.accelerator_count)
        spot = bool(np.config.spot or np.config.preemptible)
        target, running = 0, []
        for url in np.instance_group_urls:
            mig = await self._compute.call("GET", url, "get_instance_group_manager")
            target += int(mig.get("targetSize", 0))
            for inst in await self._compute.managed_instances(url):
                if inst.get("instanceStatus") == "RUNNING" and inst.get("currentAction", "NONE") == "NONE":
                    name = inst.get("name") or inst.get("instance", "").rsplit("/", 1)[-1]
                    running.append(name)
                    self._node_pool_of[name] = decl.name
        pending = max(0, target - len(running))
        problem = None
        if np.status in (container_v1.NodePool.Status.RUNNING_WITH_ERROR, container_v1.NodePool.Status.ERROR):
            message = np.status_message or f"node pool status {np.status.name}"
            problem = CloudError(classify_message(message) or CloudErrorKind.UNKNOWN, message, code=np.status.name,
                                 pool_id=decl.name, operation="discover")
        lo = hi = None
        if np.autoscaling.enabled:
            zones = max(1, len(np.locations))
            lo = np.autoscaling.total_min_node_count or np.autoscaling.min_node_count * zones
            hi = np.autoscaling.total_max_node_count or np.autoscaling.max_node_count * zones
        headroom = max(0, decl.max_nodes - target) * gpus_per_node
        metric = common.gke_quota_metric(acc.accelerator_type, spot)
        if metric in quotas:
            limit, usage = quotas[metric]
            headroom = min(headroom, int(max(0.0, limit - usage) // gpus_per_node) * gpus_per_node)
        stocked = problem is not None and problem.kind == CloudErrorKind.INSUFFICIENT_CAPACITY
        state = common.provisioning_state(len(running), pending, target, stocked)
        if problem is not None and not stocked and problem.kind != CloudErrorKind.QUOTA_EXCEEDED:
            state = models.ProvisioningState.ERROR
        tier = "spot" if spot else decl.tier
        pool = common.build_pool(
            decl, gpu_type=gpu_type, gpus_per_node=gpus_per_node, gpu_memory_gib=common.gpu_memory_gib(gpu_type),
            nodes_current=len(running), nodes_pending=pending,
            price_per_node_hour_usd=common.catalog_price("gcp", np.config.machine_type or decl.instance_type,
                                                         self._region, tier),
            quota_headroom_gpus=headroom, zone=np.locations[0] if np.locations else (decl.zone or ""), state=state,
            nodes_min=lo, nodes_max=hi, tier=tier)
        return base.PoolStatus(pool, tuple(sorted(running)), problem)

    # ------------------------------------------------------------------ resize

    async def resize(self, pool_id: str, target_nodes: int, *, keep_nodes: frozenset[str] = frozenset()) -> None:
        decl = self._decls.get(pool_id)
        if decl is None:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no pool {pool_id!r}", pool_id=pool_id, operation="resize")
        name = f"{self._parent}/nodePools/{common.pool_resource(decl)}"
        try:
            np = await self._call("get_node_pool", "get_node_pool", name=name)
            if np.autoscaling.enabled:
                op = await self._call("set_node_pool_autoscaling", "set_node_pool_autoscaling", request={
                    "name": name, "autoscaling": container_v1.NodePoolAutoscaling(enabled=False)})
                await self._wait(op, "set_node_pool_autoscaling")
            zones = max(1, len(np.locations))
            op = await self._call("set_node_pool_size", "set_node_pool_size",
                                  request={"name": name, "node_count": math.ceil(target_nodes / zones)})
            await self._wait(op, "set_node_pool_size")
        except CloudError as exc:
            raise exc.with_pool(pool_id, exc.operation) from None

    async def _wait(self, op: container_v1.Operation, operation: str) -> None:
        """Poll the operation until DONE; its error, if any, raised as a classified CloudError."""
        name = f"projects/{self._project}/locations/{self._location}/operations/{op.name}"
        deadline = time.monotonic() + self._operation_timeout_s
        while op.status != container_v1.Operation.Status.DONE:
            if time.monotonic() > deadline:
                raise CloudError(CloudErrorKind.UNAVAILABLE, f"operation {op.name} not done after "
                                 f"{self._operation_timeout_s:g}s", operation=operation)
            await asyncio.sleep(self._operation_poll_s)
            op = await self._call("get_operation", "get_operation", name=name)
        if op.error and op.error.code:
            raise classify_status(op.error.code, op.error.message or op.status_message, operation)

    # ------------------------------------------------------------------ preemption notices

    async def interruptions(self) -> list[base.Interruption]:
        if self._watcher is None:
            return []
        try:
            raw = await self._watcher.poll()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise CloudError(CloudErrorKind.UNAVAILABLE, f"metadata server: {exc}", operation="interruptions") from exc
        out = []
        for n in raw:
            pool_id = self._node_pool_of.get(n.node)
            if pool_id is not None:
                out.append(base.Interruption(n.notice_id, pool_id, n.deadline, n.node, f"preemption of {n.node}"))
        return out

    async def close(self) -> None:
        await self._compute.close()
        if self._watcher is not None:
            await self._watcher.close()
        if self._client is not None:
            await asyncio.to_thread(self._client.transport.close)


class CredentialSource:
    """The credentials both APIs use: given ones, or Application Default Credentials looked up on
    first use, so a missing login shows up as an auth failure in status rather than a crash."""

    def __init__(self, credentials: google.auth.credentials.Credentials | None):
        self._credentials = credentials

    def get(self) -> google.auth.credentials.Credentials:
        if self._credentials is None:
            self._credentials, _ = google.auth.default(scopes=list(SCOPES))
        return self._credentials


@providers.register("gcp")
def create(cluster: spec.Cluster, *, clock: Callable[[], float] = time.time, rng: random.Random | None = None,
           client: container_v1.ClusterManagerClient | None = None,
           credentials: google.auth.credentials.Credentials | None = None, compute_url: str | None = "default",
           metadata_url: str | None = "auto", operation_poll_s: float = 1.0,
           compute_backoff: Callable[[], backoff_mod.Backoff] | None = None) -> GcpProvider:
    """Options: an injected ``client``; ``credentials`` (default: Application Default Credentials,
    resolved on first use); ``compute_url`` (Compute Engine API base; "default": the public one, or
    none when ``gcp.endpoint`` points at a local fake: then quotas come from the declared bounds);
    ``metadata_url`` ("auto": the metadata server if the agent runs on GCE; None: no notices);
    ``compute_backoff`` (the Compute REST retries' backoff; default 0.5 s doubling to 8 s)."""
    account = cluster.spec.gcp
    endpoint = account.endpoint if account else None
    if endpoint and credentials is None:
        credentials = google.auth.credentials.AnonymousCredentials()
    if compute_url == "default":
        compute_url = None if endpoint else COMPUTE_URL
    source = CredentialSource(credentials)

    def factory() -> container_v1.ClusterManagerClient:
        if client is not None:
            return client
        if endpoint:
            transport = gke_grpc.ClusterManagerGrpcTransport(channel=grpc.insecure_channel(endpoint))
            return container_v1.ClusterManagerClient(transport=transport)
        return container_v1.ClusterManagerClient(credentials=source.get())

    return GcpProvider(cluster, clock=clock, client_factory=factory,
                       compute=ComputeApi(source.get, backoff=compute_backoff),
                       compute_url=compute_url,
                       metadata_url=notices.resolve("gcp", metadata_url, notices.GCE_METADATA_URL),
                       operation_poll_s=operation_poll_s)
