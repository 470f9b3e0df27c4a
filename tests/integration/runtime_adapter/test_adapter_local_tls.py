"""A supervised replica behind its TLS relay process (``Replica(tls=..., tls_port=...)``, what the
agents' local backend runs): the engine on loopback only, HTTPS on the public port, the relay
restarted alone when it dies, adopted beside the engine (or replaced, never plaintext), ended with
the engine by drain and stop, and killed with a killed supervisor outside the adoptable mode."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import ssl
import subprocess
import sys

import aiohttp
import pytest

from meridian import fleet
from runtime_adapter import AdoptError, Replica, TlsFiles, emulator, process, records
from tests.conftest import free_port
from tests.integration import tls_certs
from tests.integration.runtime_adapter.conftest import FAST, pid_gone
from tests.integration.runtime_adapter.test_adapter_supervisor import SPEC, chat, emu_env, wait_until

pytestmark = pytest.mark.timeout(180)
PUBLIC = "127.0.0.2"  # the advertised address: the engine must not be on it
CHILD = os.path.join(os.path.dirname(__file__), "supervisor_child.py")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SURVIVE = FAST.model_copy(update={"survive_supervisor_exit": True})


def with_public_name(pki: tls_certs.Pki, directory) -> tls_certs.Pki:
    """``pki`` whose server certificate also names PUBLIC (the advertised address)."""
    cert, key = tls_certs.server_for(pki, ("127.0.0.1", PUBLIC, "localhost"), directory, "replica")
    return dataclasses.replace(pki, server_cert=cert, server_key=key)


@pytest.fixture
def pki(tmp_path) -> tls_certs.Pki:
    return with_public_name(tls_certs.make(tmp_path / "pki"), tmp_path / "pki")


def tls_replica(tmp_path, pki: tls_certs.Pki, config=FAST) -> Replica:
    return Replica(SPEC, "r-tls", port=free_port(), host="127.0.0.1", engine_command=emulator.command(),
                   env=emu_env(), config=config, state_dir=str(tmp_path / "state"),
                   tls=TlsFiles(pki.server_cert, pki.server_key, reload_interval_s=0.2), tls_host=PUBLIC,
                   tls_port=free_port(), advertise_host=PUBLIC)


def trusting(ca: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=ca)),
                                 timeout=aiohttp.ClientTimeout(total=30))


def kill_all(*pids) -> None:
    for pid in pids:
        if pid and not pid_gone(pid):
            os.killpg(pid, signal.SIGKILL)


async def test_the_engine_listens_on_loopback_and_the_relay_serves_https(tmp_path, pki):
    """The endpoint is https on the advertised address; a client trusting the CA is served, plain
    HTTP to that port gets no answer, the engine's port is closed on the advertised address (bound
    to 127.0.0.1 only), and stop ends both processes."""
    r = tls_replica(tmp_path, pki)
    await r.start()
    try:
        await r.wait_ready(60)
        engine_pid, relay_pid = r.pid, r.relay_pid
        public_port = int(r.endpoint.rsplit(":", 1)[1])
        assert r.endpoint.startswith(f"https://{PUBLIC}:") and public_port != r.port
        argv = process.proc_cmdline(engine_pid)
        assert argv[argv.index("--host") + 1] == "127.0.0.1"
        async with trusting(pki.ca) as s:
            assert (await chat(s, r.endpoint))["status"] == 200
        async with aiohttp.ClientSession() as plain:
            with pytest.raises(aiohttp.ClientError):
                async with plain.get(r.endpoint.replace("https://", "http://") + "/health") as resp:
                    await resp.read()
        with pytest.raises(OSError):
            await asyncio.open_connection(PUBLIC, r.port)
        relay_argv = process.proc_cmdline(relay_pid)
        assert pki.server_key in relay_argv and "PRIVATE KEY" not in " ".join(relay_argv)  # the path, never the key
    finally:
        await r.stop()
    await wait_until(lambda: pid_gone(engine_pid) and pid_gone(relay_pid), 15, "engine and relay gone")


async def test_a_killed_relay_is_restarted_alone_and_counted_as_a_crash(tmp_path, pki):
    """SIGKILL of the relay: the replica leaves READY, a new relay serves https again, the engine
    keeps its pid, the restart is counted (restarts, crashes{reason="relay"}) and the record names
    the new relay (adoptable mode, as the agent runs replicas)."""
    r = tls_replica(tmp_path, pki, config=SURVIVE)
    await r.start()
    engine_pid = relay_pid = None
    try:
        await r.wait_ready(60)
        engine_pid, relay_pid = r.pid, r.relay_pid
        os.kill(relay_pid, signal.SIGKILL)
        await wait_until(lambda: r.restarts == 1 and r.relay_pid not in (None, relay_pid)
                         and r.state == fleet.ReplicaState.READY, 30, "the relay restarted")
        assert r.pid == engine_pid and "tls relay exited" in r.last_crash
        crashes = r._metrics.registry.get_sample_value("meridian_replica_crashes_total",
                                                       {"replica": "r-tls", "reason": "relay"})
        assert crashes == 1
        async with trusting(pki.ca) as s:
            assert (await chat(s, r.endpoint))["status"] == 200
        [record] = records.load_all(str(tmp_path / "state"))
        assert record.relay.pid == r.relay_pid
    finally:
        last_relay = r.relay_pid
        await r.stop()
        kill_all(engine_pid, relay_pid, last_relay)


async def test_drain_ends_the_engine_then_its_relay(tmp_path, pki):
    """A drain stops the engine and the relay, and removes the record."""
    r = tls_replica(tmp_path, pki)
    await r.start()
    await r.wait_ready(60)
    engine_pid, relay_pid = r.pid, r.relay_pid
    result = await r.drain(5)
    assert not result.killed and r.state == fleet.ReplicaState.STOPPED
    await wait_until(lambda: pid_gone(engine_pid) and pid_gone(relay_pid), 15, "engine and relay gone")
    assert records.load_all(str(tmp_path / "state")) == []


async def test_adoption_keeps_a_live_relay_and_replaces_a_dead_one(tmp_path, pki):
    """Detached, both processes keep serving; adopted, both keep their pids. With the relay killed
    while nobody supervised it, adoption keeps the engine and starts a new relay: still https. With
    the engine gone, adoption is refused and the relay left in front of it is ended."""
    first = tls_replica(tmp_path, pki, config=SURVIVE)
    await first.start()
    pids: list[int] = []
    try:
        await first.wait_ready(60)
        engine_pid, relay_pid = first.pid, first.relay_pid
        pids += [engine_pid, relay_pid]
        await first.detach()
        [record] = records.load_all(str(tmp_path / "state"))
        assert record.relay is not None and record.relay.pid == relay_pid and record.port == first.port
        kwargs = dict(config=SURVIVE, state_dir=str(tmp_path / "state"), env=emu_env(), advertise_host=PUBLIC,
                      tls=TlsFiles(pki.server_cert, pki.server_key, reload_interval_s=0.2))
        second = await Replica.adopt(record, **kwargs)
        await second.wait_ready(30)
        assert (second.pid, second.relay_pid) == (engine_pid, relay_pid) and second.endpoint == first.endpoint
        await second.detach()

        os.kill(relay_pid, signal.SIGKILL)
        await wait_until(lambda: pid_gone(relay_pid), 10, "relay gone")
        [record] = records.load_all(str(tmp_path / "state"))
        third = await Replica.adopt(record, **kwargs)
        await third.wait_ready(30)
        assert third.pid == engine_pid and third.relay_pid not in (None, relay_pid)
        pids.append(third.relay_pid)
        async with trusting(pki.ca) as s:
            assert (await chat(s, third.endpoint))["status"] == 200
        await third.detach()

        [record] = records.load_all(str(tmp_path / "state"))
        os.killpg(engine_pid, signal.SIGKILL)
        await wait_until(lambda: pid_gone(engine_pid), 10, "engine gone")
        with pytest.raises(AdoptError, match="gone"):
            await Replica.adopt(record, **kwargs)
        await wait_until(lambda: pid_gone(record.relay.pid), 15, "the orphaned relay ended")
    finally:
        kill_all(*pids)


async def test_adopting_with_other_certificate_files_restarts_the_relay_with_them(tmp_path, pki):
    """A relay recorded with other files (the spec's paths changed) is replaced by one given the
    current paths; the engine is kept."""
    first = tls_replica(tmp_path, pki, config=SURVIVE)
    await first.start()
    pids: list[int] = []
    try:
        await first.wait_ready(60)
        pids += [first.pid, first.relay_pid]
        await first.detach()
        [record] = records.load_all(str(tmp_path / "state"))
        moved = tmp_path / "moved"
        moved.mkdir()
        cert, key = moved / "tls.crt", moved / "tls.key"
        cert.write_bytes(open(pki.server_cert, "rb").read())
        key.write_bytes(open(pki.server_key, "rb").read())
        adopted = await Replica.adopt(record, config=SURVIVE, state_dir=str(tmp_path / "state"), env=emu_env(),
                                      tls=TlsFiles(str(cert), str(key)))
        await adopted.wait_ready(30)
        pids.append(adopted.relay_pid)
        assert adopted.pid == pids[0] and adopted.relay_pid != pids[1]
        assert str(key) in process.proc_cmdline(adopted.relay_pid)
        await wait_until(lambda: pid_gone(pids[1]), 10, "the old relay ended")
        await adopted.stop()
        await wait_until(lambda: all(pid_gone(p) for p in pids), 15, "everything stopped")
    finally:
        kill_all(*pids)


async def test_the_relay_dies_with_a_killed_supervisor_outside_the_adoptable_mode(tmp_path, pki):
    """SIGKILL of a (non-adoptable) supervisor takes the engine and the relay with it (death signal)."""
    env = {**os.environ, "PYTHONPATH": REPO, "TLS_CERT": pki.server_cert, "TLS_KEY": pki.server_key,
           "TLS_PORT": str(free_port())}
    child = subprocess.Popen([sys.executable, CHILD, str(free_port()), str(tmp_path), "die", "tls"],
                             stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
    pids: list[int] = []
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), timeout=90)
        info = json.loads(line)
        pids = [info["pid"], info["relay_pid"]]
        assert not pid_gone(pids[1])
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        await wait_until(lambda: all(pid_gone(p) for p in pids), 15, "engine and relay to die with the supervisor")
    finally:
        child.kill()
        child.wait(timeout=10)
        kill_all(*pids)


def test_the_relay_refuses_a_key_that_is_not_its_certificates(pki):
    """``python -m runtime_adapter relay`` with a mismatched pair exits 2 naming the flag, before listening."""
    out = subprocess.run([sys.executable, "-m", "runtime_adapter", "relay", "--upstream", "http://127.0.0.1:1",
                          "--port", str(free_port()), "--tls-cert-file", pki.server_cert,
                          "--tls-key-file", pki.client_key], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--tls-key-file" in out.stderr and "does not belong" in out.stderr


def test_a_tls_replica_refuses_an_engine_host_off_loopback(pki):
    """With tls the engine must bind loopback: a public host is a ValueError naming it."""
    with pytest.raises(ValueError, match="loopback"):
        Replica(SPEC, "r", port=free_port(), host="0.0.0.0", tls=TlsFiles(pki.server_cert, pki.server_key),
                tls_port=free_port())



async def test_a_certificate_rotated_on_disk_reaches_the_local_relay_without_a_restart(tmp_path, pki):
    """Replacing the files the relay was given: within its reload interval a new connection gets the
    new certificate (trusted by the new CA, refused by the old), the relay process unchanged."""
    other = with_public_name(tls_certs.make(tmp_path / "pki-b"), tmp_path / "pki-b")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(open(pki.server_cert, "rb").read())
    key.write_bytes(open(pki.server_key, "rb").read())
    r = Replica(SPEC, "r-rot", port=free_port(), host="127.0.0.1", engine_command=emulator.command(), env=emu_env(),
                config=FAST, state_dir=str(tmp_path / "state"), tls=TlsFiles(str(cert), str(key), reload_interval_s=0.2),
                tls_host=PUBLIC, tls_port=free_port(), advertise_host=PUBLIC)
    await r.start()
    try:
        await r.wait_ready(60)
        relay_pid = r.relay_pid
        url = r.endpoint + "/v1/models"
        async with trusting(pki.ca) as s, s.get(url) as resp:
            assert resp.status == 200
        cert.write_bytes(open(other.server_cert, "rb").read())
        key.write_bytes(open(other.server_key, "rb").read())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while True:  # the relay checks the files every 0.2 s
            try:
                async with trusting(other.ca) as s, s.get(url) as resp:
                    assert resp.status == 200
                    break
            except aiohttp.ClientConnectorCertificateError:
                assert loop.time() < deadline, "the rotated certificate was never served"
                await asyncio.sleep(0.2)
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with trusting(pki.ca) as s, s.get(url) as resp:
                await resp.read()
        assert r.relay_pid == relay_pid and r.restarts == 0
    finally:
        await r.stop()
