"""TLS on the router's HTTP hops over loopback: clients reach the router over HTTPS (the openai
SDK verifying the CA), the certificate rotates without dropping open connections, and the router
reaches https:// replicas (a fake one, the SGLang emulator with SGLang's --ssl-* flags) checking
their certificate, with a client certificate for replicas that require mutual TLS."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shutil
import ssl

import aiohttp
import openai
import pytest

from meridian import tls as tls_files
from router import config as router_config
from router import testing
from runtime_adapter import tls_relay
from runtime_adapter.emulator import config as emu_config
from runtime_adapter.emulator import server as emu_server
from tests.integration import tls_certs

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


@pytest.fixture
def pki(tmp_path) -> tls_certs.Pki:
    return tls_certs.make(tmp_path / "pki")


@pytest.fixture
def other(tmp_path) -> tls_certs.Pki:
    """A second, unrelated CA and server certificate (what a rotation to a new CA brings)."""
    return tls_certs.make(tmp_path / "pki-b")


def server_context(pki: tls_certs.Pki, *, client_ca: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki.server_cert, pki.server_key)
    if client_ca:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(client_ca)
    return ctx


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    return head.split(b"\r\n", 1)[0] + b" " + await reader.readexactly(length)


async def test_openai_sdk_reaches_the_router_over_https(pki, replicas, make_router):
    """With tls_cert_file/tls_key_file the router serves HTTPS: the SDK verifying the CA gets its
    answer, a client that does not trust the CA is refused at the handshake."""
    (rep,) = await replicas(1)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}),
                               tls_cert_file=pki.server_cert, tls_key_file=pki.server_key)
    client = openai.AsyncOpenAI(base_url=f"https://127.0.0.1:{router.port}/v1", api_key="unused", max_retries=0,
                                http_client=openai.DefaultAsyncHttpx2Client(verify=ssl.create_default_context(cafile=pki.ca)))
    try:
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content
    finally:
        await client.close()
    with pytest.raises(ssl.SSLCertVerificationError):
        await asyncio.open_connection("127.0.0.1", router.port, ssl=ssl.create_default_context())


async def test_certificate_rotation_keeps_open_connections_and_serves_new_ones_the_new_one(
        pki, other, replicas, make_router):
    """Replacing the certificate files: a keep-alive connection opened before keeps working; new
    connections get the new certificate (trusted by the new CA, no longer by the old)."""
    (rep,) = await replicas(1)
    cert, key = pki.server_cert + ".live", pki.server_key + ".live"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}),
                               tls_cert_file=cert, tls_key_file=key)
    old_trust = ssl.create_default_context(cafile=pki.ca)
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port, ssl=old_trust)
    assert (await _request(reader, writer)).startswith(b"HTTP/1.1 200")
    shutil.copy(other.server_cert, cert)
    shutil.copy(other.server_key, key)
    assert router.server_tls.reload_if_changed()
    assert (await _request(reader, writer)).startswith(b"HTTP/1.1 200"), "the open connection was dropped"
    writer.close()
    new_reader, new_writer = await asyncio.open_connection("127.0.0.1", router.port,
                                                           ssl=ssl.create_default_context(cafile=other.ca))
    assert (await _request(new_reader, new_writer)).startswith(b"HTTP/1.1 200")
    new_writer.close()
    with pytest.raises(ssl.SSLCertVerificationError):
        await asyncio.open_connection("127.0.0.1", router.port, ssl=old_trust)


async def test_a_half_written_rotation_keeps_the_previous_certificate(pki, other, replicas, make_router):
    """A new certificate without its key yet (a rotation caught half-way) does not load: the old pair
    keeps serving, the failure is counted, and the complete pair loads at the next check."""
    (rep,) = await replicas(1)
    cert, key = pki.server_cert + ".live", pki.server_key + ".live"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port)]}),
                               tls_cert_file=cert, tls_key_file=key)
    shutil.copy(other.server_cert, cert)
    assert not router.server_tls.reload_if_changed()
    assert router.metrics.background_errors["tls_reload"] == 1
    r, w = await asyncio.open_connection("127.0.0.1", router.port, ssl=ssl.create_default_context(cafile=pki.ca))
    assert (await _request(r, w)).startswith(b"HTTP/1.1 200")
    w.close()
    shutil.copy(other.server_key, key)
    assert router.server_tls.reload_if_changed()


async def test_router_reaches_https_replicas_checking_their_certificate(pki, other, replicas, make_router, http):
    """An https:// replica is reached over TLS when its certificate chains to upstream_tls_ca_file;
    with a CA that did not sign it, the try fails at the handshake (502, nothing sent in clear)."""
    (rep,) = await replicas(1, ssl_context=server_context(pki))
    table = testing.table(1, {"m": [testing.replica("a", rep.port, scheme="https")]})
    good = await make_router(table, upstream_tls_ca_file=pki.ca)
    async with http.post(f"http://127.0.0.1:{good.port}/v1/chat/completions", data=BODY,
                         headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 200 and (await resp.json())["replica"] == rep.name
    wrong = await make_router(table, upstream_tls_ca_file=other.ca)
    async with http.post(f"http://127.0.0.1:{wrong.port}/v1/chat/completions", data=BODY,
                         headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 502
        assert "certificate verify failed" in (await resp.json())["error"]["message"]


async def test_mutual_tls_to_a_replica_that_requires_client_certificates(pki, replicas, make_router, http):
    """A replica requiring client certificates serves the router that presents one signed by its CA
    and refuses the router that presents none."""
    (rep,) = await replicas(1, ssl_context=server_context(pki, client_ca=pki.ca))
    table = testing.table(1, {"m": [testing.replica("a", rep.port, scheme="https")]})
    with_cert = await make_router(table, upstream_tls_ca_file=pki.ca, upstream_tls_cert_file=pki.client_cert,
                                  upstream_tls_key_file=pki.client_key)
    async with http.post(f"http://127.0.0.1:{with_cert.port}/v1/chat/completions", data=BODY,
                         headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 200
    without = await make_router(table, upstream_tls_ca_file=pki.ca)
    async with http.post(f"http://127.0.0.1:{without.port}/v1/chat/completions", data=BODY,
                         headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 502


async def test_health_checks_reach_https_replicas(pki, replicas, make_router):
    """Active health checks use the replica's scheme and the router's upstream TLS settings."""
    (rep,) = await replicas(1, ssl_context=server_context(pki))
    router = await make_router(testing.table(1, {"m": [testing.replica("a", rep.port, scheme="https")]}),
                               upstream_tls_ca_file=pki.ca, health={"enabled": True, "interval_s": 0.2})
    await asyncio.sleep(0.5)
    assert await router.checker.check(router.state.endpoints["a"])


async def test_the_emulator_serves_tls_with_sglangs_flags_and_the_router_streams_from_it(pki, make_router):
    """The SGLang emulator started with --ssl-certfile/--ssl-keyfile serves HTTPS; the router relays a
    stream from it with the usage chunk intact."""
    args = ["--model-path", "Qwen/Qwen2.5-0.5B-Instruct", "--served-model-name", "m", "--port", "0",
            "--skip-server-warmup", "--startup-delay-s", "0", "--warmup-s", "0", "--speedup", "50",
            "--ssl-certfile", pki.server_cert, "--ssl-keyfile", pki.server_key]
    async with contextlib.AsyncExitStack() as stack:
        emu = await stack.enter_async_context(emu_server.serve(emu_config.parse_args(args, env={})))
        assert emu.url.startswith("https://")
        port = int(emu.url.rsplit(":", 1)[1])
        router = await make_router(testing.table(1, {"m": [testing.replica("e", port, scheme="https")]}),
                                   upstream_tls_ca_file=pki.ca)
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{router.port}/v1", api_key="unused", max_retries=0)
        try:
            stream = await client.chat.completions.create(model="m", max_tokens=6, stream=True,
                                                          stream_options={"include_usage": True},
                                                          messages=[{"role": "user", "content": "count"}])
            usage = None
            async for chunk in stream:
                usage = chunk.usage or usage
            assert usage is not None and usage.completion_tokens == 6
        finally:
            await client.close()


def test_the_emulator_refuses_half_a_tls_pair_as_sglang_does(pki):
    """--ssl-certfile without --ssl-keyfile is refused with SGLang's own message."""
    with pytest.raises(ValueError, match="--ssl-certfile requires --ssl-keyfile"):
        emu_config.parse_args(["--model-path", "m", "--ssl-certfile", pki.server_cert], env={})


