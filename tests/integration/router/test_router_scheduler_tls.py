"""The router's link to a real scheduler over TLS on 127.0.0.1 (throwaway certificates): routing
tables arrive and traffic reports are accepted over mutual TLS; without its client certificate the
router gets nothing; bad TLS flags stop ``meridian router`` with the setting, flag and path named."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

from meridian.cli import main as cli_main
from router import testing
from scheduler import service
from scheduler import testing as scheduler_testing
from scheduler.server import auth
from tests.integration import tls_certs

ROUTER_TOKEN = "tls-router-token"
# Far above any version the scheduler's own publisher reaches in a test, so its (empty) tables never
# replace the one published here: the link is under test, not the planner.
VERSION = 1_000_000


@pytest.fixture
def pki(tmp_path) -> tls_certs.Pki:
    return tls_certs.make(tmp_path / "pki")


@pytest.fixture
async def tls_scheduler(pki, tmp_path):
    """A real scheduler node on loopback serving mutual TLS (client certificates from the test CA)."""
    cfg = scheduler_testing.local_config(f"sqlite://{tmp_path}/state.db", scheduler_id="tls-sched",
                                         tls_cert_file=pki.server_cert, tls_key_file=pki.server_key,
                                         tls_client_ca_file=pki.ca)
    tokens = auth.TokenBook(auth.TokensFile({}, (auth.digest(ROUTER_TOKEN),)), env={})
    svc = service.SchedulerService(cfg, env={}, tokens=tokens, admin_auth=auth.AdminAuth(auth.digest("admin")))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop(grace_s=0.5)


@pytest.fixture
def token_file(tmp_path) -> str:
    """The router's scheduler token, in a file (never a command-line value)."""
    path = tmp_path / "router.token"
    path.write_text(ROUTER_TOKEN + "\n")
    return str(path)


def chat() -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


async def test_router_gets_tables_and_reports_traffic_over_mutual_tls(pki, tls_scheduler, replicas, make_router,
                                                                       http, token_file):
    """With the CA and a client certificate the router receives the scheduler's routing table over
    mutual TLS, serves from it, and its traffic report is accepted by the scheduler."""
    (rep,) = await replicas(1)
    tls_scheduler.route_hub.publish(testing.table(VERSION, {"m": [testing.replica("a", rep.port)]}))
    router = await make_router(scheduler_address=f"127.0.0.1:{tls_scheduler.grpc_port}", scheduler_token_file=token_file,
                               scheduler_tls_ca_file=pki.ca, scheduler_tls_cert_file=pki.client_cert,
                               scheduler_tls_key_file=pki.client_key, region="na-east", traffic_report_interval_s=0.2)
    await scheduler_testing.wait_for(lambda: router.state.version == VERSION, what="the table over TLS")
    async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", json=chat()) as resp:
        assert resp.status == 200 and (await resp.json())["replica"] == rep.name
    samples = tls_scheduler.metrics.traffic_samples
    await scheduler_testing.wait_for(lambda: samples._value.get() >= 1, what="a traffic sample over TLS")
    assert router.metrics.scheduler_connected == 1


async def test_router_without_client_certificate_gets_nothing(pki, tls_scheduler, make_router, token_file):
    """Trusting the right CA but holding no client certificate, the router is refused at the handshake
    by a mutual-TLS scheduler: no table, errors counted, never connected."""
    tls_scheduler.route_hub.publish(testing.table(VERSION, {"m": [testing.replica("a", 1)]}))
    router = await make_router(scheduler_address=f"127.0.0.1:{tls_scheduler.grpc_port}", scheduler_token_file=token_file,
                               scheduler_tls_ca_file=pki.ca)
    await scheduler_testing.wait_for(lambda: router.metrics.background_errors["route_stream"] >= 2,
                                     what="two refused stream attempts")
    await asyncio.sleep(0.2)
    assert router.state.version == 0 and router.metrics.scheduler_connected == 0


def bad_flag_cases(pki: tls_certs.Pki, tmp: pathlib.Path) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (flags after --scheduler, fragments the error must contain)."""
    missing = str(tmp / "nope.pem")
    return {
        "cert-without-key": (["--scheduler-tls-ca-file", pki.ca, "--scheduler-tls-cert-file", pki.client_cert],
                             ["scheduler_tls_cert_file (--scheduler-tls-cert-file): set without "
                              "scheduler_tls_key_file (--scheduler-tls-key-file)"]),
        "key-without-cert": (["--scheduler-tls-ca-file", pki.ca, "--scheduler-tls-key-file", pki.client_key],
                             ["scheduler_tls_key_file (--scheduler-tls-key-file): set without"]),
        "cert-without-ca": (["--scheduler-tls-cert-file", pki.client_cert, "--scheduler-tls-key-file", pki.client_key],
                            ["scheduler_tls_cert_file (--scheduler-tls-cert-file): needs "
                             "scheduler_tls_ca_file (--scheduler-tls-ca-file)"]),
        "missing-ca": (["--scheduler-tls-ca-file", missing],
                       [f"scheduler_tls_ca_file (--scheduler-tls-ca-file) {missing}: cannot read: No such file"]),
        "ca-is-a-key": (["--scheduler-tls-ca-file", pki.client_key],
                        [f"(--scheduler-tls-ca-file) {pki.client_key}: no PEM certificate"]),
        "missing-key": (["--scheduler-tls-ca-file", pki.ca, "--scheduler-tls-cert-file", pki.client_cert,
                         "--scheduler-tls-key-file", missing],
                        [f"(--scheduler-tls-key-file) {missing}: cannot read"]),
        "key-of-another-cert": (["--scheduler-tls-ca-file", pki.ca, "--scheduler-tls-cert-file", pki.client_cert,
                                 "--scheduler-tls-key-file", pki.server_key],
                                [f"(--scheduler-tls-key-file) {pki.server_key}: this private key does not belong",
                                 f"(--scheduler-tls-cert-file) {pki.client_cert}"]),
        "server-name-without-ca": (["--scheduler-tls-server-name", "scheduler.meridian.internal"],
                                   ["scheduler_tls_server_name (--scheduler-tls-server-name): needs "
                                    "scheduler_tls_ca_file (--scheduler-tls-ca-file)"]),
    }


CASES = ["cert-without-key", "key-without-cert", "cert-without-ca", "missing-ca", "ca-is-a-key", "missing-key",
         "key-of-another-cert", "server-name-without-ca"]


@pytest.mark.parametrize("case", CASES)
def test_bad_scheduler_tls_flags_stop_the_router(pki, tmp_path, capsys, case):
    """`meridian router` with a bad TLS flag combination or file exits 1 before serving, naming the
    setting, its flag and the path."""
    flags, fragments = bad_flag_cases(pki, tmp_path)[case]
    code = cli_main.main(["router", "--listen", "127.0.0.1:0", "--lkg-store", "none", "--scheduler", "127.0.0.1:1",
                          *flags])
    err = capsys.readouterr().err
    assert code == 1, err
    for fragment in fragments:
        assert fragment in err


def test_tls_without_a_scheduler_address_is_refused(pki, capsys):
    """A scheduler CA without --scheduler is a configuration error, not silently ignored."""
    code = cli_main.main(["router", "--listen", "127.0.0.1:0", "--scheduler-tls-ca-file", pki.ca])
    err = capsys.readouterr().err
    assert code == 1 and "scheduler_tls_ca_file (--scheduler-tls-ca-file): needs scheduler_address (--scheduler)" in err
