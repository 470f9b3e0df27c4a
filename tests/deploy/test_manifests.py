"""The Kubernetes manifests under deploy/kubernetes/: every overlay renders with `kubectl kustomize`,
every rendered object validates offline against the Kubernetes API schemas, and what an operator
relies on holds: no secret on a command line, limits and probes on every container, non-root
and locked-down containers, selectors that match, the agent's RBAC exactly what its backend needs."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from meridian import spec
from meridian.spec import replicas as replicas_spec
from router import config as router_config
from scheduler import service as scheduler_service
from tests.integration import tls_certs

REPO = pathlib.Path(__file__).resolve().parents[2]
KUBE = REPO / "deploy" / "kubernetes"
OVERLAYS = sorted(p.parent.name for p in (KUBE / "overlays").glob("*/kustomization.yaml"))
# Schemas: 1.31 (the oldest minor still supported, under extended support, by EKS and AKS at the
# time of writing) and the newest that kubernetes-validate ships.
SCHEMA_VERSIONS = ["1.31.0", kubernetes_validate.latest_version()]
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
# Flags that name where a secret is (a file path), not the secret itself.
SECRET_WORDS = re.compile(r"token|password|secret|api[-_]?key|credential|private", re.I)
# What the agent's kubernetes replica backend calls, by API group and resource (kube-design.md).
AGENT_ROLE = {("", "pods"): {"create", "delete", "get", "list", "watch", "patch"},
              ("", "pods/log"): {"get"},
              ("", "services"): {"create", "delete", "get", "list", "watch"},
              ("", "events"): {"create", "patch"}}
AGENT_CLUSTER_ROLE = {("", "nodes"): {"get", "list", "watch"}}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    """overlay name -> the objects `kubectl kustomize` renders for it."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not installed: `make test` needs Debian's kubectl (its kustomize renders the overlays)"
    out = {}
    for name in OVERLAYS:
        result = subprocess.run([kubectl, "kustomize", str(KUBE / "overlays" / name)], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, f"overlay {name}: {result.stderr}"
        out[name] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return out


def pod_specs(objects: list[dict]):
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            yield obj, obj["spec"]["template"]


def containers(objects: list[dict]):
    for obj, template in pod_specs(objects):
        for c in template["spec"].get("initContainers", []) + template["spec"]["containers"]:
            yield obj, template, c


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_overlays_cover_the_control_plane_and_each_clouds_agent():
    """There is an overlay for the control plane (in-cluster and load-balanced), for the scheduler and
    the routers apart (other clusters' agents and routers reach them), and an agent per cloud."""
    assert set(OVERLAYS) == {"control-plane", "control-plane-loadbalancer", "scheduler", "router",
                             "agent-eks", "agent-gke", "agent-aks"}


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_the_kubernetes_schema(rendered, overlay, version):
    """Each rendered object is valid for the API version's schema (strict: no unknown fields)."""
    assert rendered[overlay]
    for obj in rendered[overlay]:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{overlay}: {obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_in_args_or_env_values(rendered, overlay):
    """No container gets a secret on its command line or as a literal env value: secrets come
    from Secret volumes (files) or secretKeyRef; a flag may only name the file."""
    for obj, _t, c in containers(rendered[overlay]):
        for arg in c.get("command", []) + c.get("args", []):
            flag, sep, value = arg.partition("=")
            if sep and flag.startswith("-") and SECRET_WORDS.search(flag):
                assert flag.endswith("-file") and value.startswith("/etc/meridian/secrets/"), \
                    f"{overlay}: {obj['metadata']['name']}/{c['name']}: {arg!r} passes a secret on the command line"
            assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", arg), f"{overlay}: credentials in a URL: {arg!r}"
        for env in c.get("env", []):
            assert not re.search(r"://[^/\s:@]*:[^/\s@]+@", env.get("value", "")), \
                f"{overlay}: {c['name']}: env {env['name']} holds credentials in a URL"
            if SECRET_WORDS.search(env["name"]):
                assert "value" not in env, f"{overlay}: {c['name']}: env {env['name']} holds a literal secret"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_are_mounted_from_secret_objects(rendered, overlay):
    """Every file a --*-token-file / --*-key-file flag names lies on a volume backed by a Secret."""
    for obj, template, c in containers(rendered[overlay]):
        volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
        volumes |= {v["metadata"]["name"]: {"persistentVolumeClaim": v} for v in obj["spec"].get("volumeClaimTemplates", [])}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in c.get("volumeMounts", [])}
        for arg in c.get("args", []):
            flag, sep, path = arg.partition("=")
            if sep and flag.startswith("-") and SECRET_WORDS.search(flag):
                backing = [v for mount, v in mounts.items() if path.startswith(mount.rstrip("/") + "/")]
                assert backing and "secret" in backing[0], f"{overlay}: {arg} is not on a Secret volume"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_limits_requests_and_probes(rendered, overlay):
    """CPU and memory are requested and limited, and readiness and liveness probes are set."""
    seen = 0
    for obj, _t, c in containers(rendered[overlay]):
        seen += 1
        name = f"{overlay}: {obj['metadata']['name']}/{c['name']}"
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(c.get("resources", {}).get(part, {})), f"{name}: no cpu/memory {part}"
        assert "readinessProbe" in c and "livenessProbe" in c, f"{name}: probes missing"
    assert seen


# The health endpoints each program really serves (scheduler/admin/api.py, router/app.py, agents/status.py).
HEALTH_PATHS = {"scheduler": {"/healthz"}, "router": {"/ready", "/health"}, "agent": {"/healthz"}}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_hit_the_programs_health_endpoints_on_declared_ports(rendered, overlay):
    """HTTP probes use a path the program serves, on a port the container declares."""
    for _obj, _t, c in containers(rendered[overlay]):
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe"):
            http = c[probe].get("httpGet")
            if http is None:
                continue
            assert http["port"] in ports or http["port"] in ports.values(), f"{c['name']}: probe port {http['port']}"
            assert http["path"] in HEALTH_PATHS[c["name"]], f"{c['name']}: {http['path']} is not a health endpoint"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_containers_run_non_root_read_only_without_capabilities(rendered, overlay):
    """Pods run as a non-root UID with the RuntimeDefault seccomp profile; containers drop every
    capability, cannot escalate, and have a read-only root filesystem."""
    for obj, template in pod_specs(rendered[overlay]):
        pod = template["spec"].get("securityContext", {})
        assert pod.get("runAsNonRoot") is True and pod.get("runAsUser", 0) > 0, obj["metadata"]["name"]
        assert pod.get("seccompProfile", {}).get("type") == "RuntimeDefault", obj["metadata"]["name"]
    for _obj, _t, c in containers(rendered[overlay]):
        sc = c.get("securityContext", {})
        assert sc.get("allowPrivilegeEscalation") is False, c["name"]
        assert sc.get("readOnlyRootFilesystem") is True, c["name"]
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], c["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned(rendered, overlay):
    """Every container image carries an exact version tag (no latest, no bare name)."""
    for _obj, _t, c in containers(rendered[overlay]):
        name, _, tag = c["image"].rpartition(":")
        assert name and re.fullmatch(r"v?\d+\.\d+\.\d+[-.\w]*", tag), f"{overlay}: {c['image']}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pdb_and_service_selectors_match_pods(rendered, overlay):
    """Each PodDisruptionBudget selects the pods of exactly one workload, each Service selects
    pods that exist and name a port those pods declare, and no Deployment goes without a PDB
    unless it runs a single replica."""
    objects = rendered[overlay]
    workloads = list(pod_specs(objects))
    for pdb in by_kind(objects, "PodDisruptionBudget"):
        sel = pdb["spec"]["selector"]["matchLabels"]
        hits = [o for o, t in workloads if matches(sel, t["metadata"]["labels"])]
        assert len(hits) == 1, f"{overlay}: PDB {pdb['metadata']['name']} selects {len(hits)} workloads"
        assert matches(hits[0]["spec"]["selector"]["matchLabels"], t_labels(hits[0]))
    for svc in by_kind(objects, "Service"):
        sel = svc["spec"].get("selector", {})
        hits = [(o, t) for o, t in workloads if matches(sel, t["metadata"]["labels"])]
        assert sel and hits, f"{overlay}: Service {svc['metadata']['name']} selects no pods"
        declared = {p.get("name") for _o, t in hits for c in t["spec"]["containers"] for p in c.get("ports", [])}
        declared |= {p["containerPort"] for _o, t in hits for c in t["spec"]["containers"] for p in c.get("ports", [])}
        for port in svc["spec"]["ports"]:
            assert port.get("targetPort", port["port"]) in declared, f"{svc['metadata']['name']}: {port}"
    protected = {o["metadata"]["name"] for pdb in by_kind(objects, "PodDisruptionBudget")
                 for o, t in workloads if matches(pdb["spec"]["selector"]["matchLabels"], t["metadata"]["labels"])}
    for obj, _t in workloads:
        if obj["kind"] == "Deployment" and obj["spec"].get("replicas", 1) > 1:
            assert obj["metadata"]["name"] in protected, f"{overlay}: {obj['metadata']['name']} has no PDB"


def t_labels(workload: dict) -> dict:
    return workload["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o.startswith("agent-")])
def test_agent_role_grants_exactly_what_the_backend_needs(rendered, overlay):
    """The agent's Role (its namespace) and ClusterRole (nodes) grant exactly the kubernetes backend's
    calls, bound to the agent's ServiceAccount, and nothing else."""
    objects = rendered[overlay]

    def grants(role: dict) -> dict:
        out: dict = {}
        for rule in role["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    out.setdefault((group, resource), set()).update(rule["verbs"])
        return out

    (role,) = by_kind(objects, "Role")
    (cluster_role,) = by_kind(objects, "ClusterRole")
    assert grants(role) == AGENT_ROLE
    assert grants(cluster_role) == AGENT_CLUSTER_ROLE
    (deployment,) = by_kind(objects, "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    namespace = deployment["metadata"]["namespace"]
    assert role["metadata"]["namespace"] == namespace
    for binding, target in ((by_kind(objects, "RoleBinding"), role), (by_kind(objects, "ClusterRoleBinding"), cluster_role)):
        (b,) = binding
        assert b["roleRef"]["name"] == target["metadata"]["name"]
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]


IDENTITY = {"agent-eks": ("annotation", "eks.amazonaws.com/role-arn"),
            "agent-gke": ("annotation", "iam.gke.io/gcp-service-account"),
            "agent-aks": ("annotation", "azure.workload.identity/client-id")}


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o.startswith("agent-")])
def test_agent_is_one_replica_recreate_with_its_state_on_a_pvc_and_its_clouds_identity(rendered, overlay):
    """One agent per cluster (never two at once), its state dir on a PersistentVolumeClaim, and the
    ServiceAccount annotated with the cloud's workload identity from the overlay's identity.env."""
    objects = rendered[overlay]
    (deployment,) = by_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    state_dir = next(a.partition("=")[2] for a in container["args"] if a.startswith("--state-dir="))
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == state_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    claims = {p["metadata"]["name"] for p in by_kind(objects, "PersistentVolumeClaim")}
    assert volume["persistentVolumeClaim"]["claimName"] in claims
    (account,) = by_kind(objects, "ServiceAccount")
    identity = dict(line.split("=", 1) for line in (KUBE / "overlays" / overlay / "identity.env").read_text().split())
    key = IDENTITY[overlay][1]
    assert account["metadata"]["annotations"][key] == next(iter(identity.values()))
    if overlay == "agent-aks":
        assert deployment["spec"]["template"]["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert not by_kind(objects, "Secret"), "overlays carry no Secret: they are created with kubectl"
    assert all(not o["metadata"]["name"].startswith("meridian-agent-identity") for o in objects)


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o.startswith("agent-")])
def test_agent_cluster_spec_validates_and_points_at_the_mounts(rendered, overlay):
    """The overlay's Cluster spec passes Meridian's own validation, reads its token from the mounted
    Secret, keeps its state on the PVC and serves its status on the port the probes use."""
    objects = rendered[overlay]
    (config_map,) = [o for o in by_kind(objects, "ConfigMap") if o["metadata"]["name"].startswith("meridian-agent-cluster")]
    text = config_map["data"]["cluster.yaml"]
    (cluster,) = spec.load_text(text, f"{overlay}/cluster.yaml").of_kind("Cluster")
    (deployment,) = by_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert cluster.spec.auth.token_file and any(cluster.spec.auth.token_file.startswith(m + "/") for m in mounts)
    assert any(a == f"--state-dir={cluster.spec.agent.state_dir}" for a in container["args"])
    assert cluster.spec.agent.metrics_port == next(p["containerPort"] for p in container["ports"] if p["name"] == "status")
    assert cluster.spec.replicas.backend == "kubernetes"
    assert cluster.spec.replicas.kubernetes.namespace == deployment["metadata"]["namespace"]


