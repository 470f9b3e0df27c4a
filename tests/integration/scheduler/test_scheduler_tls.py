"""TLS on the scheduler's gRPC port, over real gRPC on 127.0.0.1 with throwaway certificates: the real
agent reports over TLS (server-verified and mutual); plaintext, certificate-less (under mutual TLS)
and wrongly-trusting clients are refused at the handshake; bad flag combinations and bad files stop
``meridian scheduler`` at start with the flag and the path named."""

from __future__ import annotations

import pathlib
import sys

import grpc
import pytest
from cryptography.hazmat.primitives import serialization

import agents
from meridian import spec
from meridian.cli import main as cli_main
from meridian.v1 import routing_pb2, routing_pb2_grpc
from scheduler import service, testing
from scheduler.server import auth
from tests.integration import tls_certs

CLUSTER_TOKEN = "tls-cluster-token"
ROUTER_TOKEN = "tls-router-token"


@pytest.fixture
def pki(tmp_path) -> tls_certs.Pki:
    return tls_certs.make(tmp_path / "pki")


@pytest.fixture
async def make_scheduler(tmp_path):
    """make(**tls_settings) -> a started scheduler node on a free loopback port; all stopped after."""
    made: list[service.SchedulerService] = []

    async def make(**settings) -> service.SchedulerService:
        cfg = testing.local_config(f"sqlite://{tmp_path}/state{len(made)}.db", scheduler_id=f"tls{len(made)}",
                                   **settings)
        tokens = auth.TokenBook(auth.TokensFile({"c1": auth.digest(CLUSTER_TOKEN)}, (auth.digest(ROUTER_TOKEN),)),
                                env={})
        svc = service.SchedulerService(cfg, env={}, tokens=tokens, admin_auth=auth.AdminAuth(auth.digest("admin")))
        await svc.start()
        made.append(svc)
        return svc

    try:
        yield make
    finally:
        for svc in reversed(made):
            await svc.stop(grace_s=0.5)


def server_settings(pki: tls_certs.Pki, *, mutual: bool = False) -> dict:
    out = {"tls_cert_file": pki.server_cert, "tls_key_file": pki.server_key}
    if mutual:
        out["tls_client_ca_file"] = pki.ca
    return out


def credentials(ca: str, cert: str | None = None, key: str | None = None) -> grpc.ChannelCredentials:
    read = lambda p: pathlib.Path(p).read_bytes() if p else None  # noqa: E731
    return grpc.ssl_channel_credentials(read(ca), read(key), read(cert))


async def report_traffic(port: int, creds: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    """One ReportTraffic call as a router would make it; the status code it ends with."""
    address = f"127.0.0.1:{port}"
    channel = grpc.aio.insecure_channel(address) if creds is None else grpc.aio.secure_channel(address, creds)
    async with channel:
        stub = routing_pb2_grpc.RoutingServiceStub(channel)
        try:
            await stub.ReportTraffic(routing_pb2.TrafficReport(router_id="probe", token=ROUTER_TOKEN), timeout=10)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def cluster(address: str, tls: dict, state_dir: pathlib.Path) -> spec.Cluster:
    tls_yaml = ", ".join(f'{k}: "{v}"' for k, v in tls.items())
    text = f"""
apiVersion: meridian/v1
kind: Cluster
metadata: {{name: c1}}
spec:
  cloud: aws
  region: us-east-1
  provider: sim
  pools:
    - {{name: l4, instance_type: g6.xlarge, max_nodes: 2, initial_nodes: 1}}
  sim: {{provisioning_delay_s: 1, spot_preemptions_per_node_hour: 0}}
  auth: {{token_env: MERIDIAN_TLS_TEST_TOKEN}}
  scheduler: {{address: "{address}", tls: {{{tls_yaml}}}}}
  agent:
    report_interval_s: 1
    heartbeat_interval_s: 1
    state_dir: {state_dir}
    cache_dir: ""
    engine_command: [{sys.executable}, -m, runtime_adapter.emulator]
"""
    return spec.load_text(text, "c1.yaml").of_kind("Cluster")[0]


@pytest.mark.parametrize("mutual", [False, True], ids=["server-tls", "mutual-tls"])
async def test_agent_report_reaches_scheduler_over_tls(pki, make_scheduler, tmp_path, mutual):
    """The real agent (agents/stream.py's TLS channel) connects to a TLS scheduler and its inventory
    report arrives; under mutual TLS it presents its client certificate."""
    svc = await leading(await make_scheduler(**server_settings(pki, mutual=mutual)))
    tls = {"ca_file": pki.ca, **({"cert_file": pki.client_cert, "key_file": pki.client_key} if mutual else {})}
    doc = cluster(f"127.0.0.1:{svc.grpc_port}", tls, tmp_path / "agent")
    agent = agents.build(doc, token=CLUSTER_TOKEN, state_dir=tmp_path / "agent",
                         replica_settings=agents.config.replica_settings(doc),
                         options=agents.AgentOptions(discover_interval_s=0.5, reconnect_initial_s=0.2,
                                                     reconnect_max_s=2.0, serve_status=False))
    await agent.start()
    try:
        status = await testing.wait_for(lambda: _reported(svc, "c1"), timeout_s=30, what="c1's report over TLS")
        assert status["grpc_tls"] == ("mutual" if mutual else "server")
        (c1,) = [c for c in status["clusters"] if c["cluster_id"] == "c1"]
        assert c1["connected"] and [p["pool_id"] for p in c1["pool_details"]] == ["l4"]
        assert agent.stream.connected
    finally:
        await agent.shutdown()


async def leading(svc: service.SchedulerService) -> service.SchedulerService:
    await testing.wait_for(lambda: svc.token > 0, what="the TLS scheduler leading")
    return svc


async def _reported(svc: service.SchedulerService, cluster_id: str):
    status = await svc.status()
    done = any(c["cluster_id"] == cluster_id and c["reported"] and c["pools"] for c in status["clusters"])
    return status if done else None


async def test_tls_server_refuses_plaintext_and_wrongly_trusting_clients(pki, make_scheduler):
    """A TLS scheduler serves a client that trusts its CA, and refuses (UNAVAILABLE, no RPC reached)
    a plaintext client and a client that trusts another CA."""
    svc = await make_scheduler(**server_settings(pki))
    assert await report_traffic(svc.grpc_port, credentials(pki.ca)) == grpc.StatusCode.OK
    assert await report_traffic(svc.grpc_port, None) == grpc.StatusCode.UNAVAILABLE
    assert await report_traffic(svc.grpc_port, credentials(pki.other_ca)) == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_refuses_clients_without_a_trusted_certificate(pki, make_scheduler):
    """Under mutual TLS a client with a certificate from the client CA is served; one without a
    certificate, or with one signed by another CA, is refused at the handshake."""
    svc = await make_scheduler(**server_settings(pki, mutual=True))
    assert await report_traffic(svc.grpc_port, credentials(pki.ca, pki.client_cert, pki.client_key)) == grpc.StatusCode.OK
    assert await report_traffic(svc.grpc_port, credentials(pki.ca)) == grpc.StatusCode.UNAVAILABLE
    other = credentials(pki.ca, pki.other_client_cert, pki.other_client_key)
    assert await report_traffic(svc.grpc_port, other) == grpc.StatusCode.UNAVAILABLE


async def test_plaintext_stays_the_default(make_scheduler, caplog):
    """Without TLS flags the port serves plaintext as before, logged as mode=off (no warning on loopback)."""
    with caplog.at_level("INFO", logger="meridian.scheduler.tls"):
        svc = await make_scheduler()
    assert await report_traffic(svc.grpc_port, None) == grpc.StatusCode.OK
    assert (await svc.status())["grpc_tls"] == "off"
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "meridian.scheduler.tls"]
    assert lines == [("INFO", f"event=grpc_tls mode=off address=127.0.0.1:0 port={svc.grpc_port}")]