async def test_plaintext_to_the_tls_listener_is_refused_cleanly(pki, make_router, http, caplog):
    """Plain HTTP sent to the HTTPS listener gets no answer and logs no error (a failed handshake)."""
    router = await make_router(None, tls_cert_file=pki.server_cert, tls_key_file=pki.server_key)
    caplog.set_level(logging.INFO)
    with pytest.raises(aiohttp.ClientError):
        async with http.get(f"http://127.0.0.1:{router.port}/health") as resp:
            await resp.read()
    await asyncio.sleep(0.1)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


@contextlib.asynccontextmanager
async def _relayed_emulator(cert: str, key: str):
    """The SGLang emulator on loopback behind the runtime adapter's TLS relay (as in a replica pod):
    yields the relay's port."""
    args = ["--model-path", "Qwen/Qwen2.5-0.5B-Instruct", "--served-model-name", "m", "--port", "0",
            "--host", "127.0.0.1", "--skip-server-warmup", "--startup-delay-s", "0", "--warmup-s", "0",
            "--speedup", "50"]
    async with emu_server.serve(emu_config.parse_args(args, env={})) as emu:
        relay = tls_relay.TlsRelay(emu.url, tls_files.ServerTls(cert, key), host="127.0.0.1", port=0)
        await relay.start()
        try:
            yield relay.port
        finally:
            await relay.stop()


