"""Rotating the gRPC link's certificates without a restart, over real gRPC on 127.0.0.1 with
throwaway certificates: the scheduler presents a rotated certificate (from a new CA) and trusts a
rotated client CA on new connections while open streams keep going; after a dropped connection
(a real TCP link cut by ``tests.chaos.tcp_proxy``) the real agent stream and the router's scheduler
client fail while they hold the old CA and reconnect once their files are rotated too; a bad
rotated file, on either end, keeps the previous credentials and says which file is wrong."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import shutil
import socket
import ssl

import pytest

import agents
from router import scheduler_tls, traffic, watch
from router import testing as router_testing
from scheduler import service, testing
from scheduler.server import auth
from tests.chaos import tcp_proxy
from tests.integration import tls_certs
from tests.integration.scheduler import test_scheduler_tls as base

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def old(tmp_path) -> tls_certs.Pki:
    return tls_certs.make(tmp_path / "pki-old")


@pytest.fixture
def new(tmp_path) -> tls_certs.Pki:
    """A second, unrelated CA with its own scheduler and client certificates: what a rotation brings."""
    return tls_certs.make(tmp_path / "pki-new")


class Files:
    """The live files one end reads (a certificate, its key, the CA it trusts), laid out as a
    Kubernetes secret volume is: each name a symlink through ``..data`` into a versioned directory,
    so that ``install`` swaps all three at once."""

    def __init__(self, directory: pathlib.Path, pki: tls_certs.Pki, *, server: bool):
        directory.mkdir(parents=True, exist_ok=True)
        self.dir, self.server, self.version = directory, server, 0
        self.cert, self.key, self.ca = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
        self.install(pki)
        for link in (self.cert, self.key, self.ca):
            link.symlink_to(f"..data/{link.name}")

    def install(self, pki: tls_certs.Pki) -> None:
        self.put(ca=pki.ca, key=pki.server_key if self.server else pki.client_key,
                 cert=pki.server_cert if self.server else pki.client_cert)

    def put(self, **sources: str) -> None:
        """A new version holding ``sources`` (ca/key/cert -> a file to copy), the rest as they are."""
        self.version += 1
        version = self.dir / f"..v{self.version}"
        version.mkdir()
        for name, link in (("ca", self.ca), ("key", self.key), ("cert", self.cert)):
            shutil.copy(sources.get(name) or link, version / link.name)
        tmp = self.dir / "..data.tmp"
        tmp.symlink_to(version.name)
        os.replace(tmp, self.dir / "..data")


async def start_scheduler(tmp_path: pathlib.Path, files: Files) -> service.SchedulerService:
    cfg = testing.local_config(f"sqlite://{tmp_path}/state.db", scheduler_id="rot", tls_cert_file=str(files.cert),
                               tls_key_file=str(files.key), tls_client_ca_file=str(files.ca),
                               tls_reload_interval_s=0.2)
    tokens = auth.TokenBook(auth.TokensFile({"c1": auth.digest(base.CLUSTER_TOKEN)}, (auth.digest(base.ROUTER_TOKEN),)),
                            env={})
    svc = service.SchedulerService(cfg, env={}, tokens=tokens, admin_auth=auth.AdminAuth(auth.digest("admin")))
    await svc.start()
    return await base.leading(svc)


def _presented(port: int, client: tls_certs.Pki) -> bytes:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # we read what is presented, trusted or not
    ctx.set_alpn_protocols(["h2"])
    ctx.load_cert_chain(client.client_cert, client.client_key)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, ctx.wrap_socket(sock) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


async def presented(port: int, client: tls_certs.Pki) -> bytes:
    """The DER certificate the gRPC port presents to a new TLS connection."""
    return await asyncio.to_thread(_presented, port, client)


def der(cert_path: str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pathlib.Path(cert_path).read_text())


def drop(proxy: tcp_proxy.FaultyProxy) -> None:
    """Reset every open connection through the proxy; new ones pass again at once."""
    proxy.cut("reset")
    proxy.heal()


async def test_a_rotated_certificate_reaches_new_connections_and_the_agent_after_it_reconnects(
        tmp_path, old, new, caplog):
    """Mutual TLS: the scheduler's certificate, key and client CA are replaced by a new CA's; new
    handshakes get the new certificate while the agent's open stream goes on; after a dropped
    connection the agent, still trusting the old CA, cannot reconnect; once its CA and client
    certificate are rotated too it reconnects (without a restart) from its next attempt."""
    server = Files(tmp_path / "scheduler", old, server=True)
    svc = await start_scheduler(tmp_path, server)
    proxy = await tcp_proxy.FaultyProxy([svc.grpc_port], name="agent-link").start()
    client = Files(tmp_path / "agent-tls", old, server=False)
    doc = base.cluster(proxy.address, {"ca_file": str(client.ca), "cert_file": str(client.cert),
                                       "key_file": str(client.key)}, tmp_path / "agent")
    agent = agents.build(doc, token=base.CLUSTER_TOKEN, state_dir=tmp_path / "agent",
                         replica_settings=agents.config.replica_settings(doc),
                         options=agents.AgentOptions(discover_interval_s=0.5, reconnect_initial_s=0.2,
                                                     reconnect_max_s=0.5, serve_status=False))
    await agent.start()
    try:
        await testing.wait_for(lambda: base._reported(svc, "c1"), timeout_s=30, what="c1 reporting over mutual TLS")
        assert await presented(svc.grpc_port, old) == der(old.server_cert)

        caplog.set_level(logging.INFO, logger="meridian.tls")
        server.install(new)
        await testing.wait_for(lambda: _is(presented(svc.grpc_port, new), der(new.server_cert)), timeout_s=10,
                               what="the rotated certificate presented to a new connection")
        assert any("event=tls_reloaded" in r.getMessage() and str(server.cert) in r.getMessage()
                   for r in caplog.records)
        sent = agent.metrics.messages.labels("c1", "heartbeat")._value.get()
        await testing.wait_for(lambda: agent.metrics.messages.labels("c1", "heartbeat")._value.get() >= sent + 2,
                               timeout_s=10, what="heartbeats on the stream opened before the rotation")
        assert agent.stream.connected and agent.stream.sessions == 1

        drop(proxy)
        reconnects = agent.metrics.reconnects.labels("c1")._value.get()
        await testing.wait_for(lambda: agent.metrics.reconnects.labels("c1")._value.get() >= reconnects + 3,
                               timeout_s=20, what="reconnect attempts with the old CA")
        assert agent.stream.sessions == 1 and not agent.stream.connected
        assert "UNAVAILABLE" in agent.stream.last_error

        client.install(new)
        await testing.wait_for(lambda: agent.stream.sessions == 2 and agent.stream.connected, timeout_s=20,
                               what="the agent reconnecting with the rotated CA and client certificate")
        assert agent.metrics.tls_reloads.labels("c1", "reloaded")._value.get() == 1
        assert (await svc.status())["grpc_tls"] == "mutual"
    finally:
        await agent.shutdown()
        await proxy.stop()
        await svc.stop(grace_s=0.5)


async def _is(value, expected) -> bool:
    try:
        return (await value) == expected
    except (OSError, ssl.SSLError):  # a handshake refused while the rotation is under way
        return False


async def test_a_bad_rotated_file_keeps_the_previous_credentials_on_both_ends(tmp_path, old, caplog):
    """A scheduler certificate replaced by garbage, and an agent CA file replaced by a key, are
    refused with the file and the problem named (logged, counted): the scheduler keeps presenting
    its previous certificate, and the agent reconnects after a dropped connection with its
    previous credentials."""
    server = Files(tmp_path / "scheduler", old, server=True)
    svc = await start_scheduler(tmp_path, server)
    proxy = await tcp_proxy.FaultyProxy([svc.grpc_port], name="agent-link").start()
    client = Files(tmp_path / "agent-tls", old, server=False)
    doc = base.cluster(proxy.address, {"ca_file": str(client.ca), "cert_file": str(client.cert),
                                       "key_file": str(client.key)}, tmp_path / "agent")
    agent = agents.build(doc, token=base.CLUSTER_TOKEN, state_dir=tmp_path / "agent",
                         replica_settings=agents.config.replica_settings(doc),
                         options=agents.AgentOptions(discover_interval_s=0.5, reconnect_initial_s=0.2,
                                                     reconnect_max_s=0.5, serve_status=False))
    caplog.set_level(logging.INFO, logger="meridian.tls")
    await agent.start()
    try:
        await testing.wait_for(lambda: agent.stream.connected, timeout_s=30, what="the agent connected")
        garbage = tmp_path / "garbage.crt"
        garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
        server.put(cert=str(garbage))
        errors = svc.metrics.errors.labels("grpc_tls_reload")
        await testing.wait_for(lambda: errors._value.get() >= 1, timeout_s=10, what="the failed reload counted")
        failed = [r.getMessage() for r in caplog.records if "event=tls_reload_failed" in r.getMessage()]
        assert any(f"tls_cert_file (--tls-cert-file) {server.cert}: no PEM certificate" in m for m in failed), failed
        assert await presented(svc.grpc_port, old) == der(old.server_cert)

        client.put(ca=old.client_key)  # a key where the CA bundle belongs
        drop(proxy)
        await testing.wait_for(lambda: agent.stream.sessions == 2 and agent.stream.connected, timeout_s=20,
                               what="the agent reconnecting with its previous credentials")
        failed = [r.getMessage() for r in caplog.records if "event=tls_reload_failed" in r.getMessage()]
        assert any(f"spec.scheduler.tls.ca_file {client.ca}: no PEM certificate" in m for m in failed), failed
        assert agent.metrics.tls_reloads.labels("c1", "failed")._value.get() >= 1
        assert agent.metrics.tls_reloads.labels("c1", "reloaded")._value.get() == 0
    finally:
        await agent.shutdown()
        await proxy.stop()
        await svc.stop(grace_s=0.5)


async def test_the_routers_scheduler_client_uses_rotated_files_from_its_next_connection(tmp_path, old, new):
    """The router's route watch and traffic reports (router.scheduler_tls) over mutual TLS: after
    the scheduler rotates to a new CA and the link drops, both fail while the router holds the old
    CA; with its files rotated the watch reconnects and receives the next table, and the traffic
    reporter replaces its channel and delivers its report."""
    server = Files(tmp_path / "scheduler", old, server=True)
    svc = await start_scheduler(tmp_path, server)
    proxy = await tcp_proxy.FaultyProxy([svc.grpc_port], name="router-link").start()
    client = Files(tmp_path / "router-tls", old, server=False)
    errors: list[str] = []
    client_tls = scheduler_tls.load(str(client.ca), str(client.cert), str(client.key), on_error=errors.append)
    assert client_tls is not None and client_tls.mode == "mutual"
    received: list[int] = []
    up: list[bool] = []
    watcher = watch.RouteWatcher(proxy.address, router_id="r1", router_region="us-east", token=base.ROUTER_TOKEN,
                                 apply=lambda table, _source: received.append(table.version),
                                 current_version=lambda: received[-1] if received else 0, on_connected=up.append,
                                 backoff_initial_s=0.2, backoff_max_s=0.5, tls=client_tls)
    tally = traffic.TrafficAccumulator()
    reporter = traffic.TrafficReporter(proxy.address, tally, router_id="r1", router_region="us-east",
                                       token=base.ROUTER_TOKEN, interval_s=0.2, timeout_s=2.0, tls=client_tls)
    tasks = [asyncio.create_task(watcher.run()), asyncio.create_task(reporter.run())]

    def publish() -> int:
        version = max(svc.route_hub.version, *received, 0) + 1000
        svc.route_hub.publish(router_testing.table(version, {}))
        return version

    try:
        first = publish()
        await testing.wait_for(lambda: first in received, timeout_s=20, what="a table over mutual TLS")
        tally.record("m", "us-east", 10, 5, False, 20.0)
        await testing.wait_for(lambda: reporter.reports_sent == 1, timeout_s=20, what="a traffic report")

        server.install(new)
        await testing.wait_for(lambda: _is(presented(svc.grpc_port, new), der(new.server_cert)), timeout_s=10,
                               what="the rotated scheduler certificate")
        drop(proxy)
        await testing.wait_for(lambda: up and up[-1] is False, timeout_s=20, what="the watch seeing the drop")
        second = publish()
        tally.record("m", "us-east", 10, 5, False, 20.0)
        await asyncio.sleep(2.0)  # several reconnect attempts and report intervals with the old CA
        assert second not in received and reporter.reports_sent == 1

        client.install(new)
        await testing.wait_for(lambda: second in received, timeout_s=20, what="the watch back with rotated files")
        await testing.wait_for(lambda: reporter.reports_sent == 2, timeout_s=20, what="the report delivered")
        assert client_tls.generation == 1 and not errors
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await proxy.stop()
        await svc.stop(grace_s=0.5)