def _encrypted_key(pki: tls_certs.Pki, directory: pathlib.Path) -> str:
    key = serialization.load_pem_private_key(pathlib.Path(pki.server_key).read_bytes(), None)
    path = directory / "encrypted.key"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(b"secret")))
    return str(path)


def bad_flag_cases(pki: tls_certs.Pki, tmp: pathlib.Path) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (flags, fragments the error must contain)."""
    missing = str(tmp / "nope.crt")
    return {
        "cert-without-key": (["--tls-cert-file", pki.server_cert],
                             ["tls_cert_file (--tls-cert-file) is set but tls_key_file (--tls-key-file) is not"]),
        "key-without-cert": (["--tls-key-file", pki.server_key],
                             ["tls_key_file (--tls-key-file) is set but tls_cert_file (--tls-cert-file) is not"]),
        "client-ca-alone": (["--tls-client-ca-file", pki.ca],
                            ["tls_client_ca_file (--tls-client-ca-file) needs tls_cert_file (--tls-cert-file)"]),
        "missing-cert": (["--tls-cert-file", missing, "--tls-key-file", pki.server_key],
                         [f"--tls-cert-file) {missing}: cannot read: No such file or directory"]),
        "cert-is-a-directory": (["--tls-cert-file", str(tmp), "--tls-key-file", pki.server_key],
                                [f"--tls-cert-file) {tmp}: cannot read: Is a directory"]),
        "missing-client-ca": ([*_pair(pki), "--tls-client-ca-file", missing],
                              [f"--tls-client-ca-file) {missing}: cannot read"]),
        "client-ca-is-a-key": ([*_pair(pki), "--tls-client-ca-file", pki.client_key],
                               [f"--tls-client-ca-file) {pki.client_key}: no PEM certificate"]),
        "key-of-another-cert": (["--tls-cert-file", pki.server_cert, "--tls-key-file", pki.client_key],
                                [f"--tls-key-file) {pki.client_key}: this private key does not belong",
                                 f"--tls-cert-file) {pki.server_cert}"]),
        "encrypted-key": (["--tls-cert-file", pki.server_cert, "--tls-key-file", _encrypted_key(pki, tmp)],
                          ["--tls-key-file)", "is encrypted; Meridian needs an unencrypted PEM key"]),
    }


def _pair(pki: tls_certs.Pki) -> list[str]:
    return ["--tls-cert-file", pki.server_cert, "--tls-key-file", pki.server_key]


CASES = ["cert-without-key", "key-without-cert", "client-ca-alone", "missing-cert", "cert-is-a-directory",
         "missing-client-ca", "client-ca-is-a-key", "key-of-another-cert", "encrypted-key"]


@pytest.mark.parametrize("case", CASES)
def test_bad_tls_flags_stop_the_scheduler_with_a_clear_error(pki, tmp_path, capsys, case):
    """`meridian scheduler` with a bad TLS flag combination or file exits 1 before serving, naming the
    flag and the path (and opens no state)."""
    flags, fragments = bad_flag_cases(pki, tmp_path)[case]
    db = tmp_path / "never.db"
    code = cli_main.main(["scheduler", "--grpc-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0",
                          "--state", f"sqlite://{db}", *flags])
    err = capsys.readouterr().err
    assert code == 1, err
    for fragment in fragments:
        assert fragment in err
    assert not db.exists()
