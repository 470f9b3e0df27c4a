"""Services in the fake cluster carry real HTTP: ClusterIP, NodePort and LoadBalancer addresses
forward to Ready pods round robin (the test HTTP server and the project's SGLang emulator as the
containers), and a Service with no Ready endpoint refuses connections."""

from __future__ import annotations

import asyncio
import collections

import aiohttp
import kube_helpers as h
import pytest


async def get_text(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
        return (await resp.text()).strip()


async def reachable(url: str) -> str | None:
    try:
        return await get_text(url)
    except (TimeoutError, aiohttp.ClientError):
        return None


async def ready(core, name):
    pod = await core.read_namespaced_pod(name, "default")
    return pod if {c.type: c.status for c in pod.status.conditions or []}.get("Ready") == "True" else None


def service(name: str, stype: str, **port) -> dict:
    return {"metadata": {"name": name},
            "spec": {"type": stype, "selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": "http", **port}]}}


async def test_cluster_ip_round_robins_over_ready_pods_only(cluster, core, tmp_path):
    """A ClusterIP Service forwards HTTP to its Ready pods in turn and skips a pod that is not Ready."""
    cluster.add_node("n1")
    for name in ("web-a", "web-b"):
        await core.create_namespaced_pod("default", h.pod_manifest(name))
    await core.create_namespaced_pod("default", h.pod_manifest("web-unready", env=[
        {"name": "READY_FILE", "value": str(tmp_path / "never")}]))
    await core.create_namespaced_pod("default", h.pod_manifest("db", labels={"app": "db"}))
    for name in ("web-a", "web-b", "db"):
        await h.wait_until(lambda n=name: ready(core, n), what=f"{name} ready")
    svc = await core.create_namespaced_service("default", service("web", "ClusterIP"))
    url = f"http://{svc.spec.cluster_ip}:80/"
    await h.wait_until(lambda: reachable(url), what="cluster IP answering")
    answers = collections.Counter([await get_text(url) for _ in range(6)])
    assert answers == {"web-a": 3, "web-b": 3}


async def test_node_port_answers_on_every_node(cluster, core):
    """A NodePort Service answers on each node's InternalIP at its nodePort, whichever node runs the pod."""
    cluster.add_node("n1")
    cluster.add_node("n2")
    await core.create_namespaced_pod("default", h.pod_manifest("web-a"))
    await h.wait_until(lambda: ready(core, "web-a"), what="ready")
    svc = await core.create_namespaced_service("default", service("web", "NodePort"))
    node_port = svc.spec.ports[0].node_port
    node_ips = [n.status.addresses[0].address for n in (await core.list_node()).items]
    assert len(set(node_ips)) == 2
    for ip in node_ips:
        assert await h.wait_until(lambda ip=ip: reachable(f"http://{ip}:{node_port}/"),
                                  what=f"node port on {ip}") == "web-a"


async def test_load_balancer_gets_an_ingress_ip_that_forwards(cluster, core):
    """A LoadBalancer Service gets status.loadBalancer.ingress[0].ip from lb_cidr, and that IP forwards to the pods."""
    cluster.add_node("n1")
    await core.create_namespaced_pod("default", h.pod_manifest("web-a"))
    await h.wait_until(lambda: ready(core, "web-a"), what="ready")
    await core.create_namespaced_service("default", service("web", "LoadBalancer"))

    async def ingress():
        svc = await core.read_namespaced_service("web", "default")
        lb = svc.status.load_balancer
        return lb.ingress[0].ip if lb and lb.ingress else None

    ip = await h.wait_until(ingress, what="ingress IP")
    assert ip.startswith("127.78.")
    svc = await core.read_namespaced_service("web", "default")
    assert svc.spec.ports[0].node_port  # allocateLoadBalancerNodePorts defaults to true
    assert await h.wait_until(lambda: reachable(f"http://{ip}:80/"), what="LB answering") == "web-a"
    await core.delete_namespaced_service("web", "default")
    await h.wait_until(lambda: _refused(f"http://{ip}:80/"), what="LB gone")


async def _refused(url: str) -> bool:
    try:
        await get_text(url)
    except (TimeoutError, aiohttp.ClientError):
        return True
    return False


async def test_no_ready_endpoint_refuses_then_serves_when_one_is_ready(cluster, core, tmp_path):
    """With no Ready pod a Service's connections fail; once a pod turns Ready the same address serves it."""
    cluster.add_node("n1")
    ready_file = tmp_path / "ready"
    await core.create_namespaced_pod("default", h.pod_manifest("web-a", env=[
        {"name": "READY_FILE", "value": str(ready_file)}]))
    svc = await core.create_namespaced_service("default", service("web", "ClusterIP"))
    url = f"http://{svc.spec.cluster_ip}:80/"
    await asyncio.sleep(0.5)
    assert await _refused(url)
    ready_file.write_text("ok")
    assert await h.wait_until(lambda: reachable(url), what="served once ready") == "web-a"


@pytest.mark.parametrize("stype", ["ClusterIP", "LoadBalancer"])
async def test_emulator_pods_behind_a_service_serve_openai_requests(cluster, core, stype):
    """Pods running the SGLang emulator on their pod IP turn Ready on /health and serve /v1/models through the Service."""
    cluster.add_node("gpu-1", gpus=1)
    cluster.add_node("gpu-2", gpus=1)
    for n in (1, 2):
        await core.create_namespaced_pod("default", {
            "metadata": {"name": f"engine-{n}", "labels": {"app": "engine"}},
            "spec": {"terminationGracePeriodSeconds": 5, "containers": [{
                "name": "sglang", "image": "lmsysorg/sglang:v0.5.3",
                "command": ["python", "-m", "runtime_adapter.emulator"],
                "args": ["--model-path", "test-model", "--host", "$(POD_IP)", "--port", "30000"],
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "MERIDIAN_EMULATOR_STARTUP_DELAY_S", "value": "0"},
                        {"name": "MERIDIAN_EMULATOR_WARMUP_S", "value": "0.2"}],
                "ports": [{"name": "http", "containerPort": 30000}],
                "resources": {"limits": {"nvidia.com/gpu": 1}},
                # SGLang's /health runs a 1-token generate that takes about a second: 1 s would time out.
                "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 1,
                                   "timeoutSeconds": 5}}]}})
    for n in (1, 2):
        await h.wait_until(lambda n=n: ready(core, f"engine-{n}"), timeout_s=30, what=f"engine-{n} ready")
    nodes_used = {(await core.read_namespaced_pod(f"engine-{n}", "default")).spec.node_name for n in (1, 2)}
    assert nodes_used == {"gpu-1", "gpu-2"}  # one GPU each
    svc = await core.create_namespaced_service("default", {
        "metadata": {"name": "engine"},
        "spec": {"type": stype, "selector": {"app": "engine"}, "ports": [{"port": 8000, "targetPort": "http"}]}})

    async def address():
        current = await core.read_namespaced_service("engine", "default")
        if stype == "LoadBalancer":
            lb = current.status.load_balancer
            return lb.ingress[0].ip if lb and lb.ingress else None
        return current.spec.cluster_ip

    host = await h.wait_until(address, what="service address")
    url = f"http://{host}:8000/v1/models"
    body = await h.wait_until(lambda: reachable(url), timeout_s=10, what="models through the service")
    assert "test-model" in body
    assert svc.spec.cluster_ip
