"""HTTPS on the admin API from certificate files, reloaded when they change: the CLI's client
verifies the scheduler with a CA file; plain HTTP and untrusting clients fail; a rotated
certificate serves new connections without a restart; a broken rotation keeps the previous one."""

from __future__ import annotations

import asyncio
import os
import pathlib
import socket
import ssl

import pytest
from cryptography import x509

from meridian.cli import main as cli_main
from scheduler import service, testing
from scheduler.admin import client as admin_client
from scheduler.server import auth
from tests.integration import tls_certs

ADMIN = "admin-tls-token"


@pytest.fixture
def pki(tmp_path) -> tls_certs.Pki:
    return tls_certs.make(tmp_path / "pki")


@pytest.fixture
async def svc(tmp_path, pki):
    cfg = testing.local_config(f"sqlite://{tmp_path}/state.db", admin_tls_cert_file=pki.server_cert,
                               admin_tls_key_file=pki.server_key, admin_tls_reload_interval_s=0.1)
    node = service.SchedulerService(cfg, env={}, tokens=auth.TokenBook(env={}),
                                    admin_auth=auth.AdminAuth(auth.digest(ADMIN)))
    await node.start()
    try:
        yield node
    finally:
        await node.stop(grace_s=0.5)


def served_serial(port: int, ca: str) -> int:
    """The serial of the certificate a new TLS connection to the admin port is given (verified)."""
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


async def test_the_cli_client_verifies_the_admin_api_with_a_ca_file(svc, pki):
    """An https client with the scheduler's CA reads status (admin_tls on); without the CA, with an
    unrelated CA, or over plain http, it fails with a clear error."""
    url = f"https://127.0.0.1:{svc.admin_port}"
    good = admin_client.AdminClient(url, ADMIN, env={}, ca_file=pki.ca)
    assert (await asyncio.to_thread(good.status))["admin_tls"] == "on"
    for ca in (None, pki.other_ca):
        with pytest.raises(admin_client.AdminError, match="CERTIFICATE_VERIFY_FAILED"):
            await asyncio.to_thread(admin_client.AdminClient(url, ADMIN, env={}, ca_file=ca).status)
    with pytest.raises(admin_client.AdminError) as err:
        await asyncio.to_thread(admin_client.AdminClient(f"http://127.0.0.1:{svc.admin_port}", ADMIN, env={}).status)
    assert err.value.status in (0, 400)


async def test_a_rotated_certificate_serves_new_connections_without_a_restart(svc, pki):
    """Replacing the certificate and key files (rename, as cert-manager does) is picked up within the
    reload interval; a half-written pair is refused, counted, and the last good one keeps serving."""
    first = await asyncio.to_thread(served_serial, svc.admin_port, pki.ca)
    cert, key, serial = tls_certs.reissue_server(pki)
    for path, data in ((pki.server_key, key), (pki.server_cert, cert)):
        tmp = pathlib.Path(path + ".new")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    await testing.wait_for(lambda: svc.admin_tls.reloads == 1, timeout_s=10, what="reload")
    assert await asyncio.to_thread(served_serial, svc.admin_port, pki.ca) == serial != first

    pathlib.Path(pki.server_cert).write_text("-----BEGIN CERTIFICATE-----\ntruncated")
    await testing.wait_for(lambda: svc.metrics.registry.get_sample_value(
        "meridian_scheduler_errors_total", {"where": "admin_tls_reload"}) == 1, timeout_s=10, what="refused reload")
    assert await asyncio.to_thread(served_serial, svc.admin_port, pki.ca) == serial
    client = admin_client.AdminClient(f"https://127.0.0.1:{svc.admin_port}", ADMIN, env={}, ca_file=pki.ca)
    assert (await asyncio.to_thread(client.status))["admin_tls"] == "on"


def test_half_an_admin_tls_setting_stops_the_scheduler(pki, capsys):
    """A certificate without its key (or a bad file) stops `meridian scheduler` at start naming the flag."""
    assert cli_main.main(["scheduler", "--admin-tls-cert-file", pki.server_cert]) == 1
    assert "--admin-tls-key-file" in capsys.readouterr().err
    assert cli_main.main(["scheduler", "--admin-tls-cert-file", pki.ca, "--admin-tls-key-file", pki.server_key,
                          "--admin-address", "127.0.0.1:0", "--grpc-address", "127.0.0.1:0",
                          "--state", "sqlite://:memory:"]) == 1
    err = capsys.readouterr().err
    assert "admin_tls_key_file (--admin-tls-key-file)" in err and "does not belong" in err
