"""Terraform applies deploy/kubernetes/ as it is: every module with a ``kustomization_overlay`` is
rendered here as Terraform would render it (its expressions evaluated by ``terraform console``,
tests/terraform/evaluate.py; the overlay plus its generators and patches built by
``kubectl kustomize``) and checked against the overlay it names: the overlay exists, every patch
and generator meets an object (and container, and JSON-patch path) the overlay has, the result is
valid Kubernetes, every file a program is pointed at (a flag's path, a ``*_file`` setting in the
config files it reads) lies on a mounted ConfigMap or Secret that has that key, every Secret the
pods read is one Terraform creates (with that key, in that namespace), every Secret and ConfigMap
Terraform creates is read, a replaced config keeps every setting of the overlay's own, workload
identity names the ServiceAccount the overlay renders, and an address a module outputs uses a port
its load balancer serves; what Terraform applies keeps TLS on every hop and the Redis password
(tests/deploy/kube.py), and the scheduler's certificate names the address it outputs. Nothing here lists today's names: a module or an overlay that changes
on one side only fails."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import kubernetes_validate
import pytest
import yaml

from tests.deploy import kube
from tests.terraform import evaluate, hcl

KUBE = hcl.ROOT / "deploy" / "kubernetes"
MANIFESTS = "<var.manifests_path>"
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
# The keys cert-manager writes into a Certificate's Secret.
CERTIFICATE_KEYS = {"tls.crt", "tls.key", "ca.crt"}
# Placeholder registry of the manifests' images: Terraform must set every image it deploys.
EXAMPLE_REGISTRY = "registry.example.com/"
IDENTITY = [re.compile(r"system:serviceaccount:(?P<ns>[^:]+):(?P<sa>[^:\s\"]+)"),
            re.compile(r"\.svc\.id\.goog\[(?P<ns>[^/]+)/(?P<sa>[^\]]+)\]")]


def _with_overlay() -> list[pathlib.Path]:
    return [d for d in hcl.module_dirs() if hcl.of_type(hcl.load(d), "data", "kustomization_overlay")]


def _cases():
    """Each module with an overlay, once with its defaults and once per other value of a variable
    its validation limits to a list (e.g. every redis_mode)."""
    for directory in _with_overlay():
        module = hcl.load(directory)
        rel = str(directory.relative_to(hcl.TERRAFORM))
        yield pytest.param(directory, (), id=rel)
        for name, values in evaluate.choices(module).items():
            default = module.variables[name].get("default")
            for value in values:
                if value != default:
                    yield pytest.param(directory, ((name, value),), id=f"{rel}:{name}={value}")
        if "router_cidrs" in module.variables:  # routers in other clusters: the NetworkPolicy patch
            yield pytest.param(directory, (("router_cidrs", ("198.51.100.0/24",)),), id=f"{rel}:router_cidrs")


CASES = list(_cases())


def _walk_strings(value, out: list[str]) -> list[str]:
    if isinstance(value, dict):
        for v in value.values():
            _walk_strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _walk_strings(v, out)
    elif isinstance(value, str):
        out.append(value)
    return out


def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not installed: `make test` needs Debian's kubectl (its kustomize renders the overlays)"
    return kubectl


def _kustomize(directory: pathlib.Path) -> list[dict]:
    result = subprocess.run([_kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kustomize {directory}: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


class Rendered:
    """One module's overlay as Terraform renders it, and what the module creates beside it."""

    def __init__(self, directory: pathlib.Path, overrides: tuple):
        self.module = hcl.load(directory)
        self.name = str(directory.relative_to(hcl.TERRAFORM)) + "".join(f" {k}={v}" for k, v in overrides)
        scope = evaluate.scope(self.module, dict(overrides))
        (self.overlay_body,) = hcl.of_type(self.module, "data", "kustomization_overlay").values()
        body = self.overlay_body
        secrets = hcl.of_type(self.module, "resource", "kubernetes_secret")
        config_maps = hcl.of_type(self.module, "resource", "kubernetes_config_map")
        namespaces = hcl.of_type(self.module, "resource", "kubernetes_namespace")
        manifests = hcl.of_type(self.module, "resource", "kubectl_manifest")
        identities = [s for s in _walk_strings(self.module.blocks.get("data", []) + self.module.blocks.get("resource", []), [])
                      if any(p.search(s) for p in IDENTITY)]
        dynamic = [d["patches"] for d in body.get("dynamic", []) if "patches" in d]
        outputs = {name: o["value"] for name, o in self.module.outputs.items()}

        def objects(resources: dict) -> str:
            return scope.hcl([{"name": r["metadata"][0]["name"], "namespace": r["metadata"][0].get("namespace"),
                               "keys": sorted(r.get("data", {})) if isinstance(r.get("data"), dict) else [],
                               "count": r.get("count", 1)} for r in resources.values()])

        (self.resources, self.namespace, self.generators, patches, self.secrets, self.config_maps,
         self.namespaces, bodies, self.identities, for_each, self.outputs) = evaluate.console([
            scope.hcl(body["resources"]), scope.hcl(body.get("namespace")),
            scope.hcl(body.get("config_map_generator", [])), scope.hcl(body.get("patches", [])),
            objects(secrets), objects(config_maps),
            scope.hcl([n["metadata"][0]["name"] for n in namespaces.values()]),
            scope.hcl([m["yaml_body"] for m in manifests.values()]),
            scope.hcl(identities), scope.hcl([d["for_each"] for d in dynamic]),
            # Outputs that iterate over apply-time values cannot be evaluated here: null.
            "{" + ", ".join(f"{json.dumps(k)} = try({scope.hcl(v)}, null)" for k, v in outputs.items()) + "}"])
        extra = []
        for block, items in zip(dynamic, for_each):
            pairs = items.items() if isinstance(items, dict) else enumerate(items)
            for key, value in pairs:
                inner = evaluate.Scope(self.module, scope.variables,
                                       {"patches.key": json.dumps(key), "patches.value": json.dumps(value)})
                extra.append(inner.hcl(block["content"][0]))
        self.patches = patches + (evaluate.console(extra) if extra else [])
        self.secrets = [s for s in self.secrets if s["count"]]
        self.config_maps = [c for c in self.config_maps if c["count"]]
        self.certificates = [doc for doc in map(yaml.safe_load, bodies) if doc.get("kind") == "Certificate"]
        self.certificate_secrets = [{"name": doc["spec"]["secretName"], "namespace": doc["metadata"].get("namespace"),
                                     "keys": sorted(CERTIFICATE_KEYS)} for doc in self.certificates]
        self.overlays = []
        for path in self.resources:
            assert path.startswith(MANIFESTS + "/"), f"{self.name}: overlay {path!r} is not under var.manifests_path"
            self.overlays.append(KUBE / path[len(MANIFESTS) + 1:])
        for overlay in self.overlays:
            assert (overlay / "kustomization.yaml").is_file(), \
                f"{self.name}: {overlay.relative_to(hcl.ROOT)} is not a kustomize overlay of deploy/kubernetes"
        self.base = [o for overlay in self.overlays for o in _kustomize(overlay)]
        self.final = self._render()
        self.namespace = self.namespace or next(o["metadata"].get("namespace") for o in self.final
                                                if o["kind"] in WORKLOADS)

    def _render(self) -> list[dict]:
        with tempfile.TemporaryDirectory() as tmp:
            kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                             "resources": [os.path.relpath(o, tmp) for o in self.overlays]}
            if self.namespace:
                kustomization["namespace"] = self.namespace
            if self.generators:
                kustomization["configMapGenerator"] = [
                    {k: v for k, v in g.items() if v not in (None, [], {})} for g in self.generators]
            if self.patches:
                kustomization["patches"] = [{"target": p["target"][0], "patch": p["patch"]} for p in self.patches]
            (pathlib.Path(tmp) / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
            return _kustomize(pathlib.Path(tmp))

    # What the rendered objects are.
    def find(self, objects: list[dict], kind: str, name: str) -> dict | None:
        return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)

    def provided_secrets(self) -> list[dict]:
        """Secrets Terraform creates for these pods: the module's, its Certificates', and those the
        example creates beside the module call (a Secret the caller names)."""
        example = hcl.load(evaluate.EXAMPLE)
        callers = evaluate.console([evaluate.scope(example).hcl(
            [{"name": r["metadata"][0]["name"], "keys": sorted(r.get("data", {}))}
             for r in hcl.of_type(example, "resource", "kubernetes_secret").values()])])[0]
        return self.secrets + self.certificate_secrets + [dict(c, namespace=None) for c in callers]


