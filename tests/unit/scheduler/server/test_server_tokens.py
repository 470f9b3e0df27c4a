"""Token sources: the tokens file (plain or sha256 digests), Cluster specs, routers, admin."""

from __future__ import annotations

import hashlib

import pytest

from meridian import spec
from scheduler.server import auth

CLUSTER = """
apiVersion: meridian/v1
kind: Cluster
metadata: {name: %s}
spec:
  cloud: aws
  region: us-east-1
  auth: {%s}
  pools: [{name: l4, instance_type: g6.xlarge}]
"""


def test_tokens_file_accepts_plain_tokens_and_digests(tmp_path):
    """Entries are plain tokens or sha256:<hex> digests; either verifies the same token."""
    digest = hashlib.sha256(b"b-secret").hexdigest()
    path = tmp_path / "tokens.yaml"
    path.write_text(f"clusters:\n  a: a-secret\n  b: sha256:{digest}\nrouters: [r-secret]\n")
    book = auth.TokenBook(auth.TokensFile.load(str(path)), env={})
    assert book.verify_cluster("a", "a-secret").ok and book.verify_cluster("b", "b-secret").ok
    assert book.verify_cluster("b", "a-secret").reason == "other_cluster_token"
    assert book.verify_router("r-secret").ok and not book.verify_router("x").ok


@pytest.mark.parametrize("text,needle", [
    ("clusters: [a]", "'clusters' must map"),
    ("routers: {a: b}", "'routers' must be a list"),
    ("clusters:\n  a: 'sha256:zz'", "64 hex digits"),
    ("nodes: {}", "expected a mapping"),
])
def test_bad_tokens_file_is_a_clear_error(tmp_path, text, needle):
    """A malformed tokens file fails at start with what is wrong."""
    path = tmp_path / "tokens.yaml"
    path.write_text(text)
    with pytest.raises(auth.CredentialError, match=needle):
        auth.TokensFile.load(str(path))


def test_cluster_spec_token_sources(tmp_path):
    """token_env reads the scheduler's environment, token_file its disk; a missing source is reported."""
    (tmp_path / "tok").write_text("file-secret\n")
    docs = spec.load_text("---".join([CLUSTER % ("e", "token_env: TOK_E"),
                                      CLUSTER % ("f", f"token_file: {tmp_path / 'tok'}"),
                                      CLUSTER % ("m", "token_env: TOK_MISSING")])).of_kind("Cluster")
    found, problems = auth.resolve_cluster_tokens(docs, {"TOK_E": "env-secret"})
    book = auth.TokenBook(env={})
    book.set_cluster_tokens(found, problems)
    assert book.verify_cluster("e", "env-secret").ok and book.verify_cluster("f", "file-secret").ok
    verdict = book.verify_cluster("m", "anything")
    assert verdict.reason == "no_token_configured" and "TOK_MISSING" in verdict.detail


def test_router_and_admin_tokens_need_configuring():
    """With no router token configured every router is refused; the admin API needs a token to start."""
    assert auth.TokenBook(env={}).verify_router("x").reason == "no_token_configured"
    assert auth.TokenBook(env={"MERIDIAN_ROUTER_TOKEN": "r"}).verify_router("r").ok
    with pytest.raises(auth.CredentialError, match="MERIDIAN_ADMIN_TOKEN"):
        auth.AdminAuth.load(env={})
    admin = auth.AdminAuth.load(env={"MERIDIAN_ADMIN_TOKEN": "adm"})
    assert admin.check("Bearer adm") and not admin.check("Bearer nope") and not admin.check(None)
