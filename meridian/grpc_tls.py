"""TLS credentials for Meridian's gRPC clients (an agent's and a router's link to the scheduler),
from PEM files checked by ``meridian.tls`` and rebuilt when the files change.

A gRPC channel keeps the credentials it was built with through all its reconnects, so rotation
works per channel: a client calls ``ChannelCredentials.reload_if_changed`` before it builds a
channel (a reconnect), or compares ``generation`` with the one its long-lived channel was built
from and builds a new channel when it moved. Kept apart from ``meridian.tls`` so that module stays
on the standard library's OpenSSL binding alone."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from meridian import tls as tls_files

__all__ = ["ChannelCredentials", "channel_credentials"]


def channel_credentials(ca_file: str, cert_file: str = "", key_file: str = "", *, ca_setting: str,
                        cert_setting: str = "", key_setting: str = "") -> grpc.ChannelCredentials:
    """gRPC channel credentials trusting ``ca_file``, with a client key pair for mutual TLS when
    ``cert_file`` is given; every file read and checked here (``TlsFileError`` names the setting)."""
    root = tls_files.read_certificates(ca_file, ca_setting)
    if not cert_file:
        return grpc.ssl_channel_credentials(root_certificates=root)
    pair = tls_files.read_key_pair(cert_file, key_file, cert_setting=cert_setting, key_setting=key_setting)
    return grpc.ssl_channel_credentials(root_certificates=root, private_key=pair.private_key,
                                        certificate_chain=pair.cert_chain)


class ChannelCredentials(tls_files.ReloadingFiles[grpc.ChannelCredentials]):
    """A gRPC client's TLS files (the agent's and the router's link to the scheduler). A client
    calls ``reload_if_changed`` before each (re)connect and builds its channel from ``current``,
    so a rotated CA or client certificate is used by the next connection; a bad rotated file keeps
    the previous credentials (logged, counted) until it is fixed."""

    def __init__(self, ca_file: str, cert_file: str = "", key_file: str = "", *, ca_setting: str,
                 cert_setting: str = "", key_setting: str = "", on_error: Callable[[str], None] | None = None):
        super().__init__((ca_file, cert_file, key_file),
                         lambda: channel_credentials(ca_file, cert_file, key_file, ca_setting=ca_setting,
                                                     cert_setting=cert_setting, key_setting=key_setting),
                         on_error=on_error)
        self.mode = "mutual" if cert_file else "server"
