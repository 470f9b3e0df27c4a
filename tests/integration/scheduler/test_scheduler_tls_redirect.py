"""A standby's redirect under TLS, over real gRPC on 127.0.0.1: the leader's address a standby gives
agents is ``advertise_grpc_address`` (``--advertise-grpc-address``), so it can be a name the shared
scheduler certificate holds; the real agent follows the redirect and verifies the leader against it.
Advertising the bound IP instead, which the certificate does not name, leaves the agent unable to
reach the leader."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import pytest

import agents
from meridian.cli import scheduler as scheduler_cli
from meridian.demo import processes
from router import scheduler_tls, watch
from router import testing as router_testing
from scheduler import service, testing
from scheduler.server import auth
from tests.integration import tls_certs
from tests.integration.scheduler import test_scheduler_tls as base

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def nodes(tmp_path):
    """make(**settings) -> a started node on the test's one shared SQLite store; all stopped after."""
    made: list[service.SchedulerService] = []

    async def make(**settings) -> service.SchedulerService:
        cfg = testing.local_config(f"sqlite://{tmp_path}/state.db", scheduler_id=f"node{len(made)}", **settings)
        tokens = auth.TokenBook(auth.TokensFile({"c1": auth.digest(base.CLUSTER_TOKEN)},
                                                (auth.digest(base.ROUTER_TOKEN),)), env={})
        svc = service.SchedulerService(cfg, env={}, tokens=tokens, admin_auth=auth.AdminAuth(auth.digest("admin")))
        await svc.start()
        made.append(svc)
        return svc

    try:
        yield make
    finally:
        for svc in reversed(made):
            await svc.stop(grace_s=0.5)


@pytest.mark.parametrize(("advertised", "server_name"), [(True, None), (False, None), (False, "localhost")],
                         ids=["advertised-name", "bound-ip", "bound-ip-with-server-name"])
async def test_a_standby_redirects_agents_to_the_leaders_advertised_name(tmp_path, nodes, advertised, server_name,
                                                                         caplog):
    """Both nodes serve one certificate naming only ``localhost``; the agent dials the standby by
    that name. With ``advertise_grpc_address=localhost:PORT`` the standby's redirect carries that
    name and the agent reaches the leader over verified TLS; with the default (the bound
    127.0.0.1:PORT) the redirect names an IP the certificate does not hold and the agent is never
    welcomed, unless its ``spec.scheduler.tls.server_name`` says which name to verify instead."""
    pki = tls_certs.make(tmp_path / "pki")
    cert, key = tls_certs.server_for(pki, ("localhost",), tmp_path / "shared", "scheduler")
    port = processes.free_port()
    settings = {"tls_cert_file": cert, "tls_key_file": key}
    leader = await base.leading(await nodes(grpc_address=f"127.0.0.1:{port}", **settings,
                                            **({"advertise_grpc_address": f"localhost:{port}"} if advertised else {})))
    standby = await nodes(**settings)
    expected = f"localhost:{port}" if advertised else f"127.0.0.1:{port}"
    await testing.wait_for(lambda: standby.leader_hint() == expected, what="the standby naming the leader")
    assert standby.token == 0

    tls = {"ca_file": pki.ca, **({"server_name": server_name} if server_name else {})}
    doc = base.cluster(f"localhost:{standby.grpc_port}", tls, tmp_path / "agent")
    agent = agents.build(doc, token=base.CLUSTER_TOKEN, state_dir=tmp_path / "agent",
                         replica_settings=agents.config.replica_settings(doc),
                         options=agents.AgentOptions(discover_interval_s=0.5, reconnect_initial_s=0.2,
                                                     reconnect_max_s=0.5, serve_status=False))
    caplog.set_level("INFO", logger="agents.stream")
    await agent.start()
    try:
        await testing.wait_for(lambda: any(f"event=leader_redirect cluster=c1 leader={expected}" in r.getMessage()
                                           for r in caplog.records), timeout_s=20, what="the standby's redirect")
        if advertised or server_name:
            await testing.wait_for(lambda: base._reported(leader, "c1"), timeout_s=30,
                                   what="c1 reporting to the leader after the redirect")
            assert agent.stream.scheduler_id == "node0"
        else:
            reconnects = agent.metrics.reconnects.labels("c1")
            await testing.wait_for(lambda: reconnects._value.get() >= 4, timeout_s=30, what="redirects tried")
            assert agent.stream.sessions == 0
            broken = [r.getMessage() for r in caplog.records if "event=stream_broken" in r.getMessage()]
            assert any(f"127.0.0.1:{port}" in m and "Hostname Verification Check failed" in m for m in broken), broken
    finally:
        await agent.shutdown()


def test_advertise_grpc_address_has_a_flag():
    """`meridian scheduler --advertise-grpc-address HOST:PORT` sets the advertised address."""
    parser = argparse.ArgumentParser()
    scheduler_cli.add_arguments(parser)
    args = parser.parse_args(["--advertise-grpc-address", "scheduler-0.scheduler.meridian.svc:7070"])
    assert scheduler_cli.build_config(args).advertise_grpc_address == "scheduler-0.scheduler.meridian.svc:7070"


async def test_the_routers_scheduler_link_verifies_scheduler_tls_server_name(tmp_path, nodes):
    """The router's route watch dialing the scheduler by IP, whose certificate names only
    ``localhost``: refused by default (hostname check), served with
    ``scheduler_tls_server_name=localhost``."""
    pki = tls_certs.make(tmp_path / "pki")
    cert, key = tls_certs.server_for(pki, ("localhost",), tmp_path / "shared", "scheduler")
    svc = await base.leading(await nodes(tls_cert_file=cert, tls_key_file=key))
    svc.route_hub.publish(router_testing.table(svc.route_hub.version + 1000, {}))
    outcomes = {name: await _watch_gets_a_table(svc, pki, name) for name in ("", "localhost")}
    assert outcomes == {"": False, "localhost": True}


async def _watch_gets_a_table(svc: service.SchedulerService, pki: tls_certs.Pki, server_name: str) -> bool:
    received: list[int] = []
    watcher = watch.RouteWatcher(f"127.0.0.1:{svc.grpc_port}", router_id="r1", router_region="us-east",
                                 token=base.ROUTER_TOKEN, apply=lambda table, _s: received.append(table.version),
                                 current_version=lambda: 0, backoff_initial_s=0.2, backoff_max_s=0.5,
                                 tls=scheduler_tls.load(pki.ca, "", "", server_name=server_name))
    task = asyncio.create_task(watcher.run())
    try:
        with contextlib.suppress(TimeoutError):
            await testing.wait_for(lambda: received, timeout_s=3, what="a routing table")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return bool(received)