def test_control_plane_configs_load(rendered, tmp_path):
    """The scheduler's start-up specs validate and the routers' --config file loads, as the programs
    read them, with real PEM files where its TLS settings point (the router checks each at load)."""
    objects = rendered["control-plane"]
    specs = next(o for o in objects if o["metadata"]["name"].startswith("meridian-scheduler-specs"))
    for name, text in specs["data"].items():
        assert spec.load_text(text, name).documents
    router_cm = next(o for o in objects if o["metadata"]["name"].startswith("meridian-router-config"))
    settings = yaml.safe_load(router_cm["data"]["router.yaml"])
    pki = tls_certs.make(tmp_path / "pki")
    pem = {"tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key, "scheduler_tls_ca_file": pki.ca}
    assert set(pem) <= set(settings), f"router.yaml lacks TLS settings: {sorted(set(pem) - set(settings))}"
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(settings | pem))
    cfg = router_config.load(str(path), {})
    (router,) = [o for o in by_kind(objects, "Deployment") if o["metadata"]["name"] == "meridian-router"]
    (container,) = router["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (cfg.listen_host, cfg.listen_port, cfg.metrics_port) == ("0.0.0.0", ports["https"], ports["metrics"])
    assert cfg.scheduler_address.split(":")[0] in {s["metadata"]["name"] for s in by_kind(objects, "Service")}


def test_grace_periods_outlast_the_programs_stop(rendered, tmp_path):
    """The kubelet kills a pod terminationGracePeriodSeconds after SIGTERM: the scheduler must be
    able to finish its stop (lease released, stores closed) and the router to drain the requests it
    is serving (``shutdown_timeout_s``, with the few seconds its other steps take) before that."""
    objects = rendered["control-plane"]
    grace = {o["metadata"]["name"]: o["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
             for o in by_kind(objects, "Deployment")}
    assert grace["meridian-scheduler"] >= scheduler_service.stop_worst_case_s(), grace
    router_cm = next(o for o in objects if o["metadata"]["name"].startswith("meridian-router-config"))
    settings = yaml.safe_load(router_cm["data"]["router.yaml"])
    shutdown_s = settings.get("shutdown_timeout_s", router_config.RouterConfig().shutdown_timeout_s)
    assert grace["meridian-router"] >= shutdown_s + 5, (grace, shutdown_s)


def test_loadbalancer_overlay_exposes_routers_and_the_scheduler_grpc_only(rendered):
    """The load-balanced overlay turns the router Service and the scheduler's gRPC port into load
    balancers and keeps the admin API inside the cluster."""
    lbs = [s for s in by_kind(rendered["control-plane-loadbalancer"], "Service") if s["spec"].get("type") == "LoadBalancer"]
    assert {s["metadata"]["name"] for s in lbs} == {"meridian-router", "meridian-scheduler-grpc"}
    assert all(p["port"] != 7071 for s in lbs for p in s["spec"]["ports"])
    assert not any(s["spec"].get("type") == "LoadBalancer" for s in by_kind(rendered["control-plane"], "Service"))


def test_scheduler_and_router_overlays_split_the_control_plane(rendered):
    """The scheduler overlay and the router overlay are the two halves of the load-balanced control
    plane: together the same objects, the scheduler's holding no router and the router's no scheduler
    or Redis."""
    def names(overlay: str) -> set[tuple[str, str]]:
        return {(o["kind"], o["metadata"]["name"]) for o in rendered[overlay]}
    assert names("scheduler") | names("router") == names("control-plane-loadbalancer")
    assert not names("scheduler") & names("router")
    assert not any("router" in name for _kind, name in names("scheduler"))
    assert not any("scheduler" in name or "redis" in name for _kind, name in names("router"))


def test_redis_and_replicas_are_fenced_by_network_policies(rendered):
    """Redis admits only the scheduler's pods; replica pods admit routers and the agent on the
    engine port and only the agent on the adapter port."""
    (redis,) = [p for p in by_kind(rendered["control-plane"], "NetworkPolicy") if p["metadata"]["name"] == "meridian-redis"]
    assert redis["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "meridian-scheduler"}}}],
                                         "ports": [{"protocol": "TCP", "port": 6379}]}]
    (replicas,) = by_kind(rendered["agent-eks"], "NetworkPolicy")
    rules = {p["port"]: [f.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name")
                         for f in r["from"]] for r in replicas["spec"]["ingress"] for p in r["ports"]}
    assert sorted(rules[30000]) == ["meridian-agent", "meridian-router"] and rules[30001] == ["meridian-agent"]
    # The HTTPS port a pod serves with replicas.kubernetes.tls_secret (its default) is open as the engine's is.
    tls_port = replicas_spec.KubernetesReplicas.model_fields["tls_port"].default
    assert sorted(rules[tls_port]) == ["meridian-agent", "meridian-router"]
