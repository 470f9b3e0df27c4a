"""TLS for the scheduler's gRPC port (agents' ``CapacityService``, routers' ``RoutingService``).

Off by default (plaintext), so a laptop demo needs no certificates. ``tls_cert_file`` +
``tls_key_file`` turn on server TLS: clients verify the scheduler. ``tls_client_ca_file`` adds
mutual TLS: the handshake is refused to any client without a certificate signed by that CA, before a
single gRPC message (token authentication still applies on top). Files are read and checked when the
service is built, so a bad file stops the process at start with the flag and path named.

Rotation without a restart: the port serves ``grpc.dynamic_ssl_server_credentials``, whose fetcher
gRPC calls at every new handshake (checked with grpc.aio 1.85: a rotated certificate is presented
to the next connection, open streams keep theirs). The fetcher only compares what it handed out
with what ``ReloadingServerTls.files`` (the kernel's ``meridian.tls.ReloadingFiles``) holds now; the
files are checked every ``tls_reload_interval_s`` by its watch task, off the event loop.
A bad rotated file (half-written, a key of another certificate) keeps the previous certificate
serving, logged as ``event=tls_reload_failed`` naming the flag, the path and what is wrong."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from collections.abc import Callable

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

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        """This material as the certificate configuration a dynamic server credential hands out."""
        return grpc.ssl_server_certificate_configuration(
            [(self.key_pair.private_key, self.key_pair.cert_chain)], root_certificates=self.client_ca)


def read(config: config_mod.SchedulerConfig) -> ServerTls:
    """The files the config names, read and checked (``TlsFileError`` names the flag and the path)."""
    pair = tls_files.read_key_pair(config.tls_cert_file or "", config.tls_key_file or "",
                                   cert_setting=setting("tls_cert_file"), key_setting=setting("tls_key_file"))
    client_ca = None
    if config.tls_client_ca_file:
        client_ca = tls_files.read_certificates(config.tls_client_ca_file, setting("tls_client_ca_file"))
    return ServerTls(pair, client_ca)


class ReloadingServerTls:
    """The gRPC port's TLS, reloaded from its files: listen with ``credentials()``, keep ``files``
    checked (``files.watch`` or ``files.reload_if_changed``); each new handshake gets the current
    material. Whether client certificates are required is fixed at start (it is the presence of
    ``tls_client_ca_file``, a flag); the CA that signs them is reloaded like the certificate."""

    def __init__(self, config: config_mod.SchedulerConfig, *, on_error: Callable[[str], None] | None = None):
        self.files: tls_files.ReloadingFiles[ServerTls] = tls_files.ReloadingFiles(
            (config.tls_cert_file or "", config.tls_key_file or "", config.tls_client_ca_file or ""),
            lambda: read(config), reload_interval_s=config.tls_reload_interval_s, on_error=on_error)
        self.require_client_auth = self.files.current.client_ca is not None
        self._handed = self.files.current

    @property
    def mode(self) -> str:
        return self.files.current.mode

    @property
    def current(self) -> ServerTls:
        return self.files.current

    def credentials(self) -> grpc.ServerCredentials:
        self._handed = self.files.current
        return grpc.dynamic_ssl_server_credentials(self._handed.configuration(), self._fetch,
                                                   require_client_authentication=self.require_client_auth)

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        # Called by gRPC at every handshake, on one of gRPC's own threads (not the event loop; seen with
        # grpcio 1.85): None keeps the configuration it has. No I/O; a reference read and compared.
        # Two handshakes racing here both hand out the new configuration, which is harmless.
        current = self.files.current
        if current is self._handed:
            return None
        self._handed = current
        log.info("event=grpc_tls_rotated mode=%s generation=%d", current.mode, self.files.generation)
        return current.configuration()


def load(config: config_mod.SchedulerConfig, *, on_error: Callable[[str], None] | None = None
         ) -> ReloadingServerTls | None:
    """The TLS material the config names, checked; None when TLS is off. Raises
    ``meridian.tls.TlsFileError`` (a ValueError) naming the flag and the path of a bad file."""
    if not config.tls_cert_file:
        return None  # the config model already refused a key or client CA without a certificate
    return ReloadingServerTls(config, on_error=on_error)


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a hostname or an interface name: assume it is reachable from outside


def log_mode(server_tls: ServerTls | ReloadingServerTls | None, address: str, port: int) -> None:
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
