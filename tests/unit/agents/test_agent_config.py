"""From Cluster files to the agent's configuration, with errors that say what to fix."""

from __future__ import annotations

import sys

import pytest
import runtime_adapter

from meridian.cli import main as cli_main
from tests.integration import tls_certs

from agents import backends, config
from agents.backends import engine

TWO = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: one}
spec:
  cloud: local
  region: us-east-1
  auth: {token_env: ONE_TOKEN}
  pools: [{name: p, instance_type: g6.xlarge, max_nodes: 2}]
  agent: {engine_command: [python, -m, runtime_adapter.emulator], replica_ports: 32000-32010}
---
apiVersion: meridian/v1
kind: Cluster
metadata: {name: two}
spec:
  cloud: local
  region: us-east-1
  auth: {token_file: TOKEN_FILE}
  pools: [{name: p, instance_type: g6.xlarge, max_nodes: 2}]
"""


@pytest.fixture
def files(tmp_path):
    token = tmp_path / "token"
    token.write_text("  file-secret\n")
    path = tmp_path / "clusters.yaml"
    path.write_text(TWO.replace("TOKEN_FILE", str(token)))
    return path, token


def test_name_picks_one_of_several_clusters(files):
    """--name selects a Cluster; without it several documents are an error listing the names."""
    path, _ = files
    assert config.load_cluster([str(path)], "two").metadata.name == "two"
    with pytest.raises(config.ConfigError, match="one, two"):
        config.load_cluster([str(path)])
    with pytest.raises(config.ConfigError, match="did you mean 'two'"):
        config.load_cluster([str(path)], "twoo")


def test_tokens_come_from_env_or_file(files):
    """The token is read from the named variable or file, stripped; a missing one names the field."""
    path, token = files
    one = config.load_cluster([str(path)], "one")
    two = config.load_cluster([str(path)], "two")
    assert config.read_token(one, {"ONE_TOKEN": "s3cret"}) == "s3cret"
    with pytest.raises(config.ConfigError, match="spec.auth.token_env: environment variable ONE_TOKEN"):
        config.read_token(one, {})
    assert config.read_token(two) == "file-secret"
    token.unlink()
    with pytest.raises(config.ConfigError, match="spec.auth.token_file"):
        config.read_token(two)


def test_replica_settings_and_state_dir(files, tmp_path):
    """A bare `python` in engine_command is this interpreter; the state dir is per cluster."""
    path, _ = files
    one = config.load_cluster([str(path)], "one")
    settings = config.replica_settings(one)
    assert settings.engine_command[0] == sys.executable and settings.port_range == (32000, 32010)
    # A sim (here: local) cluster's emulator replicas pretend to run in its region.
    assert settings.emulator_region == "us-east-1"
    env = engine.engine_env(settings, "L4")
    assert (env["MERIDIAN_EMULATOR_REGION"], env["MERIDIAN_EMULATOR_GPU_TYPE"]) == ("us-east-1", "L4")
    # A GPU type the emulator does not model drops only that setting.
    assert engine.engine_env(settings, "X9")["MERIDIAN_EMULATOR_REGION"] == "us-east-1"
    assert config.state_dir(one, str(tmp_path)) == tmp_path / "one"
    with pytest.raises(config.ConfigError, match="engine_command is empty"):
        config.engine_command([])


@pytest.mark.parametrize("command,emulator", [
    (["python", "-m", "runtime_adapter.emulator"], True), (["python3", "-mruntime_adapter.emulator"], True),
    (["meridian", "emulator"], True), (["/opt/venv/bin/meridian", "emulator", "--speedup", "2"], True),
    (["python", "-m", "meridian.cli.main", "emulator"], True), (["env", "meridian", "emulator"], True),
    (["python", "-m", "sglang.launch_server"], False), (["meridian", "router"], False)])
def test_every_documented_emulator_command_gets_its_gpu_type_and_region(command, emulator, tmp_path):
    """`meridian emulator` (documented) is the emulator as much as `python -m runtime_adapter.emulator`:
    its replicas are told the pool's GPU type and the sim cluster's region; SGLang gets neither."""
    settings = backends.ReplicaSettings(engine_command=tuple(command), emulator_region="eu-west-1")
    env = engine.engine_env(settings, "L4")
    assert engine.is_emulator(command) is emulator
    assert ("MERIDIAN_EMULATOR_REGION" in env, "MERIDIAN_EMULATOR_GPU_TYPE" in env) == (emulator, emulator)


def test_cli_reports_an_unusable_configuration(files, monkeypatch, capsys):
    """`meridian agent` exits 1 with a message naming the field when the token is missing."""
    path, _ = files
    monkeypatch.delenv("ONE_TOKEN", raising=False)
    assert cli_main.main(["agent", "--cluster", str(path), "--name", "one"]) == 1
    assert "spec.auth.token_env" in capsys.readouterr().err
    assert cli_main.main(["agent", "--cluster", str(path)]) == 1
    assert "pick one with --name" in capsys.readouterr().err


def test_cli_refuses_unusable_tls_files_before_starting(tmp_path, monkeypatch, capsys):
    """`meridian agent` exits 1 naming the field and the path when the scheduler CA file is missing
    or not a certificate, instead of failing every reconnect later; a certificate without its key
    is a spec error on the field that is missing."""
    monkeypatch.setenv("ONE_TOKEN", "s3cret")
    cluster = TWO.split("---")[0].replace("  auth: {token_env: ONE_TOKEN}\n",
                                          "  auth: {token_env: ONE_TOKEN}\n  scheduler: {address: \"127.0.0.1:7070\", "
                                          "tls: {ca_file: CA}}\n")
    missing = tmp_path / "nope.pem"
    path = tmp_path / "one.yaml"
    path.write_text(cluster.replace("CA", str(missing)))
    assert cli_main.main(["agent", "--cluster", str(path), "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "spec.scheduler.tls.ca_file" in err and str(missing) in err and "cannot read" in err
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    path.write_text(cluster.replace("CA", str(garbage)))
    assert cli_main.main(["agent", "--cluster", str(path), "--state-dir", str(tmp_path)]) == 1
    assert "no PEM certificate" in capsys.readouterr().err
    path.write_text(cluster.replace("tls: {ca_file: CA}", f"tls: {{ca_file: {garbage}, cert_file: {garbage}}}"))
    assert cli_main.main(["agent", "--cluster", str(path), "--state-dir", str(tmp_path)]) == 1
    assert "scheduler.tls.key_file" in capsys.readouterr().err


def test_a_cloud_region_from_the_replicas_latency_map_file_is_passed_on(tmp_path, monkeypatch):
    """A sim cluster in a cloud region that only a LatencyMap file declares keeps its region for its
    emulator replicas when that file is what they will be given (not dropped as unknown)."""
    lmap = tmp_path / "latency.yaml"
    lmap.write_text("""
