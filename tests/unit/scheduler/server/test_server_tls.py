"""The scheduler's TLS knobs without a network: which addresses count as loopback, the start-up line
that says how the gRPC port is secured, and the config's pairing rules."""

from __future__ import annotations

import logging

import pydantic
import pytest

from meridian import tls as tls_files
from scheduler import config as config_mod
from scheduler.server import tls


@pytest.mark.parametrize("host,expected", [
    ("127.0.0.1", True), ("127.3.2.1", True), ("localhost", True), ("LOCALHOST", True), ("[::1]", True),
    ("0.0.0.0", False), ("[::]", False), ("10.0.0.5", False), ("scheduler.internal", False), ("", False),
])
def test_is_loopback(host, expected):
    """Only 127.0.0.0/8, ::1 and localhost count as loopback; wildcards, private IPs and names do not."""
    assert tls.is_loopback(host) is expected


def _tls_lines(caplog) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "meridian.scheduler.tls"]


def test_plaintext_off_loopback_logs_one_structured_warning(caplog):
    """Plaintext on a non-loopback address is a WARNING line naming the address and the flags to set."""
    with caplog.at_level(logging.INFO, logger="meridian.scheduler.tls"):
        tls.log_mode(None, "0.0.0.0:7070", 7070)
    ((level, message),) = _tls_lines(caplog)
    assert level == "WARNING" and message.startswith("event=grpc_insecure address=0.0.0.0:7070 port=7070 detail=")
    assert "--tls-cert-file" in message and "--tls-key-file" in message


def test_plaintext_on_loopback_and_tls_anywhere_log_info(caplog):
    """Plaintext on loopback and TLS on any address are INFO lines with the mode, no warning."""
    server = tls.ServerTls(tls_files.KeyPair(b"cert", b"key"))
    mutual = tls.ServerTls(tls_files.KeyPair(b"cert", b"key"), client_ca=b"ca")
    with caplog.at_level(logging.INFO, logger="meridian.scheduler.tls"):
        tls.log_mode(None, "127.0.0.1:7070", 7070)
        tls.log_mode(server, "0.0.0.0:7070", 7070)
        tls.log_mode(mutual, "10.1.2.3:7070", 7070)
    assert _tls_lines(caplog) == [("INFO", "event=grpc_tls mode=off address=127.0.0.1:7070 port=7070"),
                                  ("INFO", "event=grpc_tls mode=server address=0.0.0.0:7070 port=7070"),
                                  ("INFO", "event=grpc_tls mode=mutual address=10.1.2.3:7070 port=7070")]


def test_tls_is_off_by_default():
    """A default config loads no TLS material: the port stays plaintext."""
    assert tls.load(config_mod.SchedulerConfig()) is None


@pytest.mark.parametrize("values,message", [
    ({"tls_cert_file": "c.pem"}, "tls_cert_file (--tls-cert-file) is set but tls_key_file (--tls-key-file) is not"),
    ({"tls_key_file": "k.pem"}, "tls_key_file (--tls-key-file) is set but tls_cert_file (--tls-cert-file) is not"),
    ({"tls_client_ca_file": "ca.pem"}, "tls_client_ca_file (--tls-client-ca-file) needs tls_cert_file"),
    ({"tls_client_ca_file": "ca.pem", "tls_key_file": "k.pem"}, "is set but tls_cert_file (--tls-cert-file) is not"),
])
def test_config_refuses_incomplete_tls(values, message):
    """A certificate without its key (or the reverse), or a client CA without server TLS, is refused
    by the config model with both settings and their flags named."""
    with pytest.raises(pydantic.ValidationError) as info:
        config_mod.SchedulerConfig(**values)
    assert message in str(info.value)