@functools.cache
def rendered(directory: pathlib.Path, overrides: tuple) -> Rendered:
    return Rendered(directory, overrides)


def _containers(objects: list[dict]):
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            pod = obj["spec"]["template"]["spec"]
            for c in pod.get("initContainers", []) + pod["containers"]:
                yield obj, pod, c


def _file_references(r: Rendered):
    """(workload, container, where, path) of every file a program is pointed at: flags' absolute
    paths, and the ``*_file`` settings of the config files those flags name."""
    for obj, pod, c in _containers(r.final):
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = sorted(((m["mountPath"].rstrip("/"), volumes.get(m["name"], {})) for m in c.get("volumeMounts", [])),
                        key=lambda mv: -len(mv[0]))
        for arg in c.get("args", []) + c.get("command", []):
            _flag, sep, path = arg.partition("=")
            if sep and path.startswith("/"):
                yield obj, c, arg, path, mounts
                content = _content(r, path, mounts)
                if isinstance(content, dict):
                    for key_path, value in _leaves(content):
                        if key_path[-1].endswith("_file") and isinstance(value, str) and value:
                            yield obj, c, f"{path}: {'.'.join(key_path)}", value, mounts


def _leaves(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, prefix + (str(k),))
    elif not isinstance(doc, list):
        yield prefix, doc