async def test_replicas_sharing_one_certificate_are_verified_against_upstream_tls_server_name(
        pki, tmp_path, make_router, http):
    """A replica reached at 127.0.0.1 whose certificate names only replica.meridian.internal (one
    tls_secret for every pod of a cluster): the router checking the address refuses it (502,
    hostname mismatch); with upstream_tls_server_name set to that name it is served, requests and
    active health checks alike."""
    cert, key = tls_certs.server_for(pki, ("replica.meridian.internal",), tmp_path / "shared", "replica")
    async with _relayed_emulator(cert, key) as port:
        table = testing.table(1, {"m": [testing.replica("a", port, scheme="https")]})
        by_address = await make_router(table, upstream_tls_ca_file=pki.ca, health={"enabled": True, "interval_s": 30})
        async with http.post(f"http://127.0.0.1:{by_address.port}/v1/chat/completions", data=BODY,
                             headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 502
            assert "IP address mismatch" in (await resp.json())["error"]["message"]
        assert not await by_address.checker.check(by_address.state.endpoints["a"])
        by_name = await make_router(table, upstream_tls_ca_file=pki.ca,
                                    upstream_tls_server_name="replica.meridian.internal",
                                    health={"enabled": True, "interval_s": 30})
        async with http.post(f"http://127.0.0.1:{by_name.port}/v1/chat/completions", data=BODY,
                             headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["choices"][0]["message"]["content"]
        assert await by_name.checker.check(by_name.state.endpoints["a"])
        wrong = await make_router(table, upstream_tls_ca_file=pki.ca, upstream_tls_server_name="other.meridian.internal")
        async with http.post(f"http://127.0.0.1:{wrong.port}/v1/chat/completions", data=BODY,
                             headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 502
            assert "Hostname mismatch" in (await resp.json())["error"]["message"]


def test_upstream_tls_server_name_must_be_a_dns_name():
    """A server name that is not a DNS name (a URL, a host:port) is refused naming the setting."""
    for bad in ("https://replica", "replica:8443", "a b"):
        with pytest.raises(ValueError, match="upstream_tls_server_name"):
            router_config.RouterConfig.model_validate({"upstream_tls_server_name": bad})
        with pytest.raises(ValueError, match="upstream_tls_server_names.east"):
            router_config.RouterConfig.model_validate({"upstream_tls_server_names": {"east": bad}})


async def test_each_cluster_can_have_its_own_replica_name(pki, tmp_path, make_router, http):
    """upstream_tls_server_names maps a cluster id (the routing table's cluster_id) to its name: a
    replica of that cluster is served; a replica of another cluster presenting the first one's
    certificate is refused, so one cluster's key cannot stand in for another's replicas."""
    cert, key = tls_certs.server_for(pki, ("replica.east.meridian.internal",), tmp_path / "east", "replica")
    names = {"east": "replica.east.meridian.internal", "west": "replica.west.meridian.internal"}
    async with _relayed_emulator(cert, key) as port:
        for cluster, status in (("east", 200), ("west", 502)):
            route = dataclasses.replace(testing.replica("a", port, scheme="https"), cluster_id=cluster)
            router = await make_router(testing.table(1, {"m": [route]}), upstream_tls_ca_file=pki.ca,
                                       upstream_tls_server_name="replica.meridian.internal",
                                       upstream_tls_server_names=names)
            async with http.post(f"http://127.0.0.1:{router.port}/v1/chat/completions", data=BODY,
                                 headers={"Content-Type": "application/json"}) as resp:
                assert resp.status == status, (cluster, await resp.text())
