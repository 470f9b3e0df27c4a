"""The provider interface: what the agent needs from a cloud (or the simulated one).

Three operations: discover the GPU pools, resize a pool, and report interruption notices (spot
preemptions). Every call that reaches a cloud may raise ``errors.CloudError``; nothing else
escapes a provider. Blocking SDK calls run in a thread (``asyncio.to_thread``), never on the loop."""

from __future__ import annotations

import abc
import dataclasses

from meridian.fleet import models

from agents.providers import errors


@dataclasses.dataclass(frozen=True)
class PoolStatus:
    """One pool as the cloud reports it. ``pool.gpus_free`` is every GPU of the running nodes: the
    agent subtracts the GPUs its replicas hold. ``nodes`` are the cloud's ids of the running nodes
    (instance ids, VM names), stable while a node lives, so replicas are placed on a named node.
    ``problem`` is a classified error the cloud reports for the pool itself (a failed scale-up for
    lack of capacity, a quota), None when healthy."""

    pool: models.GpuPool
    nodes: tuple[str, ...] = ()
    problem: errors.CloudError | None = None


@dataclasses.dataclass(frozen=True)
class Interruption:
    """A notice that capacity is being taken away (spot preemption, eviction).

    ``notice_id`` is stable across polls so the agent acts once per notice. ``node_id`` names the
    affected node (None: unknown, the whole pool is at risk). ``deadline`` is Unix seconds."""

    notice_id: str
    pool_id: str
    deadline: float
    node_id: str | None = None
    message: str = ""


class Provider(abc.ABC):
    """A cloud behind the agent. Implementations register themselves with
    ``agents.providers.register`` under the name the Cluster spec's ``provider`` field uses."""

    name: str = ""

    @abc.abstractmethod
    async def discover(self) -> list[PoolStatus]:
        """Every declared pool, as the cloud sees it now."""

    @abc.abstractmethod
    async def resize(self, pool_id: str, target_nodes: int, *, keep_nodes: frozenset[str] = frozenset()) -> None:
        """Ask the cloud for ``target_nodes`` nodes in ``pool_id``; returns once the request is
        accepted (nodes arrive later and show up in ``discover``). When shrinking, ``keep_nodes``
        (nodes hosting replicas) are protected where the cloud lets the caller choose."""

    @abc.abstractmethod
    async def interruptions(self) -> list[Interruption]:
        """Interruption notices in effect now (polled by the agent every few seconds)."""

    async def close(self) -> None:
        """Release clients and sessions. Default: nothing to release."""
        return None
