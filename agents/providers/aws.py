"""AWS: GPU pools are EC2 Auto Scaling groups (one per pool, named by the pool's ``resource`` or
its name), read and resized with boto3.

- GPU type, count and memory: ``describe_instance_types`` (GpuInfo); where the type is offered:
  ``describe_instance_type_offerings`` per availability zone (both cached: they do not change).
- Prices: on-demand from the offline catalog (the EC2 API has none); spot from
  ``describe_spot_price_history`` (latest per zone; the catalog when the API has no answer).
- Nodes: the group's InService instances; pending = desired minus those.
- Resize: ``set_desired_capacity``, or ``update_auto_scaling_group`` when the target crosses the
  group's min/max; nodes hosting replicas get scale-in protection before a shrink.
- Stock-outs: a failed scaling activity whose message says capacity (InsufficientInstanceCapacity)
  becomes the pool's problem, hence a STOCK_OUT event.
- Quota headroom: Service Quotas (G/VT and P instance vCPU quotas, on-demand or spot); where the
  API has no answer, the pool's declared bound.
- Spot notices: instance metadata (IMDSv2) ``/latest/meta-data/spot/instance-action`` polled on
  the agent's own instance (``imds_url``; "auto" probes the standard address once).

Throttling is retried by botocore itself (standard retry mode, ``max_attempts``); every SDK call
runs in a worker thread."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import boto3
import botocore.config
import botocore.exceptions

from meridian import spec
from meridian.fleet import models
from meridian.spec import cluster as cluster_spec

from agents import providers
from agents.providers import base, common, notices
from agents.providers.errors import CloudError, CloudErrorKind, classify_message

log = logging.getLogger(__name__)

# Service Quotas codes for running instances, in vCPUs: (on-demand, spot) per instance family letter.
QUOTA_CODES = {"g": ("L-DB2E81BA", "L-3819A6DF"), "v": ("L-DB2E81BA", "L-3819A6DF"),
               "p": ("L-417A185B", "L-7212CCBC")}
STATIC_TTL_S = 3600.0
# After a scale-up request, scaling activities are checked for this long (a failed launch for lack
# of capacity shows up there, not in the API call's answer).
ACTIVITY_WINDOW_S = 600.0
ACTIVITY_SLACK_S = 60.0
PRICE_TTL_S = 300.0

_THROTTLED = {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
              "RequestThrottled", "SlowDown", "PriorRequestNotComplete"}
_CAPACITY = {"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
             "InsufficientReservedInstanceCapacity", "SpotMaxPriceTooLow", "InsufficientFreeAddressesInSubnet"}
_QUOTA = {"VcpuLimitExceeded", "InstanceLimitExceeded", "LimitExceeded", "MaxSpotInstanceCountExceeded",
          "ServiceQuotaExceededException", "ResourceLimitExceeded"}
_AUTH = {"AuthFailure", "UnauthorizedOperation", "AccessDenied", "AccessDeniedException", "InvalidClientTokenId",
         "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException", "UnrecognizedClientException",
         "MissingAuthenticationToken", "OptInRequired"}
_NOT_FOUND = {"ValidationError", "InvalidInstanceID.NotFound", "NoSuchResourceException", "NoSuchEntity"}


def classify(exc: Exception, operation: str = "") -> CloudError:
    """A boto3/botocore exception as a classified CloudError."""
    if isinstance(exc, CloudError):
        return exc
    if isinstance(exc, botocore.exceptions.ClientError):
        err = exc.response.get("Error", {})
        code, message = str(err.get("Code", "")), str(err.get("Message", "")) or str(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code in _THROTTLED or status == 429:
            kind = CloudErrorKind.THROTTLED
        elif code in _CAPACITY:
            kind = CloudErrorKind.INSUFFICIENT_CAPACITY
        elif code in _QUOTA:
            kind = CloudErrorKind.QUOTA_EXCEEDED
        elif code in _AUTH or status in (401, 403):
            kind = CloudErrorKind.AUTH_FAILURE
        elif code in _NOT_FOUND or code.endswith(".NotFound") or status == 404:
            kind = CloudErrorKind.NOT_FOUND
        elif status >= 500 or code in ("InternalError", "ServiceUnavailable", "Unavailable", "InternalFailure"):
            kind = CloudErrorKind.UNAVAILABLE
        elif 400 <= status < 500:
            kind = classify_message(message) or CloudErrorKind.INVALID_REQUEST
        else:
            kind = classify_message(message) or CloudErrorKind.UNKNOWN
        return CloudError(kind, message, code=code, operation=operation)
    if isinstance(exc, (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError,
                        botocore.exceptions.CredentialRetrievalError, botocore.exceptions.ProfileNotFound)):
        return CloudError(CloudErrorKind.AUTH_FAILURE, str(exc), code=type(exc).__name__, operation=operation)
    if isinstance(exc, (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectTimeoutError,
                        botocore.exceptions.ReadTimeoutError, botocore.exceptions.ConnectionClosedError)):
        return CloudError(CloudErrorKind.UNAVAILABLE, str(exc), code=type(exc).__name__, operation=operation)
    return CloudError(CloudErrorKind.UNKNOWN, f"{type(exc).__name__}: {exc}", operation=operation)


def classify_activity(activity: dict) -> CloudError | None:
    """A failed scaling activity's problem (capacity, quota ...), or None for a successful one."""
    if activity.get("StatusCode") not in ("Failed", "Cancelled"):
        return None
    message = activity.get("StatusMessage") or activity.get("Description") or "scaling activity failed"
    for code in (*_CAPACITY, *_QUOTA):
        if code in message:
            kind = CloudErrorKind.INSUFFICIENT_CAPACITY if code in _CAPACITY else CloudErrorKind.QUOTA_EXCEEDED
            return CloudError(kind, message, code=code, operation="scale")
    return CloudError(classify_message(message) or CloudErrorKind.UNKNOWN, message, operation="scale")