def _backing(path: str, mounts):
    """(volume, key) a path lies on: the longest mount that holds it; key None for the mount itself."""
    for mount, volume in mounts:
        if path == mount:
            return volume, None
        if path.startswith(mount + "/"):
            return volume, path[len(mount) + 1:]
    return None, None


def _content(r: Rendered, path: str, mounts):
    volume, key = _backing(path, mounts)
    if volume and key and "configMap" in volume:
        cm = r.find(r.final, "ConfigMap", volume["configMap"]["name"])
        if cm and key in cm.get("data", {}):
            try:
                return yaml.safe_load(cm["data"][key])
            except yaml.YAMLError:
                return None
    return None


def _literals(generator: dict) -> dict[str, str]:
    return dict(lit.split("=", 1) for lit in generator.get("literals", []))


@pytest.mark.parametrize("directory, overrides", CASES)
def test_patches_and_generators_meet_what_the_overlay_has(directory, overrides):
    """Every patch targets an object the overlay renders; a strategic merge patch names only
    containers the object has; a JSON patch's path (its parent, for an append) exists; a replaced or
    merged ConfigMap is one the overlay generates (kustomize itself refuses the rest)."""
    r = rendered(directory, overrides)
    for patch in r.patches:
        target = patch["target"][0]
        obj = r.find(r.base, target["kind"], target["name"])
        assert obj is not None, f"{r.name}: patch target {target['kind']}/{target['name']} is not in the overlay"
        body = yaml.safe_load(patch["patch"])
        if isinstance(body, list):  # JSON 6902
            for op in body:
                parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
                if op["op"] == "add":
                    parts = parts[:-1]
                node = obj
                for part in parts:
                    node = node[int(part)] if isinstance(node, list) else node.get(part) if isinstance(node, dict) else None
                    assert node is not None, f"{r.name}: JSON patch path {op['path']} not in {target['kind']}/{target['name']}"
        else:
            assert body["kind"] == target["kind"] and body["metadata"]["name"] == target["name"], \
                f"{r.name}: a patch of {target} is written for {body['kind']}/{body['metadata']['name']}"
            pod = (body.get("spec") or {}).get("template", {}).get("spec", {})
            have = {c["name"] for c in obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])}
            for c in pod.get("containers", []):
                assert c["name"] in have, f"{r.name}: {target['kind']}/{target['name']} has no container {c['name']!r} (has {sorted(have)})"
    for generator in r.generators:
        if generator.get("behavior") in ("replace", "merge"):
            assert any(o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(generator["name"] + "-")
                       for o in r.base), f"{r.name}: the overlay generates no ConfigMap {generator['name']}"


