"""The ``kubernetes`` replica backend: each replica a bare pod the agent owns, pinned to the node
the agent's allocator chose, driven through kubernetes_asyncio (see docs/kubernetes.md, "How
replicas run as pods"). Modules: ``manifest`` (pure pod/Service/Event builders), ``podstate``
(pure pod status -> replica state), ``nodes`` (pure node -> usable / reclaimed), ``watch`` (list
then watch, relist on 410, reconnect with backoff), ``backend`` (the backend itself)."""

from agents.backends.kubernetes import adoption, backend, client, manifest, nodes, ops, podstate, tracked, watch
from agents.backends.kubernetes.backend import KubernetesBackend, create

__all__ = ["KubernetesBackend", "adoption", "backend", "client", "create", "manifest", "nodes", "ops", "podstate",
           "tracked", "watch"]
