"""Pure reading of Kubernetes Node objects: which pool a node belongs to, whether it can take a
replica now (Ready, schedulable, every NoSchedule/NoExecute taint tolerated, not being reclaimed),
the GPUs it offers (allocatable ``nvidia.com/gpu``), and the signs that the cloud is taking it
back, which become interruption notices.

Reclaim signs (defaults in ``meridian.spec.replicas``; docs/kubernetes.md lists their sources):
taint keys (``prefix/*`` matches a prefix), node conditions (type, status, optional message
text), and optionally a cordon alone. A sign carries no deadline, so the notice's deadline is
when the agent first saw the sign plus the cloud's usual notice."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from agents.backends import base
from agents.backends.kubernetes import manifest
from agents.providers import base as provider_base

log = logging.getLogger(__name__)

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
_VMSS = re.compile(r"/virtualMachineScaleSets/([^/]+)/virtualMachines/([^/]+)$")


@dataclasses.dataclass(frozen=True)
class ReclaimRules:
    taints: tuple[str, ...] = ()
    conditions: tuple[Mapping[str, str], ...] = ()
    cordon: bool = False

    def taint_matches(self, key: str) -> bool:
        for rule in self.taints:
            if rule.endswith("/*") and key.startswith(rule[:-1]):
                return True
            if rule == key:
                return True
        return False


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    name: str
    pool_value: str | None  # the node pool label's value (None: not in any pool)
    gpus: int
    ready: bool
    unschedulable: bool
    taints: tuple[Mapping, ...]
    reclaim: str  # why the node is being reclaimed ("" when it is not)
    cloud_id: str
    instance_type: str


def cloud_id(node: Mapping) -> str:
    """The cloud's id of the node's machine, from ``spec.providerID``: the EC2 instance id
    (``aws:///zone/i-...``), the GCE instance name (``gce://project/zone/name``), the scale set VM
    name (``azure:///.../virtualMachineScaleSets/<vmss>/virtualMachines/<n>`` -> ``<vmss>_<n>``);
    the node name when there is none."""
    provider_id = (node.get("spec") or {}).get("providerID") or ""
    name = (node.get("metadata") or {}).get("name", "")
    if not provider_id:
        return name
    m = _VMSS.search(provider_id)
    if m:
        return f"{m.group(1)}_{m.group(2)}"
    return provider_id.rstrip("/").rsplit("/", 1)[-1] or name


def address(node: Mapping, preferred: str = "ExternalIP") -> str:
    """The node's ``preferred`` address (ExternalIP or InternalIP), else the other one, else ""."""
    found = {a.get("type"): a.get("address") for a in (node.get("status") or {}).get("addresses") or []}
    other = "InternalIP" if preferred == "ExternalIP" else "ExternalIP"
    return found.get(preferred) or found.get(other) or ""


def _gpus(node: Mapping) -> int:
    raw = ((node.get("status") or {}).get("allocatable") or {}).get(manifest.GPU_RESOURCE, "0")
    try:
        return int(str(raw))
    except ValueError:
        return 0


def _condition(node: Mapping, type_: str) -> Mapping | None:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


def reclaim_reason(node: Mapping, rules: ReclaimRules) -> str:
    """Why the node is being reclaimed, or "" (the first sign found, in words)."""
    spec = node.get("spec") or {}
    for taint in spec.get("taints") or []:
        if rules.taint_matches(taint.get("key", "")):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint.get('key')}{value}:{taint.get('effect', '')}"
    for rule in rules.conditions:
        c = _condition(node, rule.get("type", ""))
        if c is None or c.get("status") != rule.get("status", "True"):
            continue
        wanted = rule.get("message_contains", "")
        if wanted and wanted not in (c.get("message") or ""):
            continue
        detail = c.get("message") or c.get("reason") or ""
        return f"condition {c.get('type')}={c.get('status')}" + (f" ({detail})" if detail else "")
    if rules.cordon and spec.get("unschedulable"):
        return "cordoned"
    return ""


def read(node: Mapping, *, pool_label: str, rules: ReclaimRules) -> NodeInfo:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    ready = _condition(node, "Ready")
    return NodeInfo(name=meta.get("name", ""), pool_value=labels.get(pool_label), gpus=_gpus(node),
                    ready=bool(ready and ready.get("status") == "True"),
                    unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
                    taints=tuple((node.get("spec") or {}).get("taints") or ()), reclaim=reclaim_reason(node, rules),
                    cloud_id=cloud_id(node), instance_type=labels.get(INSTANCE_TYPE_LABEL, ""))


def why_unusable(info: NodeInfo, tolerations: Sequence[Mapping]) -> str:
    """Why a node cannot take a new replica of a pool with these tolerations, or ""."""
    if info.reclaim:
        return f"being reclaimed ({info.reclaim})"
    if not info.ready:
        return "not Ready"
    if info.unschedulable:
        return "cordoned"
    for taint in info.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not manifest.tolerated(taint, tolerations):
            return f"taint {taint.get('key')}:{taint.get('effect')} not tolerated"
    if info.gpus < 1:
        return "no allocatable nvidia.com/gpu"
    return ""


def views(infos: Iterable[NodeInfo], pools: Mapping[str, str],
          tolerations: Mapping[str, Sequence[Mapping]]) -> dict[str, base.NodeView]:
    """Per pool (pool id -> its node pool label value), the backend's NodeView."""
    by_value: dict[str, list[str]] = {}
    for pool_id, value in pools.items():
        by_value.setdefault(value, []).append(pool_id)
    found: dict[str, list[NodeInfo]] = {pool_id: [] for pool_id in pools}
    for info in infos:
        for pool_id in by_value.get(info.pool_value or "", []):
            found[pool_id].append(info)
    out = {}
    for pool_id, members in found.items():
        members.sort(key=lambda i: i.name)
        unusable = {i.name: why_unusable(i, tolerations.get(pool_id, ())) for i in members}
        out[pool_id] = base.NodeView(
            pool_id, usable=tuple(i.name for i in members if not unusable[i.name]),
            present=frozenset(i.name for i in members), gpus_by_node={i.name: i.gpus for i in members},
            unusable={n: why for n, why in unusable.items() if why}, cloud_ids={i.name: i.cloud_id for i in members},
            instance_types={i.name: i.instance_type for i in members if i.instance_type})
    return out


def notices(infos: Iterable[NodeInfo], pools: Mapping[str, str], first_seen: Mapping[str, float],
            notice_s: float) -> list[provider_base.Interruption]:
    """An interruption notice per node of a pool showing a reclaim sign. ``first_seen``: node ->
    when the agent first saw its sign (the caller keeps it; the deadline is that plus
    ``notice_s``)."""
    pool_of = {value: pool_id for pool_id, value in sorted(pools.items(), reverse=True)}
    out = []
    for info in infos:
        pool_id = pool_of.get(info.pool_value or "")
        if pool_id is None or not info.reclaim or info.name not in first_seen:
            continue
        seen = first_seen[info.name]
        out.append(provider_base.Interruption(
            notice_id=f"kube:{info.name}@{seen:.0f}", pool_id=pool_id, deadline=seen + notice_s, node_id=info.name,
            message=f"node {info.name} is being reclaimed: {info.reclaim}"))
    return out




class NodeTracker:
    """The nodes of the cluster's pools as the node watch delivers them: their readings, when each
    reclaim sign was first seen, and (cached until the next change) the pools' node views."""

    def __init__(self, *, pool_label: str, rules: ReclaimRules, pools: Mapping[str, str],
                 tolerations: Mapping[str, Sequence[Mapping]], notice_s: float, clock: Callable[[], float], cluster_id: str = ""):
        self._pool_label = pool_label
        self._rules = rules
        self._pools = dict(pools)
        self._tolerations = {k: list(v) for k, v in tolerations.items()}
        self._notice_s = notice_s
        self._clock = clock
        self._cluster_id = cluster_id
        self.infos: dict[str, NodeInfo] = {}
        self.reclaim_seen: dict[str, float] = {}
        self._views: dict[str, base.NodeView] | None = None

    def on_event(self, type_: str, obj: Mapping, previous: Mapping | None = None) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        self._views = None
        if type_ == "DELETED":
            self.infos.pop(name, None)
            self.reclaim_seen.pop(name, None)
            return
        info = read(obj, pool_label=self._pool_label, rules=self._rules)
        self.infos[name] = info
        if not info.reclaim:
            self.reclaim_seen.pop(name, None)
        elif name not in self.reclaim_seen:
            self.reclaim_seen[name] = self._clock()
            log.warning("event=kube_node_reclaimed cluster=%s node=%s sign=%r", self._cluster_id, name, info.reclaim)

    def views(self) -> dict[str, base.NodeView]:
        if self._views is None:
            self._views = views(self.infos.values(), self._pools, self._tolerations)
        return self._views

    def notices(self) -> list[provider_base.Interruption]:
        return notices(self.infos.values(), self._pools, self.reclaim_seen, self._notice_s)


__all__ = ["NodeInfo", "NodeTracker", "ReclaimRules", "address", "cloud_id", "notices", "read", "reclaim_reason",
           "views", "why_unusable"]
