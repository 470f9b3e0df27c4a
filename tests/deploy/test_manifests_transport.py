"""Transport security of the manifests under deploy/kubernetes/: every overlay (all of them are
meant for production; none is a plaintext dev overlay) serves the scheduler's gRPC port and admin
API, and the routers' client listener, over TLS; routers and agents verify the scheduler with a
CA; every certificate, key and CA is a file from a Secret; Redis requires a password from a Secret
that every Redis client gets too; no command line carries a secret; the NetworkPolicies admit each
client on the port it dials. The rules themselves live in tests/deploy/kube.py, shared with the
Terraform contract test."""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shlex

import kubernetes_validate
import pytest
import yaml

from meridian import spec
from meridian.cli import scheduler as scheduler_cli
from tests.deploy import kube

KUBE = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
OVERLAYS = sorted(p.parent.name for p in (KUBE / "overlays").glob("*/kustomization.yaml"))
SCHEMA_VERSIONS = ["1.31.0", kubernetes_validate.latest_version()]
# Flags that take a secret itself, as a value: never in a manifest (redis-server, redis-cli, SGLang).
INLINE_SECRET_FLAGS = {"--requirepass", "--masterauth", "-a", "--pass", "--api-key", "--admin-api-key",
                       "--ssl-keyfile-password", "--password", "--token"}
# Redis configuration directives whose argument is a secret: in a script, only a variable's value.
SECRET_DIRECTIVES = re.compile(r"\b(requirepass|masterauth|sentinel\s+auth-pass\s+\S+)\s+(?P<value>\S+)")


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: kube.render(KUBE / "overlays" / name) for name in OVERLAYS}


def _with(rendered: dict, program: str) -> list[str]:
    return [o for o in OVERLAYS if any(kube.program(c) == program for _w, _p, c in kube.containers(rendered[o]))]


def test_every_overlay_runs_a_component_whose_transport_is_checked(rendered):
    """The checks below see each overlay's scheduler, routers, agent or Redis: none is vacuous."""
    assert _with(rendered, "scheduler") == ["control-plane", "control-plane-loadbalancer", "scheduler"]
    assert _with(rendered, "router") == ["control-plane", "control-plane-loadbalancer", "router"]
    assert _with(rendered, "agent") == ["agent-aks", "agent-eks", "agent-gke"]
    assert _with(rendered, "redis-server") == ["control-plane", "control-plane-loadbalancer", "scheduler"]


@pytest.mark.parametrize("overlay", ["control-plane", "control-plane-loadbalancer", "scheduler"])
def test_the_scheduler_serves_grpc_and_the_admin_api_over_tls_from_secrets(rendered, overlay):
    """The scheduler's gRPC port and admin API present a certificate and key from one
    kubernetes.io/tls Secret each (tls.crt, tls.key), and its probes speak HTTPS."""
    assert kube.scheduler_tls_problems(rendered[overlay]) == []


@pytest.mark.parametrize("overlay", ["control-plane", "control-plane-loadbalancer", "router"])
def test_routers_serve_https_and_verify_the_scheduler_from_secrets(rendered, overlay):
    """The routers' client listener serves HTTPS from a Secret's tls.crt/tls.key (probes over HTTPS)
    and the link to the scheduler is TLS, verified with a CA from a Secret."""
    assert kube.router_tls_problems(rendered[overlay]) == []


@pytest.mark.parametrize("overlay", ["agent-aks", "agent-eks", "agent-gke"])
def test_agents_verify_the_scheduler_with_a_ca_from_a_secret(rendered, overlay):
    """The agent's Cluster spec reaches the scheduler over TLS with scheduler.tls.ca_file on a Secret."""
    assert kube.agent_tls_problems(rendered[overlay]) == []


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_redis_requires_a_password_that_every_client_gets(rendered, overlay):
    """Redis takes its password from a Secret (not optional), its probe authenticates, and every
    Redis client has MERIDIAN_REDIS_PASSWORD from the same Secret key."""
    assert kube.redis_auth_problems(rendered[overlay]) == []


