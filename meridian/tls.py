"""PEM files for TLS on Meridian's gRPC links, read and checked once, at start, with errors a user
can act on.

gRPC (BoringSSL) reports a bad certificate or key late and vaguely (a failed bind, or a handshake
that fails for every peer). Both ends of a link therefore read their files through here first:
every problem names the setting (as the caller labels it, e.g. ``--tls-cert-file``) and the path.
The checks use the standard library's OpenSSL binding (``ssl``): a certificate must parse, a key
must parse, be unencrypted (gRPC takes no passphrase) and match its certificate. No cryptography
is done here beyond asking OpenSSL to load the files."""

from __future__ import annotations

import dataclasses
import pathlib
import ssl

__all__ = ["KeyPair", "TlsFileError", "read_certificates", "read_key_pair"]


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
        raise TlsFileError(f"{key_setting} {key_path}: the private key is encrypted; gRPC needs an unencrypted "
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
