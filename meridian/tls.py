"""PEM files for TLS on Meridian's gRPC links, read and checked once, at start, with errors a user
can act on.

gRPC (BoringSSL) reports a bad certificate or key late and vaguely (a failed bind, or a handshake
that fails for every peer). Both ends of a link therefore read their files through here first:
every problem names the setting (as the caller labels it, e.g. ``--tls-cert-file``) and the path.
The checks use the standard library's OpenSSL binding (``ssl``): a certificate must parse, a key
must parse, be unencrypted (gRPC takes no passphrase) and match its certificate. No cryptography
is done here beyond asking OpenSSL to load the files.

``ServerTls`` serves HTTPS from a certificate and key reloaded when the files change (the router's
client listener, the runtime adapter's TLS port beside an engine): the listening socket's context
has an SNI callback that hands each new connection the current context (the callback runs for
every handshake, with or without SNI), so a rotated certificate reaches new connections at once
while open ones keep theirs. ``ReloadingFiles`` is the one mechanism behind every reloaded TLS
file (these listeners, the replicas' client context, the scheduler's gRPC port, the gRPC clients'
credentials in ``meridian.grpc_tls``): the files' identity (inode, size, mtime) is checked every
``reload_interval_s`` (or, for a client, before each connect); files that do not load (a rotation
caught half-written, a key that does not match) keep the previous material, logged as
``event=tls_reload_failed`` with the file and what is wrong, and are tried again at the next
check."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pathlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["KeyPair", "ReloadingFiles", "ServerTls", "TlsFileError", "read_certificates", "read_key_pair",
           "server_context"]

log = logging.getLogger("meridian.tls")


class TlsFileError(ValueError):
    """A TLS file is missing, unreadable or not what its setting needs; the message says which."""


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A PEM certificate chain (leaf first) and its unencrypted PEM private key."""

    cert_chain: bytes
    private_key: bytes


class _Encrypted(Exception):
    """Raised from OpenSSL's passphrase callback: the key is encrypted."""


def _no_passphrase() -> str:
    raise _Encrypted()


def _read(path: str, setting: str) -> tuple[pathlib.Path, bytes]:
    if not path:
        raise TlsFileError(f"{setting}: empty path; give a PEM file")
    resolved = pathlib.Path(path).expanduser()
    try:
        data = resolved.read_bytes()
    except OSError as exc:
        raise TlsFileError(f"{setting} {path}: cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise TlsFileError(f"{setting} {path}: the file is empty; expected PEM")
    return resolved, data


def read_certificates(path: str, setting: str) -> bytes:
    """The PEM bytes of ``path``, which must hold at least one certificate (a CA bundle or a chain)."""
    _, data = _read(path, setting)
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise TlsFileError(f"{setting} {path}: not PEM text (binary DER? convert it with "
                           f"`openssl x509 -inform der -in FILE -out FILE.pem`)") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=text)
    except ssl.SSLError as exc:
        raise TlsFileError(f"{setting} {path}: no PEM certificate in it "
                           f"(expected '-----BEGIN CERTIFICATE-----'): {exc.args[-1]}") from None
    return data


def read_key_pair(cert_path: str, key_path: str, *, cert_setting: str, key_setting: str) -> KeyPair:
    """A certificate chain and the private key that belongs to it, checked against each other."""
    chain = read_certificates(cert_path, cert_setting)
    key_file, key = _read(key_path, key_setting)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(pathlib.Path(cert_path).expanduser(), key_file, password=_no_passphrase)
    except _Encrypted:
        raise TlsFileError(f"{key_setting} {key_path}: the private key is encrypted; Meridian needs an unencrypted "
                           f"PEM key (decrypt it with `openssl pkey -in KEY -out KEY.plain`)") from None
    except ssl.SSLError as exc:
        if getattr(exc, "reason", None) == "KEY_VALUES_MISMATCH":
            raise TlsFileError(f"{key_setting} {key_path}: this private key does not belong to the certificate "
                               f"in {cert_setting} {cert_path}") from None
        raise TlsFileError(f"{key_setting} {key_path}: not a PEM private key "
                           f"(expected '-----BEGIN PRIVATE KEY-----' or similar): {exc.args[-1]}") from None
    except OSError as exc:  # the file vanished between the two reads
        raise TlsFileError(f"{key_setting} {key_path}: cannot read: {exc.strerror or exc}") from None
    return KeyPair(cert_chain=chain, private_key=key)


