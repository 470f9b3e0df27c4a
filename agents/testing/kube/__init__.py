"""A fake Kubernetes control plane on loopback, for tests and demos (``FakeCluster``), driven by the
real ``kubernetes_asyncio`` client.

This step covers the API server: core/v1 pods, services, nodes, namespaces and events (CRUD, list
with label/field selectors and limit/continue, watch with bookmarks, strategic/merge/JSON patches,
the status subresource, resource versions with a compaction window and 410 Gone, 404/409/422
Status errors, bearer-token auth), the scheduler (node selectors, required node affinity, taints and
tolerations, cordons, cpu/memory/pods/``nvidia.com/gpu`` fit, the real Unschedulable message), the
kubelets (each container a real process group on its pod's loopback IP, probes, restarts with
CrashLoopBackOff, preStop/SIGTERM/SIGKILL termination, eviction, graceful node shutdown) and the node
lifecycle controller (condition taints, NoExecute eviction, pod GC with NodeLost), and Services with
a kube-proxy (ClusterIP, NodePort on every node IP, LoadBalancer ingress IPs; TCP round robin over
Ready pods)."""

from agents.testing.kube.cluster import FakeCluster
from agents.testing.kube.nodesync import NodeSync, PoolNodes
from agents.testing.kube.objects import ApiError

__all__ = ["ApiError", "FakeCluster", "NodeSync", "PoolNodes"]
