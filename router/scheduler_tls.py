"""The router's gRPC channel to the scheduler (``WatchRoutes`` and ``ReportTraffic``), plaintext or TLS.

Mirrors the agent's ``scheduler.tls`` section: ``scheduler_tls_ca_file`` turns TLS on and is the CA
bundle the scheduler's certificate must chain to (its address must be in the certificate's SAN);
``scheduler_tls_cert_file`` + ``scheduler_tls_key_file`` add a client certificate for a scheduler
that requires mutual TLS. Files are read and checked when the configuration is validated, so a bad
one stops the router at start with the setting, its flag and the path named.

Rotation: the credentials are the kernel's ``meridian.grpc_tls.ChannelCredentials``, checked for a change
(inode, size, mtime) before each connect; ``channel`` builds every new channel from the current
ones, and a long-lived channel (the traffic reporter's) is replaced when ``generation`` moves. A bad
rotated file keeps the previous credentials, logged as ``event=tls_reload_failed`` with the setting,
the path and what is wrong, and counted as ``background_errors_total{component="tls_reload"}``."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from meridian import grpc_tls

# The CLI flag of each config setting, named in every error so either spelling is recognisable.
FLAGS = {"scheduler_tls_ca_file": "--scheduler-tls-ca-file", "scheduler_tls_cert_file": "--scheduler-tls-cert-file",
         "scheduler_tls_key_file": "--scheduler-tls-key-file", "scheduler_tls_server_name": "--scheduler-tls-server-name"}


def setting(name: str) -> str:
    """How errors name a setting: ``scheduler_tls_ca_file (--scheduler-tls-ca-file)``."""
    return f"{name} ({FLAGS[name]})"


class ClientTls(grpc_tls.ChannelCredentials):
    """The CA that must have signed the scheduler's certificate and an optional client key pair,
    reloaded when the files change (``mode``: ``server`` or ``mutual``)."""

    def __init__(self, ca_file: str, cert_file: str = "", key_file: str = "", *, server_name: str = "",
                 on_error: Callable[[str], None] | None = None):
        # What the scheduler's certificate must name instead of the address's host ("": the host).
        self.server_name = server_name
        super().__init__(ca_file, cert_file, key_file, ca_setting=setting("scheduler_tls_ca_file"),
                         cert_setting=setting("scheduler_tls_cert_file"),
                         key_setting=setting("scheduler_tls_key_file"), on_error=on_error)


def pairing_problems(ca_file: str, cert_file: str, key_file: str, scheduler_address: str,
                     server_name: str = "") -> list[str]:
    """Combinations of the settings that cannot work (no file is read)."""
    problems = []
    if server_name and not ca_file:
        problems.append(f"{setting('scheduler_tls_server_name')}: needs {setting('scheduler_tls_ca_file')}; "
                        f"the name is checked in the scheduler's certificate, over TLS only")
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


def load(ca_file: str, cert_file: str, key_file: str, *, server_name: str = "",
         on_error: Callable[[str], None] | None = None) -> ClientTls | None:
    """The TLS material named, checked; None when TLS is off (no CA). Raises
    ``meridian.tls.TlsFileError`` (a ValueError) naming the setting, its flag and the path."""
    if not ca_file:
        return None
    return ClientTls(ca_file, cert_file if cert_file else "", key_file if cert_file else "", server_name=server_name,
                     on_error=on_error)


def channel(address: str, client_tls: ClientTls | None) -> grpc.aio.Channel:
    """An aio channel to ``address``: TLS when ``client_tls`` is given (its files checked for a
    rotation first), else plaintext."""
    if client_tls is None:
        return grpc.aio.insecure_channel(address)
    client_tls.reload_if_changed()
    options = (("grpc.ssl_target_name_override", client_tls.server_name),) if client_tls.server_name else None
    return grpc.aio.secure_channel(address, client_tls.current, options=options)
