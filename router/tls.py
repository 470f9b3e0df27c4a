"""TLS for the router's two HTTP hops, from PEM files reloaded when they change.

- ``ServerTls``: the client listener's certificate and key. The listening socket's context has an
  SNI callback that hands each new connection the current context (the callback runs for every
  handshake, with or without SNI), so a rotated certificate is served to new connections at once
  while open connections keep theirs: nothing is dropped.
- ``ClientTls``: what the router trusts when it connects to ``https://`` replicas (a CA bundle;
  none: the system's trust store) and an optional client certificate for replicas that require
  mutual TLS. Pools read ``context`` at each new connection, so a reload reaches new connections.

Both check their files for a change (inode, size, mtime) every ``reload_interval_s``; files that do
not load (a rotation caught half-written) keep the previous context serving, logged as
``event=tls_reload_failed`` and counted, and are tried again at the next check. At start the same
files are read by the configuration's validation, so a bad one stops the router with the setting
named (``check_server_files``, ``check_client_files``)."""

from __future__ import annotations

import ssl
from collections.abc import Callable

from meridian import tls as tls_files

__all__ = ["ClientTls", "ServerTls", "check_client_files", "check_server_files"]


# The listener's reloading certificate is the kernel's (one mechanism, shared with the runtime adapter).
ServerTls = tls_files.ServerTls
server_context = tls_files.server_context


def client_context(ca_file: str, cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


def check_server_files(cert_file: str, key_file: str, *, cert_setting: str, key_setting: str) -> None:
    """Raise ``meridian.tls.TlsFileError`` (a ValueError) naming the setting when the pair cannot serve."""
    tls_files.read_key_pair(cert_file, key_file, cert_setting=cert_setting, key_setting=key_setting)


def check_client_files(ca_file: str, cert_file: str, key_file: str, *, ca_setting: str, cert_setting: str,
                       key_setting: str) -> None:
    if ca_file:
        tls_files.read_certificates(ca_file, ca_setting)
    if cert_file:
        tls_files.read_key_pair(cert_file, key_file, cert_setting=cert_setting, key_setting=key_setting)


class ClientTls(tls_files.ReloadingFiles[ssl.SSLContext]):
    def __init__(self, ca_file: str = "", cert_file: str = "", key_file: str = "", *, reload_interval_s: float = 5.0,
                 on_error: Callable[[str], None] | None = None):
        super().__init__((ca_file, cert_file, key_file), lambda: client_context(ca_file, cert_file, key_file),
                         reload_interval_s=reload_interval_s, on_error=on_error)

    @property
    def context(self) -> ssl.SSLContext:
        return self.current
