"""Throwaway certificates for TLS tests on loopback: a CA, a scheduler certificate for 127.0.0.1 and
localhost, a client certificate, and a second, unrelated CA with its own client certificate (what an
impostor would hold). EC P-256 keys, valid for a day, written as PEM into a test's tmp dir."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclasses.dataclass(frozen=True)
class Pki:
    """Paths of PEM files (str, as configs take them)."""

    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str
    other_client_cert: str
    other_client_key: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)))


def _ca(common_name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(common_name, _name(common_name), key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate], common_name: str, *, server: bool,
          names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (_builder(common_name, ca_cert.subject, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                     else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(name) for name in names]), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _write(directory: pathlib.Path, stem: str, key: ec.EllipticCurvePrivateKey | None,
           cert: x509.Certificate) -> tuple[str, str]:
    cert_path = directory / f"{stem}.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = directory / f"{stem}.key"
    if key is not None:
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        key_path.chmod(0o600)
    return str(cert_path), str(key_path)


def make(directory: pathlib.Path) -> Pki:
    """Generate every file into ``directory`` (created if missing); the test's tmp dir cleans it up."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca("meridian-test-ca")
    other = _ca("impostor-ca")
    ca_path, _ = _write(directory, "ca", ca[0], ca[1])  # the CA key too, for reissue_server
    other_path, _ = _write(directory, "other-ca", None, other[1])
    server_cert, server_key = _write(directory, "scheduler", *_leaf(ca, "scheduler", server=True))
    client_cert, client_key = _write(directory, "client", *_leaf(ca, "client", server=False))
    other_cert, other_key = _write(directory, "other-client", *_leaf(other, "other-client", server=False))
    return Pki(ca=ca_path, server_cert=server_cert, server_key=server_key, client_cert=client_cert,
               client_key=client_key, other_ca=other_path, other_client_cert=other_cert, other_client_key=other_key)


def reissue_server(pki: Pki) -> tuple[bytes, bytes, int]:
    """A new scheduler certificate (new key, new serial) from the same CA, as a rotation would bring:
    (certificate PEM, key PEM, serial). Written nowhere: the test decides where and when."""
    ca_cert = x509.load_pem_x509_certificate(pathlib.Path(pki.ca).read_bytes())
    ca_key = serialization.load_pem_private_key(pathlib.Path(pki.ca).with_suffix(".key").read_bytes(), None)
    key, cert = _leaf((ca_key, ca_cert), "scheduler-rotated", server=True)
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()), cert.serial_number)


def server_for(pki: Pki, names: tuple[str, ...], directory: pathlib.Path, stem: str) -> tuple[str, str]:
    """A server certificate from ``pki``'s CA whose SAN holds only ``names`` (DNS names or IPs),
    written as ``stem.crt`` / ``stem.key`` into ``directory``: (certificate path, key path)."""
    ca_cert = x509.load_pem_x509_certificate(pathlib.Path(pki.ca).read_bytes())
    ca_key = serialization.load_pem_private_key(pathlib.Path(pki.ca).with_suffix(".key").read_bytes(), None)
    directory.mkdir(parents=True, exist_ok=True)
    return _write(directory, stem, *_leaf((ca_key, ca_cert), names[0], server=True, names=names))