@pytest.mark.parametrize("directory, overrides", CASES)
def test_the_rendered_result_is_valid_and_uses_terraforms_images(directory, overrides):
    """What Terraform applies validates against the Kubernetes schema (strict), in one namespace, and
    no container keeps the manifests' placeholder registry; an object a patch deletes is gone."""
    r = rendered(directory, overrides)
    version = kubernetes_validate.latest_version()
    for obj in r.final:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{r.name}: {obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"].get("namespace") == r.namespace, f"{r.name}: {obj['kind']}/{obj['metadata']['name']}"
    for obj, _pod, c in _containers(r.final):
        assert not c["image"].startswith(EXAMPLE_REGISTRY), \
            f"{r.name}: {obj['metadata']['name']}/{c['name']} keeps the overlay's image {c['image']}: Terraform must set it"
    for patch in r.patches:
        if '"$patch": "delete"' in patch["patch"] or "$patch: delete" in patch["patch"]:
            target = patch["target"][0]
            assert r.find(r.final, target["kind"], target["name"]) is None, f"{r.name}: {target} not deleted"


@pytest.mark.parametrize("directory, overrides", CASES)
def test_every_file_a_program_reads_is_mounted_with_its_key(directory, overrides):
    """Each file a flag or a config's ``*_file`` setting names lies on a mounted ConfigMap that has
    the key, or on a Secret Terraform creates with the key in the pods' namespace; each Secret a pod
    mounts or takes an env value from is one of those."""
    r = rendered(directory, overrides)
    provided = r.provided_secrets()

    def secret(name: str) -> dict | None:
        return next((s for s in provided if s["name"] == name and s["namespace"] in (None, r.namespace)), None)

    for obj, c, where, path, mounts in _file_references(r):
        volume, key = _backing(path, mounts)
        who = f"{r.name}: {obj['metadata']['name']}/{c['name']} {where}"
        if volume is None:
            assert not where.endswith("_file"), f"{who}: {path} is on no volume"
            continue
        if key is None:
            continue
        if "configMap" in volume:
            cm = r.find(r.final, "ConfigMap", volume["configMap"]["name"])
            assert cm is not None and key in cm.get("data", {}), f"{who}: ConfigMap {volume['configMap']['name']} has no key {key}"
        elif "secret" in volume:
            s = secret(volume["secret"]["secretName"])
            assert s is not None, f"{who}: no Secret {volume['secret']['secretName']} is created by Terraform in {r.namespace}"
            assert key in s["keys"], f"{who}: Secret {s['name']} has keys {s['keys']}, not {key}"
    for obj, pod, c in _containers(r.final):
        for v in pod.get("volumes", []):
            if "secret" in v and not v["secret"].get("optional"):
                assert secret(v["secret"]["secretName"]), f"{r.name}: {obj['metadata']['name']} mounts Secret {v['secret']['secretName']}, which Terraform does not create"
        for env in c.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref and not ref.get("optional"):
                s = secret(ref["name"])
                assert s and ref["key"] in s["keys"], f"{r.name}: {c['name']} env {env['name']}: no Secret {ref['name']} with key {ref['key']}"


@pytest.mark.parametrize("directory, overrides", CASES)
def test_every_secret_and_config_map_terraform_creates_is_read(directory, overrides):
    """A Secret or ConfigMap the module creates in the pods' namespace is mounted or referenced by a
    pod under that very name, and each of its keys is a file a program reads or an env value (one in
    another namespace is for someone else, e.g. cert-manager's CA; a pod's Secret in the wrong
    namespace fails the test above)."""
    r = rendered(directory, overrides)
    read: dict[tuple[str, str], set[str]] = {}
    for _obj, _c, _where, path, mounts in _file_references(r):
        volume, key = _backing(path, mounts)
        if volume and key:
            source = ("Secret", volume["secret"]["secretName"]) if "secret" in volume else \
                ("ConfigMap", volume["configMap"]["name"]) if "configMap" in volume else None
            if source:
                read.setdefault(source, set()).add(key)
    for _obj, _pod, c in _containers(r.final):
        for env in c.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                read.setdefault(("Secret", ref["name"]), set()).add(ref["key"])
    for kind, objects in (("Secret", r.secrets), ("ConfigMap", r.config_maps)):
        for o in objects:
            if o["namespace"] != r.namespace:
                continue
            assert (kind, o["name"]) in read, f"{r.name}: {kind} {o['name']} is created but no pod reads it"
            unread = sorted(set(o["keys"]) - read[(kind, o["name"])])
            assert not unread, f"{r.name}: {kind} {o['name']}: keys {unread} are read by no program"
    if not any(o["kind"] == "Namespace" for o in r.final):
        assert r.namespace in r.namespaces, f"{r.name}: the overlay has no Namespace and Terraform creates none named {r.namespace}"


@pytest.mark.parametrize("directory, overrides", CASES)
def test_a_replaced_config_keeps_every_setting_of_the_overlays_own(directory, overrides):
    """A ConfigMap key Terraform replaces holds every setting of the overlay's version of it (the
    settings the Deployment relies on: ports, paths, state dir), with the overlay's value wherever
    Terraform's is fixed rather than a variable or apply-time value."""
    r = rendered(directory, overrides)
    for generator in r.generators:
        if generator.get("behavior") != "replace":
            continue
        ours = _literals(generator)
        (theirs,) = [o for o in r.base if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith(generator["name"] + "-")]
        missing_keys = sorted(set(theirs.get("data", {})) - set(ours))
        assert not missing_keys, f"{r.name}: {generator['name']}: keys {missing_keys} of the overlay are dropped"
        for key, text in theirs["data"].items():
            overlay_doc, terraform_doc = yaml.safe_load(text), yaml.safe_load(ours[key])
            if not isinstance(overlay_doc, dict):
                continue
            flat = dict(_leaves(terraform_doc))
            for path, value in _leaves(overlay_doc):
                prefixes = [path[:i] for i in range(1, len(path) + 1)]
                lists = [p for p in prefixes if isinstance(_get(terraform_doc, p), list)]
                if lists:
                    continue
                assert path in flat, f"{r.name}: {generator['name']}/{key}: {'.'.join(path)} (overlay: {value!r}) is missing"
                if not evaluate.is_marker(flat[path]):
                    assert flat[path] == value, \
                        f"{r.name}: {generator['name']}/{key}: {'.'.join(path)} is {flat[path]!r}, the overlay's {value!r}"


def _get(doc, path):
    for part in path:
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


# ServiceAccounts of add-ons the cloud installs (EKS's aws-ebs-csi-driver add-on, which the
# agent's state volume needs), trusted by a module's IAM role but rendered by no overlay.
CLOUD_ADDON_ACCOUNTS = {("kube-system", "ebs-csi-controller-sa")}


@pytest.mark.parametrize("directory, overrides", CASES)
def test_workload_identity_names_the_rendered_service_account(directory, overrides):
    """An IAM trust or binding for a Kubernetes ServiceAccount (IRSA's sub, GKE's
    PROJECT.svc.id.goog[NS/SA], AKS's federated subject) names the namespace and ServiceAccount the
    overlay renders, and the workload runs as it."""
    r = rendered(directory, overrides)
    accounts = {o["metadata"]["name"] for o in r.final if o["kind"] == "ServiceAccount"}
    used = {pod.get("serviceAccountName") for _o, pod, _c in _containers(r.final)}
    for text in r.identities:
        for pattern in IDENTITY:
            for m in pattern.finditer(text):
                if (m.group("ns"), m.group("sa")) in CLOUD_ADDON_ACCOUNTS:
                    continue  # the cloud's add-on renders and runs as this account, not an overlay
                assert m.group("ns") == r.namespace, f"{r.name}: {text!r} names namespace {m.group('ns')}, pods in {r.namespace}"
                assert m.group("sa") in accounts & used, f"{r.name}: {text!r} names ServiceAccount {m.group('sa')}; rendered: {sorted(accounts)}"


@pytest.mark.parametrize("directory, overrides", CASES)
def test_addresses_the_module_outputs_use_a_port_its_load_balancer_serves(directory, overrides):
    """An output host:port (the address agents and routers dial) is a port of a LoadBalancer Service
    Terraform applies."""
    r = rendered(directory, overrides)
    lb_ports = {p["port"] for o in r.final if o["kind"] == "Service" and o["spec"].get("type") == "LoadBalancer"
                for p in o["spec"]["ports"]}
    for name, value in r.outputs.items():
        m = re.fullmatch(r"[^\s:/]+:(\d+)", value) if isinstance(value, str) else None
        if m:
            assert int(m.group(1)) in lb_ports, f"{r.name}: output {name} = {value}: no load balancer serves port {m.group(1)}"


@pytest.mark.parametrize("directory, overrides", CASES)
def test_terraform_keeps_tls_on_every_hop_and_the_redis_password(directory, overrides):
    """What Terraform applies keeps the overlays' transport rules (tests/deploy/kube.py): the
    scheduler's gRPC and admin API over TLS, the routers' HTTPS listener and scheduler CA, the
    agents' scheduler CA, each from a Secret file, and Redis (the overlay's, or ElastiCache's auth
    token) with a password every client gets."""
    r = rendered(directory, overrides)
    assert kube.transport_problems(r.final) == [], r.name


@pytest.mark.parametrize("directory, overrides", CASES)
def test_the_scheduler_certificate_names_the_address_the_module_outputs(directory, overrides):
    """The Certificate behind the scheduler's gRPC key (cert-manager's Secret) names the host of
    every host:port the module outputs for agents and routers to dial: TLS verifies that name."""
    r = rendered(directory, overrides)
    for _obj, pod, c in kube.containers(r.final):
        if kube.program(c) != "scheduler":
            continue
        volume, _key = kube.backing(pod, c, kube.flags(c)["--tls-cert-file"])
        (certificate,) = [d for d in r.certificates if d["spec"]["secretName"] == volume["secret"]["secretName"]]
        hosts = {v.rpartition(":")[0] for v in r.outputs.values() if isinstance(v, str) and re.fullmatch(r"[^\s:/]+:\d+", v)}
        assert hosts and hosts <= set(certificate["spec"]["dnsNames"]), \
            f"{r.name}: Certificate {certificate['metadata']['name']} names {certificate['spec']['dnsNames']}, agents dial {sorted(hosts)}"


def test_every_module_with_an_overlay_is_checked():
    """The GPU cluster modules, the control plane and the router region all apply an overlay here."""
    names = {d.name for d in _with_overlay()}
    assert {"eks-gpu-cluster", "gke-gpu-cluster", "aks-gpu-cluster", "meridian-control-plane", "router-region"} <= names


def test_the_example_points_every_module_at_this_repositorys_manifests():
    """The example's manifests_path, from where Terraform runs (path.root), is deploy/kubernetes."""
    example = hcl.load(evaluate.EXAMPLE)
    scope = evaluate.scope(example)
    calls = {name: args["manifests_path"] for name, args in example.calls.items() if "manifests_path" in args}
    assert calls
    values = evaluate.console([scope.hcl(v) for v in calls.values()])
    for name, value in zip(calls, values):
        resolved = (evaluate.EXAMPLE / value.replace("<path.root>/", "")).resolve()
        assert value.startswith("<path.root>/") and resolved == KUBE, f"module {name}: manifests_path {value} -> {resolved}"


def test_each_gpu_cluster_reads_its_own_token_and_the_scheduler_gets_every_digest():
    """One token per cluster: every GPU cluster module call names a secret of its own (no two calls
    share one), and the control plane's cluster_token_digests has exactly those clusters, each the
    digest output of that cluster's own module call."""
    example = hcl.load(evaluate.EXAMPLE)
    token_args = ("token_secret_arn", "token_secret_id", "token_secret_name")
    gpu = {name: args for name, args in example.calls.items() if "cluster_id" in args}
    sources = {name: next(args[a] for a in token_args if a in args) for name, args in gpu.items()}
    assert len(set(sources.values())) == len(sources), f"two clusters read one token secret: {sources}"
    for name, source in sources.items():
        cluster = gpu[name]["cluster_id"]
        assert cluster in source, f"module {name}: its token secret {source!r} does not name cluster {cluster}"
    (control,) = [args for args in example.calls.values() if "cluster_token_digests" in args]
    scope = evaluate.scope(example)
    (digests,) = evaluate.console([scope.hcl(control["cluster_token_digests"])])
    assert digests == {args["cluster_id"]: f"<module.{name}.agent_token_digest>" for name, args in gpu.items()}
    for name in gpu:
        target = example.call_target(name)
        assert target.outputs["agent_token_digest"].get("sensitive") is True
        assert "kubernetes_secret.agent_token" in str(target.outputs["agent_token_digest"]["value"])


@pytest.mark.parametrize("directory, overrides", [c for c in CASES if dict(c.values[1]).get("router_cidrs")])
def test_router_cidrs_admit_routers_of_other_clusters_to_the_replicas(directory, overrides):
    """With router_cidrs, the replicas' NetworkPolicy as applied admits those addresses on the engine
    and TLS ports, beside this cluster's routers and agent (the overlay's rules kept)."""
    r = rendered(directory, overrides)
    (policy,) = [o for o in r.final if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "meridian-replicas"]
    rules = policy["spec"]["ingress"]
    assert len(rules) == 3
    assert rules[-1] == {"from": [{"ipBlock": {"cidr": "198.51.100.0/24"}}],
                         "ports": [{"protocol": "TCP", "port": 30000}, {"protocol": "TCP", "port": 30443}]}
