"""The replica's TLS, terminated by the runtime adapter beside the engine: ``python -m runtime_adapter
serve`` with a certificate binds the engine to loopback and serves HTTPS on its TLS port, relaying
to it; the router (``upstream_tls_ca_file``) serves a request and a token stream through it, and a
certificate rotated on disk is served to new connections without a restart."""

from __future__ import annotations

import asyncio
import random
import shutil
import ssl
import subprocess
import sys
import time

import aiohttp
import openai
import pytest

from meridian.demo import processes
from router import app as router_app
from router import config as router_config
from router import testing
from runtime_adapter import serve
from tests.integration import tls_certs
from tests.integration.runtime_adapter.test_adapter_serve import Pod

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def pki(tmp_path) -> tls_certs.Pki:
    return tls_certs.make(tmp_path / "pki")


@pytest.fixture
def other(tmp_path) -> tls_certs.Pki:
    return tls_certs.make(tmp_path / "pki-b")


def tls_pod(tmp_path, cert: str, key: str) -> Pod:
    tls_port = processes.free_port()
    pod = Pod(tmp_path, MERIDIAN_TLS_CERT_FILE=cert, MERIDIAN_TLS_KEY_FILE=key, MERIDIAN_TLS_PORT=str(tls_port),
              MERIDIAN_TLS_RELOAD_INTERVAL_S="0.2")
    pod.tls_port = tls_port
    return pod


async def _router(pki: tls_certs.Pki, port: int) -> router_app.Router:
    cfg = router_config.RouterConfig.model_validate({"listen_port": 0, "lkg_store": "none", "health": {"enabled": False},
                                                     "upstream_tls_ca_file": pki.ca})
    router = router_app.Router(cfg, rng=random.Random(0))
    await router.start()
    router.state.apply(testing.table(1, {"qwen": [testing.replica("r1", port, scheme="https")]}), "static")
    return router


async def test_the_router_serves_a_request_and_a_stream_through_the_replicas_tls_port(tmp_path, pki):
    """With a certificate, the engine listens on 127.0.0.1 only and the TLS port relays to it: the
    router, trusting the replica's CA, answers a chat request and streams one to its usage chunk;
    the engine's /metrics stay readable on the adapter port; plain HTTP to the TLS port is refused."""
    async with aiohttp.ClientSession() as session:
        with tls_pod(tmp_path, pki.server_cert, pki.server_key) as pod:
            await pod.ready(session)
            assert f"--host 127.0.0.1 --port {pod.port}" in pod.log()
            router = await _router(pki, pod.tls_port)
            client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{router.port}/v1", api_key="unused",
                                        max_retries=0, timeout=60)
            try:
                answer = await client.chat.completions.create(model="qwen", max_tokens=5,
                                                              messages=[{"role": "user", "content": "hi"}])
                assert answer.usage.completion_tokens == 5
                stream = await client.chat.completions.create(model="qwen", max_tokens=8, stream=True,
                                                              stream_options={"include_usage": True},
                                                              messages=[{"role": "user", "content": "count"}])
                chunks, usage = 0, None
                async for chunk in stream:
                    chunks += 1
                    usage = chunk.usage or usage
                assert usage is not None and usage.completion_tokens == 8 and chunks >= 8
            finally:
                await client.close()
                await router.stop()
            async with session.get(pod.adapter + "/engine/metrics") as resp:  # the agent's load scrape
                assert resp.status == 200 and "sglang:num_running_reqs" in await resp.text()
            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{pod.tls_port}/health") as resp:
                    await resp.read()
                    assert resp.status >= 400  # an HTTP answer at all would be a plaintext port


async def test_a_certificate_rotated_on_disk_serves_new_connections_without_a_restart(tmp_path, pki, other):
    """Replacing the certificate and key files: within the reload interval a new connection gets
    the new certificate (trusted by the new CA, refused by the old), the serve process unchanged."""
    cert, key = str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    async with aiohttp.ClientSession() as session:
        with tls_pod(tmp_path, cert, key) as pod:
            await pod.ready(session)
            url = f"https://127.0.0.1:{pod.tls_port}/v1/models"
            old_trust, new_trust = ssl.create_default_context(cafile=pki.ca), ssl.create_default_context(cafile=other.ca)
            async with session.get(url, ssl=old_trust) as resp:
                assert resp.status == 200 and (await resp.json())["data"][0]["id"] == "qwen"
            pid = pod.proc.pid
            shutil.copy(other.server_cert, cert)
            shutil.copy(other.server_key, key)
            deadline = time.monotonic() + 10
            while True:  # the relay checks the files every 0.2 s
                try:
                    async with aiohttp.ClientSession() as fresh, fresh.get(url, ssl=new_trust) as resp:
                        assert resp.status == 200
                        break
                except aiohttp.ClientConnectorCertificateError:
                    assert time.monotonic() < deadline, f"the new certificate was never served:\n{pod.log()}"
                    await asyncio.sleep(0.2)
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                async with aiohttp.ClientSession() as fresh, fresh.get(url, ssl=old_trust) as resp:
                    await resp.read()
            assert pod.proc.pid == pid and pod.proc.poll() is None
            assert "event=tls_reloaded" in pod.log()


def test_half_a_tls_pair_or_a_bad_file_exits_2_naming_the_setting(tmp_path, pki):
    """A certificate without its key, or a key that does not belong to it, stops serve before any
    engine starts, naming the setting."""
    for env, message in (({"MERIDIAN_TLS_CERT_FILE": pki.server_cert}, "give both or neither"),
                         ({"MERIDIAN_TLS_CERT_FILE": pki.server_cert, "MERIDIAN_TLS_KEY_FILE": pki.client_key},
                          "does not belong to the certificate")):
        pod = Pod(tmp_path, **env)
        out = subprocess.run([sys.executable, "-m", "runtime_adapter", "serve"], env=pod.env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 2 and message in out.stderr and serve.ENV["tls_cert_file"] in out.stderr
