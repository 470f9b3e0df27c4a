"""TLS for the scheduler's gRPC port (agents' ``CapacityService``, routers' ``RoutingService``).

Off by default (plaintext), so a laptop demo needs no certificates. ``tls_cert_file`` +
``tls_key_file`` turn on server TLS: clients verify the scheduler. ``tls_client_ca_file`` adds
mutual TLS: the handshake is refused to any client without a certificate signed by that CA, before a
single gRPC message (token authentication still applies on top). Files are read and checked once,
when the service is built, so a bad file stops the process at start with the flag and path named."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging

import grpc

from meridian import tls as tls_files
from scheduler import config as config_mod

log = logging.getLogger("meridian.scheduler.tls")

# The CLI flag of each config setting, named in every error so either spelling is recognisable.
FLAGS = {"tls_cert_file": "--tls-cert-file", "tls_key_file": "--tls-key-file",
         "tls_client_ca_file": "--tls-client-ca-file"}


def setting(name: str) -> str:
    """How errors name a setting: ``tls_cert_file (--tls-cert-file)``."""
    return f"{name} ({FLAGS[name]})"


@dataclasses.dataclass(frozen=True)
class ServerTls:
    """The scheduler's certificate, its key and (for mutual TLS) the CA that signs client certificates."""

    key_pair: tls_files.KeyPair
    client_ca: bytes | None = None

    @property
    def mode(self) -> str:
        return "mutual" if self.client_ca is not None else "server"

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key_pair.private_key, self.key_pair.cert_chain)], root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None)


def load(config: config_mod.SchedulerConfig) -> ServerTls | None:
    """The TLS material the config names, checked; None when TLS is off. Raises
    ``meridian.tls.TlsFileError`` (a ValueError) naming the flag and the path of a bad file."""
    if not config.tls_cert_file:
        return None  # the config model already refused a key or client CA without a certificate
    pair = tls_files.read_key_pair(config.tls_cert_file, config.tls_key_file or "",
                                   cert_setting=setting("tls_cert_file"), key_setting=setting("tls_key_file"))
    client_ca = None
    if config.tls_client_ca_file:
        client_ca = tls_files.read_certificates(config.tls_client_ca_file, setting("tls_client_ca_file"))
    return ServerTls(pair, client_ca)


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a hostname or an interface name: assume it is reachable from outside


def log_mode(server_tls: ServerTls | None, address: str, port: int) -> None:
    """One structured line on how the gRPC port is secured; a warning when plaintext is reachable
    from other machines (cluster tokens and routing tables would cross the network in the clear)."""
    host = address.rsplit(":", 1)[0]
    if server_tls is not None:
        log.info("event=grpc_tls mode=%s address=%s port=%d", server_tls.mode, address, port)
    elif is_loopback(host):
        log.info("event=grpc_tls mode=off address=%s port=%d", address, port)
    else:
        log.warning("event=grpc_insecure address=%s port=%d detail=%r", address, port,
                    "plaintext gRPC on a non-loopback address: cluster and router tokens cross the network "
                    "unencrypted; set --tls-cert-file and --tls-key-file (and --tls-client-ca-file for mutual TLS)")
