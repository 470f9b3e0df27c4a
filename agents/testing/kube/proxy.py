"""kube-proxy and the cloud's load-balancer controller for the fake cluster.

For every Service with a selector (not headless, not ExternalName) it forwards TCP from
``clusterIP:port``; for NodePort and LoadBalancer also from every node's InternalIP:``nodePort``; and
for LoadBalancer from the ingress IP it assigns from ``lb_cidr`` (written to
``status.loadBalancer.ingress``, as a cloud controller does) on ``port``. Each connection goes to the
next Ready endpoint, round robin: a Running pod of the Service's namespace matching the selector,
Ready, not terminating, at its IP and the resolved ``targetPort`` (a number or a container port
name). With no Ready endpoint the connection is reset (the real iptables rule rejects it). All
asyncio streams; UDP is not forwarded."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import struct
from collections.abc import Mapping

from agents.testing.kube import ipam, nodes, objects, probes, registry, store

log = logging.getLogger("agents.testing.kube.proxy")


@dataclasses.dataclass(frozen=True)
class Route:
    """Where a listener forwards: one port of one Service."""
    namespace: str
    service: str
    port_name: str
    target_port: int | str
    selector: tuple[tuple[str, str], ...]


def endpoints(pods: list[Mapping], route: Route) -> list[tuple[str, int]]:
    """The Ready endpoints of ``route`` (pod IP, target port), in pod name order."""
    out = []
    for pod in pods:
        md = pod["metadata"]
        if md.get("namespace") != route.namespace or md.get("deletionTimestamp"):
            continue
        labels = md.get("labels") or {}
        if not route.selector or any(labels.get(k) != v for k, v in route.selector):
            continue
        status = pod.get("status") or {}
        if status.get("phase") != "Running" or not status.get("podIP") or not objects.is_pod_ready(pod):
            continue
        port = None
        for container in (pod.get("spec") or {}).get("containers") or []:
            port = probes.resolve_port(route.target_port, container)
            if port is not None:
                break
        if port is not None:
            out.append((status["podIP"], port))
    return out


class ServiceProxy:
    def __init__(self, reg: registry.Registry, lb_ips: ipam.IpPool):
        self.registry = reg
        self.lb_ips = lb_ips
        self._servers: dict[tuple[str, int], tuple[Route, asyncio.AbstractServer]] = {}
        self._lb: dict[tuple[str, str], str] = {}  # (namespace, service) -> ingress IP
        self._next: dict[Route, int] = {}
        self._conns: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self.connections = 0

    def start(self) -> None:
        self.registry.store.listen(self._on_change)
        self._task = asyncio.create_task(self._loop(), name="kube-proxy")
        self._wake.set()

    async def stop(self) -> None:
        self.registry.store.unlisten(self._on_change)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for _, server in self._servers.values():
            server.close()
        for task in list(self._conns):
            task.cancel()
        for task in list(self._conns):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._servers.clear()

    def _on_change(self, change: store.Change) -> None:
        if change.resource in ("services", "nodes"):
            self._wake.set()

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.reconcile()
            except Exception:
                log.exception("event=proxy_reconcile_failed")

    # ------------------------------------------------------------------ listeners

    def _assign_lb(self, svc: Mapping) -> str:
        key = (svc["metadata"]["namespace"], svc["metadata"]["name"])
        ip = self._lb.get(key)
        if ip is None:
            ip = self.lb_ips.allocate()
            self._lb[key] = ip
            self.registry.record_event(svc, "EnsuringLoadBalancer", "Ensuring load balancer",
                                       component="service-controller")
        ingress = [{"ip": ip, "ipMode": "VIP"}]
        if ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") != ingress:
            def fn(obj: dict) -> None:
                obj.setdefault("status", {})["loadBalancer"] = {"ingress": ingress}
            self.registry.mutate("services", key[0], key[1], fn)
            self.registry.record_event(svc, "EnsuredLoadBalancer", "Ensured load balancer",
                                       component="service-controller")
            log.info("event=load_balancer_ready service=%s/%s ip=%s", key[0], key[1], ip)
        return ip

    def _wanted(self) -> dict[tuple[str, int], Route]:
        st = self.registry.store
        node_ips = [ip for ip in (nodes.internal_ip(n) for n in st.items("nodes")) if ip]
        want: dict[tuple[str, int], Route] = {}
        live_lb: set[tuple[str, str]] = set()
        for svc in list(st.items("services")):
            spec = svc.get("spec") or {}
            md = svc["metadata"]
            if spec.get("type") == "ExternalName" or not spec.get("clusterIP") or spec["clusterIP"] == "None":
                continue
            lb_ip = None
            if spec.get("type") == "LoadBalancer":
                lb_ip = self._assign_lb(svc)
                live_lb.add((md["namespace"], md["name"]))
            selector = tuple(sorted((spec.get("selector") or {}).items()))
            for port in spec.get("ports") or []:
                if port.get("protocol", "TCP") != "TCP":
                    continue
                route = Route(md["namespace"], md["name"], port.get("name") or "", port.get("targetPort",
                                                                                              port["port"]), selector)
                want[(spec["clusterIP"], port["port"])] = route
                if port.get("nodePort"):
                    for ip in node_ips:
                        want[(ip, port["nodePort"])] = route
                if lb_ip:
                    want[(lb_ip, port["port"])] = route
        for key in [k for k in self._lb if k not in live_lb]:
            self.lb_ips.release(self._lb.pop(key))
        return want

    async def reconcile(self) -> None:
        want = self._wanted()
        for address in [a for a, (route, _) in self._servers.items() if want.get(a) != route]:
            _, server = self._servers.pop(address)
            server.close()
            log.info("event=proxy_listener_closed address=%s:%d", *address)
        for address, route in want.items():
            if address in self._servers:
                continue
            try:
                server = await asyncio.start_server(lambda r, w, a=address: self._accept(r, w, a), address[0],
                                                    address[1], reuse_address=True)
            except OSError as exc:
                log.error("event=proxy_bind_failed address=%s:%d service=%s/%s error=%s", address[0], address[1],
                          route.namespace, route.service, exc)
                continue
            self._servers[address] = (route, server)
            log.info("event=proxy_listening address=%s:%d service=%s/%s target_port=%s", address[0], address[1],
                     route.namespace, route.service, route.target_port)

    # ------------------------------------------------------------------ forwarding

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: tuple[str, int]) -> None:
        task = asyncio.create_task(self._forward(reader, writer, address))
        self._conns.add(task)
        task.add_done_callback(self._conns.discard)

    def pick(self, route: Route) -> tuple[str, int] | None:
        ready = endpoints(list(self.registry.store.items("pods")), route)
        if not ready:
            return None
        n = self._next.get(route, 0)
        self._next[route] = n + 1
        return ready[n % len(ready)]

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       address: tuple[str, int]) -> None:
        entry = self._servers.get(address)
        target = self.pick(entry[0]) if entry else None
        upstream = None
        if target is not None:
            try:
                upstream = await asyncio.open_connection(*target)
            except OSError as exc:
                log.info("event=proxy_upstream_refused address=%s:%d target=%s:%d error=%s", *address, *target, exc)
        if upstream is None:
            _reset(writer)
            return
        self.connections += 1
        up_reader, up_writer = upstream
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(OSError, ConnectionError):
                    await w.wait_closed()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST, as a rejected connection looks to the client."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
