"""Pure placement of replicas on a cluster's GPUs and ports: state in, decision out.

A replica runs on one node (tensor parallelism stays inside a node), on ``gpu_count`` GPUs of that
node, identified by their index on the node (what ``CUDA_VISIBLE_DEVICES`` takes), and listens on
one port of the agent's range."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping


@dataclasses.dataclass(frozen=True)
class Holding:
    """What one replica holds."""

    replica_id: str
    pool_id: str
    node_id: str
    gpu_ids: tuple[int, ...]
    port: int


@dataclasses.dataclass(frozen=True)
class NodeSet:
    """A pool's running nodes as the allocator sees them. ``gpus_by_node`` overrides
    ``gpus_per_node`` per node (what a Kubernetes node offers as allocatable ``nvidia.com/gpu``);
    ``instance_type`` names the node size in refusals."""

    pool_id: str
    gpus_per_node: int
    nodes: tuple[str, ...]
    gpus_by_node: Mapping[str, int] = dataclasses.field(default_factory=dict)
    instance_type: str = ""

    def gpus_on(self, node: str) -> int:
        return self.gpus_by_node.get(node, self.gpus_per_node)

    def largest_node_gpus(self) -> int:
        return max((self.gpus_on(n) for n in self.nodes), default=self.gpus_per_node)


def parse_port_range(text: str) -> tuple[int, int]:
    lo, hi = (int(x) for x in text.split("-"))
    if not 1024 <= lo <= hi <= 65535:
        raise ValueError(f"port range must be within 1024-65535 with low <= high, got {text!r}")
    return lo, hi


def free_gpus(pool: NodeSet, holdings: Iterable[Holding]) -> dict[str, list[int]]:
    """Free GPU indices per running node of ``pool``."""
    used: dict[str, set[int]] = {n: set() for n in pool.nodes}
    for h in holdings:
        if h.pool_id == pool.pool_id and h.node_id in used:
            used[h.node_id].update(h.gpu_ids)
    return {n: [g for g in range(pool.gpus_on(n)) if g not in used[n]] for n in pool.nodes}


def gpus_free(pool: NodeSet, holdings: Iterable[Holding]) -> int:
    return sum(len(v) for v in free_gpus(pool, holdings).values())


def idle_nodes(pool: NodeSet, holdings: Iterable[Holding]) -> list[str]:
    """Running nodes of ``pool`` that host no replica."""
    busy = {h.node_id for h in holdings if h.pool_id == pool.pool_id}
    return [n for n in pool.nodes if n not in busy]


def choose_gpus(pool: NodeSet, holdings: Iterable[Holding], gpu_count: int,
                avoid_nodes: Iterable[str] = ()) -> tuple[str, tuple[int, ...]] | str:
    """A node and GPU indices for a replica of ``gpu_count`` GPUs, or the reason there is none.

    Best fit: the node with the fewest free GPUs that still fits, so whole nodes stay free for big
    replicas and for scale-in. Nodes in ``avoid_nodes`` (under an interruption notice) are skipped."""
    if gpu_count < 1:
        return f"gpu_count must be >= 1, got {gpu_count}"
    largest = pool.largest_node_gpus()
    if gpu_count > largest:
        size = f" ({pool.instance_type})" if pool.instance_type else ""
        return (f"a replica needs {gpu_count} GPUs on one node; pool {pool.pool_id}'s nodes{size} have "
                f"{largest} per node")
    avoid = set(avoid_nodes)
    free = free_gpus(pool, holdings)
    fits = [(len(gpus), node) for node, gpus in free.items() if node not in avoid and len(gpus) >= gpu_count]
    if not fits:
        total_free = sum(len(g) for n, g in free.items() if n not in avoid)
        return (f"not enough free GPUs in pool {pool.pool_id}: need {gpu_count} on one node, "
                f"{total_free} free across {len(pool.nodes)} running node(s)")
    _, node = min(fits)
    return node, tuple(free[node][:gpu_count])


def choose_port(port_range: tuple[int, int], used: Iterable[int], is_free: Callable[[int], bool]) -> int | None:
    """The lowest port of the range not used by a replica and free on the host (``is_free``
    checks, since other programs and other agents on the host share the port space)."""
    taken = set(used)
    lo, hi = port_range
    for port in range(lo, hi + 1):
        if port not in taken and is_free(port):
            return port
    return None

