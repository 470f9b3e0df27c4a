"""TLS for the admin API (``admin_tls_cert_file`` + ``admin_tls_key_file``), reloaded when the files
change, so a rotated certificate (cert-manager, an ACME client) takes effect without a restart.

Each handshake picks the certificate held *now*: the listening socket's context has an SNI
callback (OpenSSL calls it for every ClientHello, with or without SNI) that hands the connection to
the current context. ``watch`` polls the files' identity (inode, size, mtime) every
``interval_s``; on a change it loads both files into a *new* context, checked the way start-up
checks them (``meridian.tls``: they parse, the key is unencrypted and belongs to the certificate),
and only then swaps it in. A half-written or mismatched pair is refused with a log line and a
metric, and the previous certificate keeps serving; connections already open keep theirs."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Callable

from meridian import tls as tls_files
from scheduler import clock as clock_mod

log = logging.getLogger("meridian.scheduler.admin.tls")

FLAGS = {"admin_tls_cert_file": "--admin-tls-cert-file", "admin_tls_key_file": "--admin-tls-key-file"}


def setting(name: str) -> str:
    return f"{name} ({FLAGS[name]})"


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class ReloadingTls:
    """The admin API's server TLS. ``front`` is the context to listen with; ``current`` the one each
    new connection gets. Raises ``meridian.tls.TlsFileError`` naming the setting and path at start."""

    def __init__(self, cert_file: str, key_file: str, *, on_error: Callable[[str], None] | None = None):
        self.cert_file = cert_file
        self.key_file = key_file
        self._on_error = on_error or (lambda where: None)
        self.reloads = 0
        self.current = self._load()
        self._seen = self._identities()
        self.front = self._load()
        self.front.sni_callback = self._pick

    def _identities(self) -> tuple:
        return (_identity(self.cert_file), _identity(self.key_file))

    def _load(self) -> ssl.SSLContext:
        # Checked first for an error that names the setting; then loaded into a fresh context (a
        # file replaced in between fails here too, and a fresh context is never half-loaded).
        tls_files.read_key_pair(self.cert_file, self.key_file, cert_setting=setting("admin_tls_cert_file"),
                                key_setting=setting("admin_tls_key_file"))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(os.path.expanduser(self.cert_file), os.path.expanduser(self.key_file),
                                password=b"")  # never a terminal prompt for an encrypted key
        except (ssl.SSLError, OSError) as exc:
            raise tls_files.TlsFileError(f"{setting('admin_tls_cert_file')} {self.cert_file}: changed while being "
                                         f"read, or does not load: {exc}") from None
        return ctx

    def _pick(self, sslobj: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext) -> None:
        sslobj.context = self.current

    def reload_if_changed(self) -> bool:
        """Swap in the files' certificate if they changed and check out; True when swapped. Does file
        I/O: call it off the event loop."""
        seen = self._identities()
        if seen == self._seen:
            return False
        try:
            fresh = self._load()
        except tls_files.TlsFileError as exc:
            self._on_error("admin_tls_reload")
            log.error("event=admin_tls_reload_failed detail=%r; still serving the previous certificate", str(exc))
            self._seen = seen  # tried this version; a further change is tried again
            return False
        self.current = fresh
        self._seen = seen
        self.reloads += 1
        log.info("event=admin_tls_reloaded cert_file=%s reloads=%d", self.cert_file, self.reloads)
        return True

    async def watch(self, interval_s: float, clock: clock_mod.Clock) -> None:
        while True:
            await clock.sleep(interval_s)
            await asyncio.to_thread(self.reload_if_changed)