def _signature(paths: tuple[str, ...]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for path in paths:
        st = os.stat(os.path.expanduser(path))
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


T = TypeVar("T")


class ReloadingFiles(Generic[T]):
    """Material (an SSL context, gRPC credentials) built from ``files`` by ``build``, rebuilt when
    they change (``reload_if_changed``, or the ``watch`` task). ``generation`` counts the loads that
    took effect (0: the one at start), so a holder of something built from ``current`` (a gRPC
    channel) knows when to rebuild it. ``on_error`` is called with ``"tls_reload"`` when a reload
    fails (a metric). At start a bad file raises (``TlsFileError`` names the setting and path)."""

    def __init__(self, files: tuple[str, ...], build: Callable[[], T], *, reload_interval_s: float = 5.0,
                 on_error: Callable[[str], None] | None = None):
        self._files = tuple(f for f in files if f)
        self._build = build
        self.reload_interval_s = reload_interval_s
        self.on_error = on_error
        self.reloads = 0
        self._refused: tuple | None = None  # the files' identity a reload failed on: tried once
        try:  # the identity first: a change after it is seen at the next check
            self._signature = _signature(self._files)
        except OSError:
            build()  # raises the error that names the setting and the path
            raise
        self.current: T = build()

    @property
    def generation(self) -> int:
        return self.reloads

    def reload_if_changed(self) -> bool:
        """Rebuild if the files changed since the last good load; True when new material is live.
        Only ``os.stat`` when nothing changed (cheap enough before each connect)."""
        signature = None
        try:
            signature = _signature(self._files)
            if signature in (self._signature, self._refused):
                return False  # unchanged, or this very version was refused already (a rewrite is tried)
            fresh = self._build()
        except (OSError, ssl.SSLError, TlsFileError) as exc:
            # TlsFileError names the setting, the path and what is wrong with it. A file missing at
            # the check (mid-replace) has no identity and is tried again at the next one.
            self._refused = signature
            log.warning("event=tls_reload_failed files=%s error=%r keeping=previous", ",".join(self._files),
                        str(exc) if isinstance(exc, TlsFileError) else exc)
            if self.on_error is not None:
                self.on_error("tls_reload")
            return False
        self.current = fresh
        self._signature = signature
        self.reloads += 1
        log.info("event=tls_reloaded files=%s reloads=%d", ",".join(self._files), self.reloads)
        return True

    async def watch(self, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        """Check the files every ``reload_interval_s`` (cancel the task to stop); ``sleep`` is the
        caller's clock."""
        while True:
            await sleep(self.reload_interval_s)
            await asyncio.to_thread(self.reload_if_changed)  # file reads stay off the event loop


class ServerTls(ReloadingFiles[ssl.SSLContext]):
    """A listener's certificate and key; listen with ``context``, each handshake gets ``current``.
    Each load is checked first (``read_key_pair``: the files parse, the key is unencrypted and
    belongs to the certificate), so a bad file's error names ``cert_setting``/``key_setting``."""

    def __init__(self, cert_file: str, key_file: str, *, reload_interval_s: float = 5.0,
                 on_error: Callable[[str], None] | None = None, cert_setting: str = "tls_cert_file",
                 key_setting: str = "tls_key_file"):
        def build() -> ssl.SSLContext:
            read_key_pair(cert_file, key_file, cert_setting=cert_setting, key_setting=key_setting)
            return server_context(cert_file, key_file)

        super().__init__((cert_file, key_file), build, reload_interval_s=reload_interval_s, on_error=on_error)
        # The listening context only dispatches: each handshake switches to the current context.
        self.context = server_context(cert_file, key_file)
        self.context.sni_callback = self._pick

    def _pick(self, ssl_object: ssl.SSLObject, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        ssl_object.context = self.current
