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

import asyncio
import logging
import os
import ssl
from collections.abc import Callable

from meridian import tls as tls_files

log = logging.getLogger("meridian.router.tls")

__all__ = ["ClientTls", "ServerTls", "check_client_files", "check_server_files"]


def _signature(paths: tuple[str, ...]) -> tuple:
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


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


class _Reloading:
    """A context built from ``files`` by ``build``, rebuilt when they change."""

    def __init__(self, files: tuple[str, ...], build: Callable[[], ssl.SSLContext], *, reload_interval_s: float,
                 on_error: Callable[[str], None] | None):
        self._files = tuple(f for f in files if f)
        self._build = build
        self.reload_interval_s = reload_interval_s
        self.on_error = on_error
        self.reloads = 0
        self._signature = _signature(self._files)
        self.current = build()

    def reload_if_changed(self) -> bool:
        """Rebuild if the files changed since the last good load; True when a new context is live."""
        try:
            signature = _signature(self._files)
            if signature == self._signature:
                return False
            fresh = self._build()
        except (OSError, ssl.SSLError) as exc:
            log.warning("event=tls_reload_failed files=%s error=%r keeping=previous", ",".join(self._files), exc)
            if self.on_error is not None:
                self.on_error("tls_reload")
            return False
        self.current = fresh
        self._signature = signature
        self.reloads += 1
        log.info("event=tls_reloaded files=%s reloads=%d", ",".join(self._files), self.reloads)
        return True

    async def watch(self) -> None:
        """Check the files every ``reload_interval_s`` (cancel the task to stop)."""
        while True:
            await asyncio.sleep(self.reload_interval_s)
            self.reload_if_changed()


class ServerTls(_Reloading):
    def __init__(self, cert_file: str, key_file: str, *, reload_interval_s: float = 5.0,
                 on_error: Callable[[str], None] | None = None):
        super().__init__((cert_file, key_file), lambda: server_context(cert_file, key_file),
                         reload_interval_s=reload_interval_s, on_error=on_error)
        # The listening context only dispatches: each handshake switches to the current context.
        self.context = server_context(cert_file, key_file)
        self.context.sni_callback = self._pick

    def _pick(self, ssl_object: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        ssl_object.context = self.current


class ClientTls(_Reloading):
    def __init__(self, ca_file: str = "", cert_file: str = "", key_file: str = "", *, reload_interval_s: float = 5.0,
                 on_error: Callable[[str], None] | None = None):
        super().__init__((ca_file, cert_file, key_file), lambda: client_context(ca_file, cert_file, key_file),
                         reload_interval_s=reload_interval_s, on_error=on_error)

    @property
    def context(self) -> ssl.SSLContext:
        return self.current