apiVersion: meridian/v1
kind: LatencyMap
metadata: {name: lab}
spec:
  regions: [{name: lab-east-1, kind: cloud, cloud: aws, latitude: 40.0, longitude: -75.0}]
""")
    settings = backends.ReplicaSettings(engine_command=("python", "-m", "runtime_adapter.emulator"),
                                        emulator_region="lab-east-1")
    assert "MERIDIAN_EMULATOR_REGION" not in engine.engine_env(settings, "L4")
    monkeypatch.setenv("MERIDIAN_EMULATOR_LATENCY_MAP_FILE", str(lmap))
    env = engine.engine_env(settings, "L4")
    assert env["MERIDIAN_EMULATOR_REGION"] == "lab-east-1"


def test_the_replica_api_key_comes_from_the_named_file_or_variable(tmp_path):
    """``replicas.api_key_file``/``api_key_env`` give the engines' key (stripped) to the replica
    settings, never in their repr; a missing file, an empty one, an unset variable or both settings
    at once are errors naming the field."""
    key_file = tmp_path / "replica-key"
    key_file.write_text("  sk-replica-1\n")

    def cluster(replicas: str):
        path = tmp_path / "c.yaml"
        path.write_text(TWO.split("---")[0] + f"  replicas: {replicas}\n")
        return config.load_cluster([str(path)])

    by_file = cluster(f'{{api_key_file: "{key_file}"}}')
    settings = config.replica_settings(by_file)
    assert settings.api_key == "sk-replica-1" and "sk-replica-1" not in repr(settings)
    assert config.replica_settings(cluster("{api_key_env: REPLICA_KEY}"), {"REPLICA_KEY": "sk-2"}).api_key == "sk-2"
    assert config.replica_settings(cluster("{backend: local}")).api_key is None
    with pytest.raises(config.ConfigError, match="spec.replicas.api_key_env: environment variable REPLICA_KEY"):
        config.replica_settings(cluster("{api_key_env: REPLICA_KEY}"), {})
    key_file.write_text("\n")
    with pytest.raises(config.ConfigError, match="spec.replicas.api_key_file: .* is empty"):
        config.replica_settings(by_file)
    key_file.unlink()
    with pytest.raises(config.ConfigError, match="spec.replicas.api_key_file: cannot read"):
        config.replica_settings(by_file)
    with pytest.raises(Exception, match="api_key_env: give api_key_file or api_key_env, not both"):
        cluster(f'{{api_key_file: "{key_file}", api_key_env: K}}')


def test_the_local_replicas_tls_files_are_checked_at_start_and_named_in_errors(tmp_path):
    """``replicas.local.tls`` gives the replica settings absolute paths (never the key's contents);
    a missing file, a key that is not the certificate's, ``local`` under the kubernetes backend or
    half a pair are errors naming the field."""
    pki = tls_certs.make(tmp_path / "pki")

    def cluster(replicas: str):
        path = tmp_path / "c.yaml"
        path.write_text(TWO.split("---")[0] + f"  replicas: {replicas}\n")
        return config.load_cluster([str(path)])

    good = cluster(f'{{local: {{tls: {{cert_file: "{pki.server_cert}", key_file: "{pki.server_key}"}}}}}}')
    tls = config.replica_settings(good).tls
    assert tls == runtime_adapter.TlsFiles(pki.server_cert, pki.server_key, 5.0)
    assert "PRIVATE KEY" not in repr(config.replica_settings(good))
    assert config.replica_settings(cluster("{backend: local}")).tls is None
    with pytest.raises(config.ConfigError, match=r"spec.replicas.local.tls.cert_file .*nope.crt: cannot read"):
        config.replica_settings(cluster(f'{{local: {{tls: {{cert_file: "{tmp_path}/nope.crt", '
                                        f'key_file: "{pki.server_key}"}}}}}}'))
    with pytest.raises(config.ConfigError, match="spec.replicas.local.tls.key_file .*does not belong"):
        config.replica_settings(cluster(f'{{local: {{tls: {{cert_file: "{pki.server_cert}", '
                                        f'key_file: "{pki.client_key}"}}}}}}'))
    with pytest.raises(Exception, match="key_file"):
        cluster(f'{{local: {{tls: {{cert_file: "{pki.server_cert}"}}}}}}')
    with pytest.raises(Exception, match="local: applies to the local backend only"):
        cluster('{backend: kubernetes, kubernetes: {image: "meridian/replica:1"}, '
                f'local: {{tls: {{cert_file: "{pki.server_cert}", key_file: "{pki.server_key}"}}}}}}')
