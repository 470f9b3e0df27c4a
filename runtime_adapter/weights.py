"""Cold-start mitigation: a weights cache directory shared by the replicas of a node, and a
prefetch step run before launch.

The cache is the Hugging Face cache layout under ``<root>/hub`` (the launcher points SGLang's
``--download-dir`` and ``HF_HOME``/``HF_HUB_CACHE`` there), so every replica on the node reads the
same files and a model is downloaded once. Prefetch takes a per-model file lock, so concurrent
replicas on a node wait for one download instead of racing, and leaves a marker so later launches
skip straight to loading. After a completed prefetch the engine runs with ``HF_HUB_OFFLINE=1``:
it no longer asks the hub for metadata at start-up, which saves seconds and removes a dependency
on the hub being reachable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Protocol

from meridian import fleet

log = logging.getLogger(__name__)

# (repo_id, revision, cache_dir) -> local snapshot path; blocking, run in a worker thread.
FetchFn = Callable[[str, str, str], str]


class PrefetchError(RuntimeError):
    """The weights could not be made local; the message says which model and why."""


@dataclasses.dataclass(frozen=True)
class Prefetched:
    """Outcome of a prefetch: where the weights are, whether they were already cached, and the
    environment the engine should get (e.g. HF_HUB_OFFLINE=1)."""

    local_path: str
    cached: bool
    seconds: float
    env: dict[str, str]


class Prefetcher(Protocol):
    async def prefetch(self, spec: fleet.RuntimeSpec) -> Prefetched:
        """Make ``spec``'s weights local before launch."""


def hub_fetch(repo_id: str, revision: str, cache_dir: str) -> str:
    """Download a hub snapshot with huggingface_hub (an optional dependency of real deployments)."""
    try:
        import huggingface_hub  # optional heavy dependency, only where real weights are fetched
    except ImportError as exc:
        raise PrefetchError(f"prefetching {repo_id} needs the huggingface_hub package (pip install huggingface_hub)") from exc
    return huggingface_hub.snapshot_download(repo_id=repo_id, revision=revision or None, cache_dir=cache_dir)


class WeightsCache:
    """The node's shared weights cache at ``root`` (e.g. a local NVMe path)."""

    def __init__(self, root: str, fetch: FetchFn = hub_fetch) -> None:
        self.root = os.path.abspath(root)
        self.hub_dir = os.path.join(self.root, "hub")
        self._fetch = fetch
        os.makedirs(self.hub_dir, exist_ok=True)
        os.makedirs(os.path.join(self.root, "locks"), exist_ok=True)

    def _key(self, spec: fleet.RuntimeSpec) -> str:
        return hashlib.sha256(f"{spec.model_path}@{spec.model_revision}".encode()).hexdigest()[:16]

    def marker_path(self, spec: fleet.RuntimeSpec) -> str:
        return os.path.join(self.root, "locks", f"{self._key(spec)}.done")

    def is_cached(self, spec: fleet.RuntimeSpec) -> bool:
        return os.path.isdir(spec.model_path) or os.path.exists(self.marker_path(spec))

    async def prefetch(self, spec: fleet.RuntimeSpec) -> Prefetched:
        """Ensure the weights are in the cache (downloading once per node); a local directory
        model path needs nothing. Blocking work runs in a thread so the loop stays free."""
        t0 = time.monotonic()
        if os.path.isdir(spec.model_path):
            return Prefetched(spec.model_path, True, 0.0, {})
        local_path, cached = await asyncio.to_thread(self._prefetch_locked, spec)
        seconds = time.monotonic() - t0
        log.info("event=prefetch model=%s cached=%s seconds=%.2f", spec.model_path, cached, seconds)
        return Prefetched(local_path, cached, seconds, {"HF_HUB_OFFLINE": "1"})

    def _prefetch_locked(self, spec: fleet.RuntimeSpec) -> tuple[str, bool]:
        lock_path = os.path.join(self.root, "locks", f"{self._key(spec)}.lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another replica on the node may be downloading it
            try:
                marker = self.marker_path(spec)
                if os.path.exists(marker):
                    with open(marker) as f:
                        return json.load(f)["local_path"], True
                try:
                    local_path = self._fetch(spec.model_path, spec.model_revision, self.hub_dir)
                except PrefetchError:
                    raise
                except Exception as exc:  # the fetcher's own errors (network, auth) become one type
                    raise PrefetchError(f"could not fetch {spec.model_path}@{spec.model_revision or 'main'}: {exc}") from exc
                tmp = marker + ".tmp"
                with open(tmp, "w") as f:
                    json.dump({"local_path": local_path, "model": spec.model_path, "revision": spec.model_revision}, f)
                os.replace(tmp, marker)
                return local_path, False
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
