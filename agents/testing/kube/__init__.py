"""A fake Kubernetes cluster on loopback for tests and demos: an API server the real
``kubernetes_asyncio`` client talks to, a scheduler, a kubelet per node that runs every container as
a real local process on its pod's own loopback IP, a node lifecycle controller and a kube-proxy.
Everything runs on the caller's asyncio loop (the only threads are asyncio's child watchers).

    cluster = FakeCluster(command_map={"meridian/replica:1": ["python", "-m", "runtime_adapter", "serve"]})
    await cluster.start()
    cluster.add_node("gpu-1", labels={"meridian.dev/pool": "l4"}, gpus=1)
    api_client = await kubernetes_asyncio.config.new_client_from_config(str(cluster.kubeconfig(path)))
    ...
    await cluster.stop()   # every container's process group is killed and reaped

What of the real API it covers (core/v1, JSON):
- ``/version``, ``/api``, ``/api/v1`` (resource list), ``/apis`` (no groups), ``/healthz``;
  pods, services, nodes, namespaces and events: get, list, watch, create, replace (PUT), patch
  (strategic merge, JSON merge, JSON patch), delete, deletecollection; the ``status`` subresource of
  pods, services, nodes and namespaces; ``pods/{name}/log`` (``container``, ``previous``,
  ``tailLines``, ``limitBytes``, ``follow``), ``pods/{name}/eviction`` (policy/v1: a graceful delete),
  ``pods/{name}/binding``; ``/api/v1/watch/...`` paths.
- One global resourceVersion counter; ``uid``, ``creationTimestamp``, ``generation``; list
  ``metadata.resourceVersion``; ``limit``/``continue`` on a consistent snapshot; ``resourceVersion`` /
  ``resourceVersionMatch`` semantics for list (NotOlderThan, Exact) and watch (0/unset: initial
  ADDED events; N: changes after N); a per-resource window of ``compaction_window`` changes, after
  which a watch gets an ERROR event with a 410 Expired Status and a list/continue a 410; 504 for a
  version from the future; BOOKMARK events (``allowWatchBookmarks``), ``sendInitialEvents``;
  ``timeoutSeconds``; label selectors (=, ==, !=, in, notin, exists, !key) and the field selectors
  each resource supports; a watched object leaving a selector arrives as DELETED.
- Status errors with the real ``reason``/``code`` and wording: 400 BadRequest, 401 Unauthorized
  (``token``; as a server with ``--anonymous-auth=false``), 403 (namespace terminating), 404
  NotFound, 405, 409 AlreadyExists/Conflict (stale resourceVersion, preconditions), 410 Expired,
  415, 422 Invalid with field causes (names, labels, containers, ports, probes, resources,
  tolerations, affinity, volumes and mounts, immutable pod spec), 504.
- Defaults: pod restartPolicy, terminationGracePeriodSeconds 30, the not-ready/unreachable
  NoExecute tolerations (300 s), probe defaults, imagePullPolicy, requests from limits, qosClass;
  Service ClusterIP from ``service_cidr``, NodePorts 30000-32767, LoadBalancer ingress from
  ``lb_cidr``; graceful pod deletion (``deletionTimestamp``/``deletionGracePeriodSeconds``, removal
  by the kubelet; unbound or finished pods and ``gracePeriodSeconds=0`` are removed at once);
  finalizers; namespaces (pre-created default, kube-system, kube-public, kube-node-lease).
- Scheduler: nodeSelector, required node affinity (matchExpressions, matchFields metadata.name),
  taints/tolerations (NoSchedule, NoExecute), cordons, cpu/memory/pods/extended resources
  (``nvidia.com/gpu``), least-allocated choice, the real ``0/N nodes are available: ...`` message,
  FailedScheduling/Scheduled events, retries on every change.
- Kubelet: argv from command+args with ``$(VAR)`` expansion (or ``command_map[image]``; unknown
  image: ErrImagePull/ImagePullBackOff), env with fieldRef/resourceFieldRef over the fake's own
  environment, cwd ``<workdir>/pods/<uid>``, a log file per run; a pod IP from ``pod_cidr`` each;
  phases, conditions, containerStatuses as the kubelet reports them; readiness/liveness/startup
  probes (httpGet, tcpSocket, exec) with their periods and thresholds; restarts by restartPolicy with
  CrashLoopBackOff (first restart at once, then 10 s doubling to 300 s, times
  ``restart_backoff_scale``); init containers; postStart/preStop hooks; termination: preStop within
  the grace, SIGTERM to the process group, SIGKILL at the end (+2 s when preStop overran); events.
- Faults: node-pressure eviction (Failed/Evicted, DisruptionTarget), API eviction, graceful node
  shutdown (Ready=False "node is shutting down"; pods Failed/Terminated; new pods rejected), node
  removal (SIGKILL; pods Failed/NodeLost then deleted by pod GC), taints and conditions with the
  node lifecycle controller's taints (not-ready, unreachable, unschedulable, pressure) and the taint
  manager's NoExecute eviction after ``tolerationSeconds``; ``pause_api``/``resume_api``.
- kube-proxy: TCP from ClusterIP:port, every node's IP:nodePort and the LoadBalancer IP:port, round
  robin over Ready, non-terminating endpoints; a reset when there is none.

What it does not model: other API groups (apps/v1 Deployments, batch, CRDs such as LeaderWorkerSet,
events.k8s.io, discovery EndpointSlices and core Endpoints objects), server-side apply, protobuf and
Table output, RBAC and other authenticators (one bearer token only), admission webhooks, PodDisruption
Budgets (eviction always proceeds), owner-reference garbage collection and propagationPolicy,
resource quotas and limit ranges, pod priority preemption, topology spread and pod (anti-)affinity,
preferred node affinity, DNS, ConfigMaps, Secrets and envFrom (a reference fails the container with
CreateContainerConfigError), volumes (validated, never mounted: the process sees the host's file
system), image contents (``command_map`` stands in), container image updates in place, cgroup limits
(requests only count for scheduling), OOM kills, activeDeadlineSeconds, sidecar (restartable) init
containers, grpc probes, UDP services, session affinity, externalTrafficPolicy Local, leases and node
heartbeats, the kubelet's own API, kubelet restarts, and watch-cache lag (every write is visible at
once). Components write the store directly, so while the API is paused they keep working and their
changes wait for the watches."""

from agents.testing.kube.cluster import FakeCluster
from agents.testing.kube.nodesync import NodeSync, PoolNodes
from agents.testing.kube.objects import ApiError

__all__ = ["ApiError", "FakeCluster", "NodeSync", "PoolNodes"]
