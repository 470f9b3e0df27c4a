"""From a Cluster spec to what the agent runs with: the cluster document, its token, its state
directory and the replica launch settings. Errors name the field or file and what to do."""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Mapping, Sequence

import runtime_adapter

from meridian import spec
from meridian import tls as meridian_tls

from agents import allocation, backends


class ConfigError(ValueError):
    """The agent cannot start with this configuration; the message says what to change."""


def load_cluster(paths: Sequence[str], name: str | None = None) -> spec.Cluster:
    """The Cluster document ``name`` from ``paths`` (every error of the files is reported at once
    by ``spec.SpecError``). Without ``name`` the files must hold exactly one Cluster."""
    loaded = spec.load_files(list(paths))
    clusters = [d for d in loaded.of_kind("Cluster") if isinstance(d, spec.Cluster)]
    names = [c.metadata.name for c in clusters]
    if not clusters:
        raise ConfigError(f"no Cluster document in {', '.join(paths)}")
    if name is None:
        if len(clusters) > 1:
            raise ConfigError(f"{len(clusters)} Cluster documents in {', '.join(paths)}; pick one with --name "
                              f"({', '.join(names)})")
        return clusters[0]
    for c in clusters:
        if c.metadata.name == name:
            return c
    raise ConfigError(spec.base.unknown_name("cluster", name, names))


def read_token(cluster: spec.Cluster, environ: Mapping[str, str] | None = None) -> str:
    """The per-cluster token the scheduler expects, from ``auth.token_env`` or ``auth.token_file``."""
    auth = cluster.spec.auth
    env = os.environ if environ is None else environ
    if auth.token_env:
        token = env.get(auth.token_env, "").strip()
        if not token:
            raise ConfigError(f"spec.auth.token_env: environment variable {auth.token_env} is unset or empty; "
                              "export the cluster's token in it")
        return token
    path = pathlib.Path(auth.token_file or "").expanduser()
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"spec.auth.token_file: cannot read {path}: {exc.strerror or exc}") from None
    if not token:
        raise ConfigError(f"spec.auth.token_file: {path} is empty")
    return token


def state_dir(cluster: spec.Cluster, override: str | None = None) -> pathlib.Path:
    """``agent.state_dir``/<cluster id>: several agents may share a machine (the demo) and a base."""
    base = pathlib.Path(override or cluster.spec.agent.state_dir).expanduser()
    return base / cluster.metadata.name


def engine_command(command: Sequence[str]) -> tuple[str, ...]:
    """The engine command with a bare ``python`` resolved to this interpreter, so the engine runs in
    the agent's environment (where SGLang or the emulator is installed)."""
    if not command:
        raise ConfigError("spec.agent.engine_command is empty; e.g. [python, -m, sglang.launch_server]")
    first = command[0]
    if first in ("python", "python3"):
        first = sys.executable
    return (first, *command[1:])


def replica_api_key(cluster: spec.Cluster, environ: Mapping[str, str] | None = None) -> str | None:
    """The API key the local backend's engines require, from ``replicas.api_key_file`` or
    ``replicas.api_key_env`` (None when neither is set). The kubernetes backend's pods read theirs
    from a Secret: the agent never holds it."""
    r = cluster.spec.replicas
    if r.api_key_env:
        env = os.environ if environ is None else environ
        key = env.get(r.api_key_env, "").strip()
        if not key:
            raise ConfigError(f"spec.replicas.api_key_env: environment variable {r.api_key_env} is unset or empty; "
                              "export the replicas' API key in it")
        return key
    if not r.api_key_file:
        return None
    path = pathlib.Path(r.api_key_file).expanduser()
    try:
        key = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"spec.replicas.api_key_file: cannot read {path}: {exc.strerror or exc}") from None
    if not key:
        raise ConfigError(f"spec.replicas.api_key_file: {path} is empty")
    return key


def replica_tls(cluster: spec.Cluster) -> runtime_adapter.TlsFiles | None:
    """The local backend's TLS files (``replicas.local.tls``), checked now: both parse, the key is
    unencrypted and belongs to the certificate; paths made absolute, so a relay started by this
    agent and one started by the next (from another directory) are given the same files."""
    local = cluster.spec.replicas.local
    if local is None or local.tls is None:
        return None
    field = "spec.replicas.local.tls"
    cert = str(pathlib.Path(local.tls.cert_file).expanduser().absolute())
    key = str(pathlib.Path(local.tls.key_file).expanduser().absolute())
    try:
        meridian_tls.read_key_pair(cert, key, cert_setting=f"{field}.cert_file", key_setting=f"{field}.key_file")
    except meridian_tls.TlsFileError as exc:
        raise ConfigError(str(exc)) from None
    return runtime_adapter.TlsFiles(cert, key, local.tls.reload_interval_s)


def replica_settings(cluster: spec.Cluster, environ: Mapping[str, str] | None = None,
                     **overrides) -> backends.ReplicaSettings:
    a = cluster.spec.agent
    values = dict(advertise_host=a.advertise_host, port_range=allocation.parse_port_range(a.replica_ports),
                  engine_command=engine_command(a.engine_command),
                  cache_dir=str(pathlib.Path(a.cache_dir).expanduser()) if a.cache_dir else None,
                  api_key=replica_api_key(cluster, environ), tls=replica_tls(cluster),
                  emulator_region=cluster.spec.region if cluster.spec.provider_name == "sim" else "")
    values.update(overrides)
    return backends.ReplicaSettings(**values)
