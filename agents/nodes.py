"""Which nodes of each pool can take a replica, and which notices are in effect: the provider's
view (the cloud's running nodes, its interruption notices) merged with the replica backend's own
(the Kubernetes node list, the signs of a node being reclaimed). Pure: views in, decisions out.

Where the backend sees nodes itself it is the truth for placement: a node the cloud runs but that
has not joined the cluster, is NotReady, cordoned or being reclaimed takes no replica, and a node
offers the GPUs it declares allocatable. The cloud stays the truth for pool sizes and prices."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from agents import allocation
from agents.backends import base as backend_base
from agents.providers import base as provider_base

Views = Mapping[str, backend_base.NodeView] | None


def node_sets(pools: Mapping[str, provider_base.PoolStatus], views: Views) -> dict[str, allocation.NodeSet]:
    """Per pool, the nodes that can take a replica now and the GPUs each offers."""
    out = {}
    for pool_id, status in pools.items():
        p = status.pool
        if views is None:
            out[pool_id] = allocation.NodeSet(pool_id, p.gpus_per_node, status.nodes, instance_type=p.instance_type)
            continue
        view = views.get(pool_id) or backend_base.NodeView(pool_id)
        out[pool_id] = allocation.NodeSet(pool_id, p.gpus_per_node, view.usable, gpus_by_node=dict(view.gpus_by_node),
                                          instance_type=p.instance_type)
    return out


def present_nodes(pools: Mapping[str, provider_base.PoolStatus], views: Views) -> dict[str, frozenset[str]]:
    """Per pool, every node that still exists (a replica on a node not among them has lost it)."""
    if views is None:
        return {pool_id: frozenset(st.nodes) for pool_id, st in pools.items()}
    return {pool_id: (views[pool_id].present if pool_id in views else frozenset()) for pool_id in pools}


def cloud_ids(views: Views) -> dict[str, str]:
    """Node name -> the cloud's id of its machine (identity when the backend has no view)."""
    if views is None:
        return {}
    return {node: cid for view in views.values() for node, cid in view.cloud_ids.items()}


def without(nodes: allocation.NodeSet, avoid: Iterable[str]) -> allocation.NodeSet:
    skip = set(avoid)
    return dataclasses.replace(nodes, nodes=tuple(n for n in nodes.nodes if n not in skip))


def notice_key(notice: provider_base.Interruption) -> str:
    """Notices are acted on once per node (a cloud notice and the cluster's reclaim sign for the same
    node are one event); a notice naming no node is its own."""
    return f"node:{notice.node_id}" if notice.node_id else f"notice:{notice.notice_id}"


def merge_notices(provider_notices: Iterable[provider_base.Interruption],
                  backend_notices: Iterable[provider_base.Interruption], views: Views) -> dict[str, provider_base.Interruption]:
    """One notice per node, keyed by ``notice_key``. A provider notice names the cloud's machine id;
    it is renamed to the backend's node name where the backend knows the machine, so it meets the
    backend's own notice for that node. Of two notices for one node the provider's id is kept (it is
    stable across polls) and the earlier deadline wins."""
    by_cloud_id = {cid: node for node, cid in cloud_ids(views).items()}
    merged: dict[str, provider_base.Interruption] = {}
    for source in (provider_notices, backend_notices):
        for n in source:
            if n.node_id and n.node_id in by_cloud_id:
                n = dataclasses.replace(n, node_id=by_cloud_id[n.node_id])
            key = notice_key(n)
            seen = merged.get(key)
            if seen is None:
                merged[key] = n
            elif n.deadline < seen.deadline:
                merged[key] = dataclasses.replace(seen, deadline=n.deadline)
    return merged


__all__ = ["Views", "cloud_ids", "merge_notices", "node_sets", "notice_key", "present_nodes", "without"]