@dataclasses.dataclass(frozen=True)
class _TypeInfo:
    gpu_type: str
    gpu_count: int
    gpu_memory_gib: int
    vcpus: int


class AwsProvider(base.Provider):
    name = "aws"

    def __init__(self, cluster: spec.Cluster, *, clock: Callable[[], float], ec2: Any, autoscaling: Any,
                 servicequotas: Any | None, imds_url: str | None, sts: Any | None = None):
        s = cluster.spec
        # spec.aws.account_id: the credentials must be this account's, checked once before anything
        # is read or resized (a profile pointing at the wrong account must not resize its groups).
        self._account_id = s.aws.account_id if s.aws is not None else None
        self._sts = sts
        self._account_ok = self._account_id is None
        self._region = s.region
        self._zone = s.zone or ""
        self._decls = {p.name: p for p in s.pools}
        self._clock = clock
        self._ec2 = ec2
        self._asg = autoscaling
        self._quotas = servicequotas
        self._types: dict[str, _TypeInfo] = {}
        self._offered: dict[str, set[str]] = {}
        self._static_at = -1e18
        self._spot: dict[tuple[str, str], float] = {}
        self._spot_at = -1e18
        self._quota_vcpus: dict[str, float | None] = {}
        self._quota_at = -1e18
        self._watcher = notices.MetadataWatcher("aws", imds_url, clock=clock) if imds_url else None
        self._instance_pool: dict[str, str] = {}
        self._scale_up_at: dict[str, float] = {}  # pool -> when the agent last asked it to grow

    # ------------------------------------------------------------------ discovery

    async def discover(self) -> list[base.PoolStatus]:
        return await asyncio.to_thread(self._discover)

    def _call(self, operation: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except Exception as exc:
            raise classify(exc, operation) from exc

    def _groups(self) -> dict[str, dict]:
        names = sorted({common.pool_resource(d) for d in self._decls.values()})
        out: dict[str, dict] = {}
        pages = self._call("describe_auto_scaling_groups", self._asg.get_paginator("describe_auto_scaling_groups").paginate,
                           AutoScalingGroupNames=names)
        try:
            for page in pages:
                for g in page.get("AutoScalingGroups", []):
                    out[g["AutoScalingGroupName"]] = g
        except Exception as exc:
            raise classify(exc, "describe_auto_scaling_groups") from exc
        return out

    def _refresh_static(self) -> None:
        if self._types and self._clock() - self._static_at < STATIC_TTL_S:
            return
        types = sorted({d.instance_type for d in self._decls.values()})
        resp = self._call("describe_instance_types", self._ec2.describe_instance_types, InstanceTypes=types)
        found: dict[str, _TypeInfo] = {}
        for it in resp.get("InstanceTypes", []):
            gpus = (it.get("GpuInfo") or {}).get("Gpus") or []
            if not gpus:
                continue
            g = gpus[0]
            mem_mib = int((g.get("MemoryInfo") or {}).get("SizeInMiB", 0))
            gpu_type = common.gpu_type_from_aws(g.get("Name", ""), mem_mib)
            found[it["InstanceType"]] = _TypeInfo(
                gpu_type=gpu_type, gpu_count=sum(int(x.get("Count", 0)) for x in gpus),
                gpu_memory_gib=common.gpu_memory_gib(gpu_type, round(mem_mib / 1024)),
                vcpus=int((it.get("VCpuInfo") or {}).get("DefaultVCpus", 0)))
        offered: dict[str, set[str]] = {t: set() for t in types}
        pages = self._ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": types}])
        try:
            for page in pages:
                for o in page.get("InstanceTypeOfferings", []):
                    offered.setdefault(o["InstanceType"], set()).add(o["Location"])
        except Exception as exc:
            raise classify(exc, "describe_instance_type_offerings") from exc
        self._types, self._offered, self._static_at = found, offered, self._clock()

    def _refresh_spot(self) -> None:
        spot_types = sorted({d.instance_type for d in self._decls.values() if d.tier == "spot"})
        if not spot_types or self._clock() - self._spot_at < PRICE_TTL_S:
            return
        now = datetime.datetime.fromtimestamp(self._clock(), tz=datetime.timezone.utc)
        latest: dict[tuple[str, str], tuple[datetime.datetime, float]] = {}
        pages = self._ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=spot_types, ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"], StartTime=now)
        try:
            for page in pages:
                for h in page.get("SpotPriceHistory", []):
                    key = (h["InstanceType"], h["AvailabilityZone"])
                    ts = h.get("Timestamp") or now
                    if key not in latest or ts > latest[key][0]:
                        latest[key] = (ts, float(h["SpotPrice"]))
        except Exception as exc:
            raise classify(exc, "describe_spot_price_history") from exc
        self._spot = {k: v[1] for k, v in latest.items()}
        self._spot_at = self._clock()

    def _quota_for(self, instance_type: str, tier: str) -> float | None:
        """The vCPU quota covering ``instance_type`` at ``tier`` (None: unknown)."""
        codes = QUOTA_CODES.get(instance_type[:1].lower())
        if codes is None or self._quotas is None:
            return None
        code = codes[1] if tier == "spot" else codes[0]
        if code in self._quota_vcpus and self._clock() - self._quota_at < PRICE_TTL_S:
            return self._quota_vcpus[code]
        try:
            resp = self._quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)
            value: float | None = float(resp["Quota"]["Value"])
        except Exception as exc:
            err = classify(exc, "get_service_quota")
            if err.kind in (CloudErrorKind.AUTH_FAILURE, CloudErrorKind.THROTTLED):
                raise err from exc
            value = None  # Service Quotas has no figure here: fall back to the declared bound
        self._quota_vcpus[code] = value
        self._quota_at = self._clock()
        return value

    def _last_activity_problem(self, group: str, since: float | None) -> CloudError | None:
        """The problem of the group's newest scaling activity (started after ``since`` when given)."""
        resp = self._call("describe_scaling_activities", self._asg.describe_scaling_activities,
                          AutoScalingGroupName=group, MaxRecords=5)
        activities = [a for a in resp.get("Activities", []) if since is None or
                      (a.get("StartTime") and a["StartTime"].timestamp() >= since - ACTIVITY_SLACK_S)]
        activities.sort(key=lambda a: a["StartTime"].timestamp() if a.get("StartTime") else 0.0, reverse=True)
        return classify_activity(activities[0]) if activities else None

    def _check_account(self) -> None:
        if self._account_ok:
            return
        if self._sts is None:
            raise CloudError(CloudErrorKind.INVALID_REQUEST, "spec.aws.account_id is set but no STS client was given "
                                                             "to check it", operation="GetCallerIdentity")
        actual = str(self._call("GetCallerIdentity", self._sts.get_caller_identity).get("Account", ""))
        if actual != self._account_id:
            raise CloudError(CloudErrorKind.AUTH_FAILURE,
                             f"the credentials are for AWS account {actual or '?'}, not {self._account_id} "
                             f"(spec.aws.account_id): nothing is read or resized", operation="GetCallerIdentity")
        self._account_ok = True

    def _discover(self) -> list[base.PoolStatus]:
        self._check_account()
        groups = self._groups()
        self._refresh_static()
        self._refresh_spot()
        used_vcpus: dict[tuple[str, str], int] = {}
        for decl in self._decls.values():
            g = groups.get(common.pool_resource(decl))
            info = self._types.get(decl.instance_type)
            if g is not None and info is not None:
                codes = QUOTA_CODES.get(decl.instance_type[:1].lower(), ("", ""))
                key = (codes[1] if decl.tier == "spot" else codes[0], decl.tier)
                used_vcpus[key] = used_vcpus.get(key, 0) + int(g.get("DesiredCapacity", 0)) * info.vcpus
        out = []
        for decl in self._decls.values():
            out.append(self._pool_status(decl, groups.get(common.pool_resource(decl)), used_vcpus))
        return out

    def _pool_status(self, decl: cluster_spec.PoolDecl, group: dict | None, used_vcpus: dict) -> base.PoolStatus:
        info = self._types.get(decl.instance_type)
        zone = decl.zone or self._zone
        if group is None or info is None:
            why = (f"no Auto Scaling group {common.pool_resource(decl)!r}" if group is None
                   else f"{decl.instance_type} has no GPUs according to describe_instance_types")
            offer = common.offer("aws", decl.instance_type, self._region)
            pool = common.build_pool(
                decl, gpu_type=offer.gpu_type if offer else "unknown", gpus_per_node=offer.gpu_count if offer else 0,
                gpu_memory_gib=offer.gpu_memory_gib if offer else 0, nodes_current=0, nodes_pending=0,
                price_per_node_hour_usd=common.catalog_price("aws", decl.instance_type, self._region, decl.tier),
                quota_headroom_gpus=0, zone=zone, state=models.ProvisioningState.ERROR)
            return base.PoolStatus(pool, (), CloudError(CloudErrorKind.NOT_FOUND, why, pool_id=decl.name,
                                                        operation="discover"))
        zones = list(group.get("AvailabilityZones") or [])
        zone = zone or (zones[0] if zones else "")
        instances = group.get("Instances") or []
        running = tuple(sorted(i["InstanceId"] for i in instances if i.get("LifecycleState") == "InService"))
        desired = int(group.get("DesiredCapacity", 0))
        pending = max(0, desired - len(running))
        problem: CloudError | None = None
        offered = self._offered.get(decl.instance_type, set())
        if zones and offered and not offered.intersection(zones):
            problem = CloudError(CloudErrorKind.INVALID_REQUEST,
                                 f"{decl.instance_type} is not offered in {', '.join(zones)}; offered in "
                                 f"{', '.join(sorted(offered))}", pool_id=decl.name, operation="discover")
        else:
            since = self._scale_up_at.get(decl.name)
            if since is not None and self._clock() - since > ACTIVITY_WINDOW_S:
                since = self._scale_up_at.pop(decl.name)
            if pending > 0 or decl.name in self._scale_up_at:
                # A scale-up is under way or was just asked for: its activity says whether it failed.
                problem = self._last_activity_problem(group["AutoScalingGroupName"], self._scale_up_at.get(decl.name))
                if problem is not None:
                    problem = problem.with_pool(decl.name)
        price = common.catalog_price("aws", decl.instance_type, self._region, decl.tier)
        if decl.tier == "spot":
            zone_prices = [p for (t, z), p in self._spot.items() if t == decl.instance_type and (z in zones or not zones)]
            exact = self._spot.get((decl.instance_type, zone))
            price = exact if exact is not None else (min(zone_prices) if zone_prices else price)
        lo, hi = int(group.get("MinSize", 0)), int(group.get("MaxSize", 0))
        bound_headroom = max(0, decl.max_nodes - desired) * info.gpu_count
        quota = self._quota_for(decl.instance_type, decl.tier)
        headroom = bound_headroom
        if quota is not None and info.vcpus:
            codes = QUOTA_CODES.get(decl.instance_type[:1].lower(), ("", ""))
            used = used_vcpus.get((codes[1] if decl.tier == "spot" else codes[0], decl.tier), 0)
            headroom = min(bound_headroom, int(max(0.0, quota - used) // info.vcpus) * info.gpu_count)
        stocked = problem is not None and problem.kind == CloudErrorKind.INSUFFICIENT_CAPACITY
        state = (models.ProvisioningState.ERROR if problem is not None and not stocked and
                 problem.kind != CloudErrorKind.QUOTA_EXCEEDED
                 else common.provisioning_state(len(running), pending, desired, stocked))
        pool = common.build_pool(
            decl, gpu_type=info.gpu_type, gpus_per_node=info.gpu_count, gpu_memory_gib=info.gpu_memory_gib,
            nodes_current=len(running), nodes_pending=pending, price_per_node_hour_usd=price,
            quota_headroom_gpus=headroom, zone=zone, state=state, nodes_min=lo, nodes_max=max(hi, decl.max_nodes))
        return base.PoolStatus(pool, running, problem)

    # ------------------------------------------------------------------ resize

    async def resize(self, pool_id: str, target_nodes: int, *, keep_nodes: frozenset[str] = frozenset()) -> None:
        try:
            await asyncio.to_thread(self._resize, pool_id, target_nodes, keep_nodes)
        except CloudError as exc:
            raise exc.with_pool(pool_id, exc.operation or "resize") from None

    def _resize(self, pool_id: str, target: int, keep_nodes: frozenset[str]) -> None:
        self._check_account()
        decl = self._decls.get(pool_id)
        if decl is None:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no pool {pool_id!r}", pool_id=pool_id, operation="resize")
        name = common.pool_resource(decl)
        group = self._groups().get(name)
        if group is None:
            raise CloudError(CloudErrorKind.NOT_FOUND, f"no Auto Scaling group {name!r}", pool_id=pool_id,
                             operation="resize")
        in_service = [i["InstanceId"] for i in group.get("Instances") or [] if i.get("LifecycleState") == "InService"]
        if target < len(in_service):
            keep = sorted(keep_nodes.intersection(in_service))
            spare = sorted(set(in_service) - set(keep))
            if keep:
                self._call("set_instance_protection", self._asg.set_instance_protection, InstanceIds=keep,
                           AutoScalingGroupName=name, ProtectedFromScaleIn=True)
            if spare:
                self._call("set_instance_protection", self._asg.set_instance_protection, InstanceIds=spare,
                           AutoScalingGroupName=name, ProtectedFromScaleIn=False)
        lo, hi = int(group.get("MinSize", 0)), int(group.get("MaxSize", 0))
        if target > int(group.get("DesiredCapacity", 0)):
            self._scale_up_at[pool_id] = self._clock()
        else:
            self._scale_up_at.pop(pool_id, None)
        if target > hi or target < lo:
            self._call("update_auto_scaling_group", self._asg.update_auto_scaling_group, AutoScalingGroupName=name,
                       MinSize=min(lo, target), MaxSize=max(hi, target), DesiredCapacity=target)
        else:
            self._call("set_desired_capacity", self._asg.set_desired_capacity, AutoScalingGroupName=name,
                       DesiredCapacity=target, HonorCooldown=False)
        log.info("asg resized pool=%s group=%s desired=%d", pool_id, name, target)

    # ------------------------------------------------------------------ spot notices (IMDSv2)

    async def interruptions(self) -> list[base.Interruption]:
        if self._watcher is None:
            return []
        try:
            raw = await self._watcher.poll()
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            raise CloudError(CloudErrorKind.UNAVAILABLE, f"instance metadata: {exc}", operation="interruptions") from exc
        out = []
        for n in raw:
            pool_id = await self._pool_of_instance(n.node)
            if pool_id is None:
                log.warning("spot notice for instance=%s outside every declared pool", n.node)
                continue
            out.append(base.Interruption(notice_id=n.notice_id, pool_id=pool_id, deadline=n.deadline, node_id=n.node,
                                         message=f"spot {n.action} of {n.node}"))
        return out

    async def _pool_of_instance(self, instance_id: str) -> str | None:
        if instance_id not in self._instance_pool:
            resp = await asyncio.to_thread(self._call, "describe_auto_scaling_instances",
                                           self._asg.describe_auto_scaling_instances, InstanceIds=[instance_id])
            groups = {i["AutoScalingGroupName"] for i in resp.get("AutoScalingInstances", [])}
            pools = [d.name for d in self._decls.values() if common.pool_resource(d) in groups]
            if not pools:
                return None
            self._instance_pool[instance_id] = pools[0]
        return self._instance_pool[instance_id]

    async def close(self) -> None:
        if self._watcher is not None:
            await self._watcher.close()


@providers.register("aws")
def create(cluster: spec.Cluster, *, clock: Callable[[], float] = time.time, rng: random.Random | None = None,
           session: boto3.session.Session | None = None, ec2: Any = None, autoscaling: Any = None,
           servicequotas: Any = None, sts: Any = None, imds_url: str | None = "auto",
           max_attempts: int = 5) -> AwsProvider:
    """Options: injected boto3 ``session`` or clients (``ec2``, ``autoscaling``, ``servicequotas``,
    ``sts``: used only to check ``spec.aws.account_id``);
    ``imds_url`` ("auto": the standard address if the agent runs on EC2; None: no spot notices);
    ``max_attempts`` for botocore's standard retry mode (throttling, transient errors)."""
    account = cluster.spec.aws
    endpoint = account.endpoint_url if account else None
    if session is None:
        session = boto3.session.Session(profile_name=account.profile if account else None,
                                        region_name=cluster.spec.region)
    cfg = botocore.config.Config(retries={"max_attempts": max_attempts, "mode": "standard"},
                                 connect_timeout=5, read_timeout=30)
    ec2 = ec2 or session.client("ec2", endpoint_url=endpoint, config=cfg, region_name=cluster.spec.region)
    autoscaling = autoscaling or session.client("autoscaling", endpoint_url=endpoint, config=cfg,
                                                region_name=cluster.spec.region)
    servicequotas = servicequotas or session.client("service-quotas", endpoint_url=endpoint, config=cfg,
                                                    region_name=cluster.spec.region)
    if sts is None and account is not None and account.account_id is not None:
        sts = session.client("sts", endpoint_url=endpoint, config=cfg, region_name=cluster.spec.region)
    imds_url = notices.resolve("aws", imds_url, notices.AWS_IMDS_URL)
    return AwsProvider(cluster, clock=clock, ec2=ec2, autoscaling=autoscaling, servicequotas=servicequotas,
                       imds_url=imds_url, sts=sts)
