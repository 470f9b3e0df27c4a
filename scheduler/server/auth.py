"""Credentials of agents, routers and admins. Only SHA-256 digests are kept in memory; a presented
token is hashed and compared with ``hmac.compare_digest`` (constant time).

Agent tokens, per cluster, come from (first match wins):
1. the tokens file (``clusters: {cluster_id: token}``; a value ``sha256:<hex>`` is a digest);
2. the Cluster spec applied to the scheduler: ``spec.auth.token_env`` (read from the scheduler's
   environment) or ``spec.auth.token_file`` (read from the scheduler's disk).
Router tokens: the tokens file's ``routers:`` list and ``MERIDIAN_ROUTER_TOKEN``. Admin token:
``MERIDIAN_ADMIN_TOKEN`` or the admin token file."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import os
import pathlib
from collections.abc import Iterable, Mapping

import yaml

from meridian.spec import cluster as cluster_spec

log = logging.getLogger("meridian.scheduler.auth")

ROUTER_TOKEN_ENV = "MERIDIAN_ROUTER_TOKEN"
ADMIN_TOKEN_ENV = "MERIDIAN_ADMIN_TOKEN"
_DUMMY = hashlib.sha256(b"meridian: no such credential").digest()


class CredentialError(ValueError):
    """A credential source that cannot be used (unreadable file, bad format); the message says which."""


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def parse_secret(value: str, where: str) -> bytes:
    """A token or ``sha256:<64 hex>`` digest from a config file, as a digest."""
    value = value.strip()
    if not value:
        raise CredentialError(f"{where}: empty token")
    if value.startswith("sha256:"):
        hexpart = value[len("sha256:"):]
        try:
            raw = bytes.fromhex(hexpart)
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise CredentialError(f"{where}: 'sha256:' must be followed by 64 hex digits")
        return raw
    return digest(value)


def _read_secret_file(path: str, where: str) -> bytes:
    try:
        text = pathlib.Path(path).expanduser().read_text()
    except OSError as exc:
        raise CredentialError(f"{where}: cannot read token file {path}: {exc.strerror or exc}") from None
    return parse_secret(text, f"{where} ({path})")


@dataclasses.dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""  # why refused: unknown_cluster, no_token_configured, wrong_token, other_cluster_token
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class TokensFile:
    clusters: Mapping[str, bytes]
    routers: tuple[bytes, ...]

    @classmethod
    def load(cls, path: str) -> TokensFile:
        try:
            data = yaml.safe_load(pathlib.Path(path).expanduser().read_text()) or {}
        except OSError as exc:
            raise CredentialError(f"tokens file {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise CredentialError(f"tokens file {path}: invalid YAML: {exc}") from None
        if not isinstance(data, dict) or set(data) - {"clusters", "routers"}:
            raise CredentialError(f"tokens file {path}: expected a mapping with keys 'clusters' and/or 'routers'")
        clusters = data.get("clusters") or {}
        routers = data.get("routers") or []
        if not isinstance(clusters, dict) or not all(isinstance(v, str) for v in clusters.values()):
            raise CredentialError(f"tokens file {path}: 'clusters' must map cluster ids to token strings")
        if not isinstance(routers, list) or not all(isinstance(v, str) for v in routers):
            raise CredentialError(f"tokens file {path}: 'routers' must be a list of token strings")
        return cls({str(k): parse_secret(v, f"tokens file {path}: clusters.{k}") for k, v in clusters.items()},
                   tuple(parse_secret(v, f"tokens file {path}: routers.{i}") for i, v in enumerate(routers)))


def resolve_cluster_tokens(clusters: Iterable[cluster_spec.Cluster],
                           env: Mapping[str, str]) -> tuple[dict[str, bytes], dict[str, str]]:
    """Digests of the tokens the Cluster specs point at, and, per cluster without one, why (does
    file I/O: call it off the event loop)."""
    found: dict[str, bytes] = {}
    problems: dict[str, str] = {}
    for c in clusters:
        name, auth = c.metadata.name, c.spec.auth
        try:
            if auth.token_env is not None:
                value = env.get(auth.token_env)
                if not value:
                    raise CredentialError(f"cluster {name}: spec.auth.token_env {auth.token_env} is not set "
                                          "in the scheduler's environment")
                found[name] = digest(value.strip())
            elif auth.token_file is not None:
                found[name] = _read_secret_file(auth.token_file, f"cluster {name}: spec.auth.token_file")
        except CredentialError as exc:
            problems[name] = str(exc)
    return found, problems


class TokenBook:
    def __init__(self, tokens_file: TokensFile | None = None, *, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        self._file = tokens_file or TokensFile({}, ())
        self._from_specs: dict[str, bytes] = {}
        self.problems: dict[str, str] = {}
        routers = list(self._file.routers)
        if env.get(ROUTER_TOKEN_ENV):
            routers.append(digest(env[ROUTER_TOKEN_ENV].strip()))
        self._routers = tuple(routers)

    def set_cluster_tokens(self, digests: Mapping[str, bytes], problems: Mapping[str, str]) -> None:
        """Replace the tokens learned from Cluster specs (see ``resolve_cluster_tokens``)."""
        self._from_specs = dict(digests)
        self.problems = {k: v for k, v in problems.items() if k not in self._file.clusters}
        for cluster, why in self.problems.items():
            log.warning("event=cluster_token_missing cluster=%s detail=%r", cluster, why)

    def _expected(self, cluster_id: str) -> bytes | None:
        return self._file.clusters.get(cluster_id) or self._from_specs.get(cluster_id)

    def known_clusters(self) -> set[str]:
        return set(self._file.clusters) | set(self._from_specs)

    def verify_cluster(self, cluster_id: str, token: str) -> Verdict:
        presented = digest(token)
        expected = self._expected(cluster_id)
        if expected is not None and hmac.compare_digest(presented, expected):
            return Verdict(True)
        hmac.compare_digest(presented, _DUMMY)  # same work whether or not the cluster is known
        owner = next((cid for cid in sorted(self.known_clusters())
                      if cid != cluster_id and hmac.compare_digest(presented, self._expected(cid) or _DUMMY)), None)
        if owner is not None:
            return Verdict(False, "other_cluster_token", f"the token belongs to cluster {owner!r}")
        if expected is None:
            if cluster_id in self.problems:
                return Verdict(False, "no_token_configured", self.problems[cluster_id])
            return Verdict(False, "unknown_cluster", f"no Cluster spec or tokens-file entry for {cluster_id!r}")
        return Verdict(False, "wrong_token", "token does not match")

    @property
    def routers_configured(self) -> bool:
        return bool(self._routers)

    def verify_router(self, token: str) -> Verdict:
        if not self._routers:
            return Verdict(False, "no_token_configured",
                           f"no router token configured on the scheduler (set {ROUTER_TOKEN_ENV} or the tokens "
                           "file's 'routers' list)")
        presented = digest(token)
        ok = False
        for expected in self._routers:
            ok |= hmac.compare_digest(presented, expected)
        return Verdict(True) if ok else Verdict(False, "wrong_token", "router token does not match")


class AdminAuth:
    """The admin API's bearer token (digest only)."""

    def __init__(self, expected: bytes):
        self._expected = expected

    @classmethod
    def load(cls, *, token_file: str | None = None, env: Mapping[str, str] | None = None) -> AdminAuth:
        env = os.environ if env is None else env
        if token_file:
            return cls(_read_secret_file(token_file, "admin token file"))
        if env.get(ADMIN_TOKEN_ENV):
            return cls(parse_secret(env[ADMIN_TOKEN_ENV], ADMIN_TOKEN_ENV))
        raise CredentialError(f"the admin API needs a token: set {ADMIN_TOKEN_ENV} or pass --admin-token-file")

    def check(self, authorization: str | None) -> bool:
        if not authorization or not authorization.startswith("Bearer "):
            hmac.compare_digest(_DUMMY, self._expected)
            return False
        return hmac.compare_digest(digest(authorization[len("Bearer "):].strip()), self._expected)