@pytest.mark.parametrize("overlay", ["control-plane", "control-plane-loadbalancer", "scheduler"])
def test_the_scheduler_takes_its_manifest_arguments(rendered, overlay):
    """`meridian scheduler`'s own parser and config accept the Deployment's arguments, and the TLS
    files land in the settings that turn TLS on (a renamed flag fails here, not in a pod)."""
    (c,) = [c for _o, _p, c in kube.containers(rendered[overlay]) if kube.program(c) == "scheduler"]
    parser = argparse.ArgumentParser()
    scheduler_cli.add_arguments(parser)
    argv = [re.sub(r"\$\((\w+)\)", lambda m: {"POD_IP": "10.0.0.7"}.get(m.group(1), "pod-0"), a) for a in c["args"][1:]]
    config = scheduler_cli.build_config(parser.parse_args(argv))
    f = kube.flags(c)
    assert (config.tls_cert_file, config.tls_key_file) == (f["--tls-cert-file"], f["--tls-key-file"])
    assert (config.admin_tls_cert_file, config.admin_tls_key_file) == (f["--admin-tls-cert-file"], f["--admin-tls-key-file"])


def _words(c: dict) -> list[str]:
    """Every word of a container's command line, shell scripts split into theirs."""
    words = []
    for arg in c.get("command", []) + c.get("args", []):
        try:
            words += shlex.split(arg, comments=True)
        except ValueError:
            words += arg.split()
    return words


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_command_line_carries_a_secret_or_a_flag_that_takes_one(rendered, overlay):
    """No container's command or args (shell scripts included) use a flag that takes a secret
    inline, and a Redis directive that takes a secret gets it from a variable, never a literal."""
    for obj, _pod, c in kube.containers(rendered[overlay]):
        who = f"{overlay}: {obj['metadata']['name']}/{c['name']}"
        for word in _words(c):
            assert word.partition("=")[0] not in INLINE_SECRET_FLAGS, f"{who}: {word!r} takes a secret on the command line"
        for arg in c.get("command", []) + c.get("args", []):
            for m in SECRET_DIRECTIVES.finditer(arg):
                assert "$" in m.group("value") or "%s" in m.group("value"), \
                    f"{who}: {m.group(0)!r} writes a literal secret"


def _dialled(objects: list[dict]):
    """(client pod labels, Service name, port) of each address a container dials by a Service name:
    URLs and host:port values in its env and in its mounted config files."""
    services = {s["metadata"]["name"] for s in kube.by_kind(objects, "Service")}
    pattern = re.compile(r"(?:^|//|@)(?P<host>[a-z0-9-]+)(?:\.[a-z0-9.-]+)?:(?P<port>\d+)")
    for obj, pod, c in kube.containers(objects):
        labels = obj["spec"]["template"]["metadata"]["labels"]
        values = [e.get("value", "") for e in c.get("env", [])]
        for flag in ("--config", "--cluster"):
            doc = kube.config(objects, pod, c, kube.flags(c).get(flag, ""))
            values += [str(v) for v in _strings(doc)]
        for value in values:
            for m in pattern.finditer(value):
                if m.group("host") in services:
                    yield labels, m.group("host"), int(m.group("port"))


def _strings(doc):
    if isinstance(doc, dict):
        for v in doc.values():
            yield from _strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _strings(v)
    elif doc is not None:
        yield doc


