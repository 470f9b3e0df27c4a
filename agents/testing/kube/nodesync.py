"""``NodeSync``: mirrors a sim cloud's nodes into a fake cluster's Node objects, for the demo and
end-to-end tests (what a node group's VMs joining and leaving a real cluster look like).

Every ``interval_s`` it reads the sim provider's state file (``<agent state dir>/sim-cloud.json``,
written by ``agents.providers.sim.SimCloud``; read only, its format is the sim's ``_dump``) and
- registers a Node per running sim node (``ready_at`` passed), named by the sim node id, labelled
  ``meridian.dev/pool=<pool id>`` plus the pool's labels, with the pool's ``nvidia.com/gpu``;
- removes the Nodes whose sim node is gone (its pods die and end NodeLost, as on a real cluster);
- applies the AWS Node Termination Handler's signs to a node with an interruption notice: cordon and
  the taint ``aws-node-termination-handler/spot-itn=<notice>:NoSchedule``.
Only Nodes it registered (``spec.providerID`` ``sim://...``) are ever removed or tainted."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import pathlib
import re
import time
from collections.abc import Callable, Mapping, Sequence

from agents.testing.kube import cluster as cluster_mod

log = logging.getLogger("agents.testing.kube.nodesync")

POOL_LABEL = "meridian.dev/pool"
NOTICE_TAINT = "aws-node-termination-handler/spot-itn"
PROVIDER_PREFIX = "sim://"


@dataclasses.dataclass(frozen=True)
class PoolNodes:
    """How one sim pool's nodes look in the cluster."""
    gpus: int = 0
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    taints: Sequence[Mapping] = ()
    cpu: str = "8"
    memory: str = "64Gi"


@dataclasses.dataclass
class SyncResult:
    added: list[str] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)
    noticed: list[str] = dataclasses.field(default_factory=list)


def label_safe(text: str) -> str:
    """A label/taint value from free text: invalid characters -> '-', at most 63, alphanumeric ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63]
    return value.strip("-_.") or "notice"


class NodeSync:
    def __init__(self, fake: cluster_mod.FakeCluster, state_path: pathlib.Path, *,
                 pools: Mapping[str, PoolNodes] | None = None, interval_s: float = 0.5,
                 clock: Callable[[], float] = time.time, pool_label: str = POOL_LABEL,
                 notice_taint: str = NOTICE_TAINT):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.cluster = fake
        self.state_path = pathlib.Path(state_path)
        self.pools = dict(pools or {})
        self.interval_s = interval_s
        self.pool_label = pool_label
        self.notice_taint = notice_taint
        self._clock = clock
        self._task: asyncio.Task | None = None
        self._warned: set[str] = set()
        self.syncs = 0

    def _read(self) -> dict | None:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return {"pools": {}}
        except (OSError, ValueError) as exc:
            # A file being replaced or unreadable: change nothing rather than drop every node.
            log.warning("event=nodesync_unreadable path=%s error=%s", self.state_path, exc)
            return None
        if not isinstance(data, dict) or not isinstance(data.get("pools", {}), dict):
            log.warning("event=nodesync_unreadable path=%s error=%s", self.state_path, "no 'pools' object")
            return None
        return data

    def sync_once(self) -> SyncResult:
        """One pass: register, remove and mark nodes to match the state file."""
        result = SyncResult()
        self.syncs += 1
        data = self._read()
        if data is None:
            return result
        now = self._clock()
        running: dict[str, tuple[str, dict]] = {}
        for pool_id, pool in data.get("pools", {}).items():
            for node in pool.get("nodes") or []:
                if float(node.get("ready_at", 0)) <= now:
                    running[str(node["node_id"])] = (pool_id, node)
        mine = {n["metadata"]["name"]: n for n in self.cluster.nodes()
                if str((n.get("spec") or {}).get("providerID", "")).startswith(PROVIDER_PREFIX)}
        for name in sorted(set(mine) - set(running)):
            self.cluster.remove_node(name)
            result.removed.append(name)
        for name, (pool_id, sim_node) in sorted(running.items()):
            if name not in mine:
                if self.cluster.store.peek("nodes", "", name) is not None:
                    continue  # a node someone else registered under that name: leave it alone
                config = self.pools.get(pool_id)
                if config is None:
                    config = PoolNodes()
                    if pool_id not in self._warned:
                        self._warned.add(pool_id)
                        log.warning("event=nodesync_unknown_pool pool=%s known=%s gpus=0", pool_id,
                                    sorted(self.pools))
                self.cluster.add_node(name, labels={self.pool_label: pool_id, **config.labels}, gpus=config.gpus,
                                      taints=list(config.taints), cpu=config.cpu, memory=config.memory,
                                      provider_id=f"{PROVIDER_PREFIX}{pool_id}/{name}")
                result.added.append(name)
            if sim_node.get("notice_deadline") is not None and not self._noticed(name):
                self.cluster.cordon(name)
                self.cluster.taint_node(name, self.notice_taint, label_safe(str(sim_node.get("notice_id") or name)),
                                        "NoSchedule")
                result.noticed.append(name)
        if result.added or result.removed or result.noticed:
            log.info("event=nodesync added=%s removed=%s noticed=%s", ",".join(result.added) or "-",
                     ",".join(result.removed) or "-", ",".join(result.noticed) or "-")
        return result

    def _noticed(self, name: str) -> bool:
        node = self.cluster.store.peek("nodes", "", name)
        taints = ((node or {}).get("spec") or {}).get("taints") or []
        return any(t.get("key") == self.notice_taint for t in taints)

    async def start(self) -> None:
        """Sync now, then every ``interval_s`` until ``stop()``."""
        self.sync_once()
        self._task = asyncio.create_task(self._loop(), name="nodesync")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.sync_once()
            except Exception:
                log.exception("event=nodesync_failed path=%s", self.state_path)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
