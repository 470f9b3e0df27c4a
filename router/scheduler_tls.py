"""The router's gRPC channel to the scheduler (``WatchRoutes`` and ``ReportTraffic``), plaintext or TLS.

Mirrors the agent's ``scheduler.tls`` section: ``scheduler_tls_ca_file`` turns TLS on and is the CA
bundle the scheduler's certificate must chain to (its address must be in the certificate's SAN);
``scheduler_tls_cert_file`` + ``scheduler_tls_key_file`` add a client certificate for a scheduler
that requires mutual TLS. Files are read and checked when the configuration is validated, so a bad
one stops the router at start with the setting, its flag and the path named."""

from __future__ import annotations

import dataclasses

import grpc

from meridian import tls as tls_files

# The CLI flag of each config setting, named in every error so either spelling is recognisable.
FLAGS = {"scheduler_tls_ca_file": "--scheduler-tls-ca-file", "scheduler_tls_cert_file": "--scheduler-tls-cert-file",
         "scheduler_tls_key_file": "--scheduler-tls-key-file"}


def setting(name: str) -> str:
    """How errors name a setting: ``scheduler_tls_ca_file (--scheduler-tls-ca-file)``."""
    return f"{name} ({FLAGS[name]})"


@dataclasses.dataclass(frozen=True)
class ClientTls:
    """The CA that must have signed the scheduler's certificate, and an optional client key pair."""

    ca: bytes
    key_pair: tls_files.KeyPair | None = None

    @property
    def mode(self) -> str:
        return "mutual" if self.key_pair is not None else "server"

    def credentials(self) -> grpc.ChannelCredentials:
        pair = self.key_pair
        return grpc.ssl_channel_credentials(root_certificates=self.ca,
                                            private_key=pair.private_key if pair else None,
                                            certificate_chain=pair.cert_chain if pair else None)


def pairing_problems(ca_file: str, cert_file: str, key_file: str, scheduler_address: str) -> list[str]:
    """Combinations of the settings that cannot work (no file is read)."""
    problems = []
    if bool(cert_file) != bool(key_file):
        given, missing = (("scheduler_tls_cert_file", "scheduler_tls_key_file") if cert_file
                          else ("scheduler_tls_key_file", "scheduler_tls_cert_file"))
        problems.append(f"{setting(given)}: set without {setting(missing)}; a client certificate needs its key")
    if cert_file and not ca_file:
        problems.append(f"{setting('scheduler_tls_cert_file')}: needs {setting('scheduler_tls_ca_file')}; "
                        f"TLS to the scheduler is on only with the CA that signed the scheduler's certificate")
    if ca_file and not scheduler_address:
        problems.append(f"{setting('scheduler_tls_ca_file')}: needs scheduler_address (--scheduler)")
    return problems


def load(ca_file: str, cert_file: str, key_file: str) -> ClientTls | None:
    """The TLS material named, checked; None when TLS is off (no CA). Raises
    ``meridian.tls.TlsFileError`` (a ValueError) naming the setting, its flag and the path."""
    if not ca_file:
        return None
    ca = tls_files.read_certificates(ca_file, setting("scheduler_tls_ca_file"))
    pair = None
    if cert_file:
        pair = tls_files.read_key_pair(cert_file, key_file, cert_setting=setting("scheduler_tls_cert_file"),
                                       key_setting=setting("scheduler_tls_key_file"))
    return ClientTls(ca, pair)


def channel(address: str, client_tls: ClientTls | None) -> grpc.aio.Channel:
    """An aio channel to ``address``: TLS when ``client_tls`` is given, else plaintext."""
    if client_tls is None:
        return grpc.aio.insecure_channel(address)
    return grpc.aio.secure_channel(address, client_tls.credentials())