def _admits(policy: dict, client: dict, pod_ports: dict, port: int) -> bool:
    for rule in policy["spec"].get("ingress", []):
        sources = rule.get("from")
        if sources is not None and not any(
                kube.matches(s.get("podSelector", {}).get("matchLabels", {}), client) for s in sources if "podSelector" in s):
            continue
        ports = rule.get("ports")
        if ports is None or any(p.get("port") in (port, pod_ports.get(port)) for p in ports):
            return True
    return False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_admit_each_client_on_the_port_it_dials(rendered, overlay):
    """For each Service address a container dials (the scheduler's Redis URL, the routers'
    scheduler_address), every NetworkPolicy over the pods behind it admits that client's pods on the
    port the Service sends to."""
    objects = rendered[overlay]
    policies = kube.by_kind(objects, "NetworkPolicy")
    checked = 0
    for client, name, port in _dialled(objects):
        service = kube.find(objects, "Service", name)
        (sp,) = [p for p in service["spec"]["ports"] if p["port"] == port] or [None]
        assert sp is not None, f"{overlay}: {name}:{port} is dialled but the Service has no port {port}"
        for obj, _pod, c in kube.containers(objects):
            labels = obj["spec"]["template"]["metadata"]["labels"]
            if not kube.matches(service["spec"]["selector"], labels):
                continue
            target = sp.get("targetPort", port)
            number = next((p["containerPort"] for p in c.get("ports", []) if target in (p.get("name"), p["containerPort"])), None)
            if number is None:
                continue
            names = {p["containerPort"]: p.get("name") for p in c.get("ports", [])}
            for policy in policies:
                if kube.matches(policy["spec"]["podSelector"].get("matchLabels", {}), labels):
                    checked += 1
                    assert _admits(policy, client, names, number), \
                        f"{overlay}: NetworkPolicy {policy['metadata']['name']} refuses {client.get('app.kubernetes.io/name')} on {number} ({name}:{port})"
    if any(kube.program(c) == "redis-server" for _o, _p, c in kube.containers(objects)):
        assert checked, f"{overlay}: the scheduler's Redis address was not found among what it dials"


COMPONENT = KUBE / "components" / "mutual-tls"


def _with_mutual_tls(overlay: str, tmp: pathlib.Path) -> list[dict]:
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(KUBE / "overlays" / overlay, tmp)],
        "components": [os.path.relpath(COMPONENT, tmp)]}))
    return kube.render(tmp)


def _documented_agent_tls() -> dict:
    """The cert_file/key_file lines the component's header tells an agent overlay to add."""
    text = (COMPONENT / "kustomization.yaml").read_text()
    lines = [line.lstrip("#").strip() for line in text.splitlines() if re.match(r"#\s+(cert|key)_file:", line)]
    return yaml.safe_load("\n".join(lines))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_mutual_tls_component_adds_client_certificates_from_secrets(overlay, tmp_path):
    """With components/mutual-tls the scheduler requires client certificates (its CA from a Secret),
    routers present theirs from a kubernetes.io/tls Secret, agents get theirs mounted where the
    component's header says their Cluster spec names it; every other transport rule still holds."""
    objects = _with_mutual_tls(overlay, tmp_path)
    for version in SCHEMA_VERSIONS:
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)
    assert kube.transport_problems(objects) == []
    for _obj, pod, c in kube.containers(objects):
        if kube.program(c) == "scheduler":
            assert kube.flags(c).get("--tls-client-ca-file"), "the scheduler does not require client certificates"
        elif kube.program(c) == "router":
            settings = kube.router_settings(objects, pod, c)
            assert settings.get("scheduler_tls_cert_file") and settings.get("scheduler_tls_key_file")
        elif kube.program(c) == "agent":
            cluster = kube.config(objects, pod, c, kube.flags(c)["--cluster"])
            cluster["spec"]["scheduler"]["tls"].update(_documented_agent_tls())
            spec.load_text(yaml.safe_dump(cluster), f"{overlay}/cluster.yaml")  # still a valid Cluster
            (cm_volume,) = [v for v in pod["volumes"] if "configMap" in v]
            cm = kube.find(objects, "ConfigMap", cm_volume["configMap"]["name"])
            cm["data"]["cluster.yaml"] = yaml.safe_dump(cluster)
            assert kube.agent_tls_problems(objects) == []
