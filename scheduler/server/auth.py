"""Credentials of agents, routers and admins. Only SHA-256 digests are kept in memory; a presented
token is hashed and compared with ``hmac.compare_digest`` (constant time).

Agent tokens, per cluster, come from (first match wins):
1. the tokens file (``clusters: {cluster_id: token}``; a value ``sha256:<hex>`` is a digest);
2. the Cluster spec applied to the scheduler: ``spec.auth.token_env`` (read from the scheduler's
   environment) or ``spec.auth.token_file`` (read from the scheduler's disk).
Router tokens: the tokens file's ``routers:`` list and ``MERIDIAN_ROUTER_TOKEN``. Admin tokens:
``MERIDIAN_ADMIN_TOKEN`` or the admin token file (role ``admin``), and named tokens with roles in
the ``admins:`` list of the admin token file or the tokens file (``scheduler.admin.access``).

Why SHA-256 and not a slow password hash: every token is a machine-generated secret
(``meridian token new``: 32 random bytes), so guessing one from its digest is as hard as guessing
the token; slow hashes (PBKDF2, scrypt) protect low-entropy *passwords*, and would make every
request and every agent reconnect pay tens of milliseconds of CPU, a lever for overload."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import os
import pathlib
import re
from collections.abc import Iterable, Mapping

import yaml

from meridian import yamlread
from meridian.spec import base as spec_base
from meridian.spec import cluster as cluster_spec
from scheduler.admin import access

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
    admins: tuple[tuple[bytes, access.Principal], ...] = ()

    @classmethod
    def load(cls, path: str) -> TokensFile:
        try:
            data = yamlread.load_file(path) or {}
        except OSError as exc:
            raise CredentialError(f"tokens file {path}: {exc.strerror or exc}") from None
        except yamlread.YAMLFileError as exc:
            raise CredentialError(f"tokens file {exc}") from None
        if not isinstance(data, dict) or set(data) - {"clusters", "routers", "admins"}:
            raise CredentialError(f"tokens file {path}: expected a mapping with keys 'clusters', 'routers' "
                                  "and/or 'admins'")
        clusters = data.get("clusters") or {}
        routers = data.get("routers") or []
        if not isinstance(clusters, dict) or not all(isinstance(v, str) for v in clusters.values()):
            raise CredentialError(f"tokens file {path}: 'clusters' must map cluster ids to token strings")
        if not isinstance(routers, list) or not all(isinstance(v, str) for v in routers):
            raise CredentialError(f"tokens file {path}: 'routers' must be a list of token strings")
        plain = [f"clusters.{k}" for k, v in clusters.items() if not v.strip().startswith("sha256:")]
        plain += [f"routers.{i}" for i, v in enumerate(routers) if not v.strip().startswith("sha256:")]
        if plain:
            log.warning("event=plaintext_tokens file=%s entries=%s detail=%r", path, ",".join(plain),
                        "store digests instead: `meridian token hash < TOKEN_FILE` prints sha256:<hex>")
        return cls({str(k): parse_secret(v, f"tokens file {path}: clusters.{k}") for k, v in clusters.items()},
                   tuple(parse_secret(v, f"tokens file {path}: routers.{i}") for i, v in enumerate(routers)),
                   tuple(parse_admins(data.get("admins") or [], f"tokens file {path}")))


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


ADMIN_ENTRY_FIELDS = ("name", "token", "role", "teams")
_PRINCIPAL_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_TEAM = re.compile(spec_base.NAME_PATTERN)


def parse_admins(entries: object, where: str) -> list[tuple[bytes, access.Principal]]:
    """The ``admins:`` list of a tokens or admin token file: each entry ``{name, token, role, teams}``
    with ``token`` a ``sha256:<hex>`` digest (``meridian token hash`` prints it; a plain token is
    refused here so the file never holds a usable secret)."""
    if not isinstance(entries, list):
        raise CredentialError(f"{where}: 'admins' must be a list of {{name, token, role, teams}}")
    out: list[tuple[bytes, access.Principal]] = []
    for i, entry in enumerate(entries):
        at = f"{where}: admins.{i}"
        if not isinstance(entry, dict):
            raise CredentialError(f"{at}: expected a mapping with {', '.join(ADMIN_ENTRY_FIELDS)}")
        unknown = sorted(set(entry) - set(ADMIN_ENTRY_FIELDS))
        if unknown:
            raise CredentialError(f"{at}: unknown field(s) {', '.join(map(repr, unknown))}; valid: "
                                  f"{', '.join(ADMIN_ENTRY_FIELDS)}")
        name = entry.get("name")
        if not isinstance(name, str) or not _PRINCIPAL_NAME.match(name):
            raise CredentialError(f"{at}.name: give a name of 1-64 letters, digits, '_', '.', '@' or '-' "
                                  "(it shows in logs instead of the token)")
        token = entry.get("token")
        if not isinstance(token, str) or not token.strip().startswith("sha256:"):
            raise CredentialError(f"{at}.token: store the token's digest, 'sha256:<64 hex>' "
                                  "(print it with `meridian token hash < TOKEN_FILE`), not the token itself")
        role = entry.get("role")
        if role not in access.ROLE_NAMES:
            raise CredentialError(f"{at}.role: {role!r} is not a role; one of {', '.join(access.ROLE_NAMES)}")
        teams = entry.get("teams", [])
        if not isinstance(teams, list) or not all(isinstance(t, str) and _TEAM.match(t) for t in teams):
            raise CredentialError(f"{at}.teams: a list of team names (lowercase letters, digits and '-')")
        if role == access.Role.OWNER.value and not teams:
            raise CredentialError(f"{at}.teams: an owner needs the team(s) whose ModelDeployments it manages")
        if role != access.Role.OWNER.value and teams:
            raise CredentialError(f"{at}.teams: only the owner role is scoped to teams (role {role} sees and "
                                  "manages what its role allows, whatever the team)")
        out.append((parse_secret(token, f"{at}.token"),
                    access.Principal(name, access.Role(role), frozenset(teams))))
    return out


def read_admin_token_file(path: str) -> list[tuple[bytes, access.Principal]]:
    """An admin token file: one token (or ``sha256:`` digest), standing for the ``admin`` role as it
    always did, or a YAML mapping with an ``admins:`` list (see ``parse_admins``)."""
    try:
        text = pathlib.Path(path).expanduser().read_text()
    except OSError as exc:
        raise CredentialError(f"admin token file: cannot read token file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None  # not YAML: a token with odd characters
    if isinstance(data, dict):
        if set(data) != {"admins"}:
            raise CredentialError(f"admin token file {path}: expected one token, or a mapping with only "
                                  "'admins: [{name, token, role, teams}]'")
        return parse_admins(data["admins"], f"admin token file {path}")
    return [(parse_secret(text, f"admin token file ({path})"), access.Principal("admin", access.Role.ADMIN))]


class AdminAuth:
    """The admin API's bearer tokens (digests only) and the principal each stands for.

    ``AdminAuth(digest)`` is one token of the ``admin`` role (what a bare token file or
    ``MERIDIAN_ADMIN_TOKEN`` gives); ``principals`` adds named tokens with their roles."""

    def __init__(self, expected: bytes | None = None, *,
                 principals: Iterable[tuple[bytes, access.Principal]] = ()):
        entries = list(principals)
        if expected is not None:
            entries.insert(0, (expected, access.Principal("admin", access.Role.ADMIN)))
        names = [p.name for _, p in entries]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise CredentialError(f"admin tokens: the name(s) {', '.join(dupes)} appear more than once")
        digests = [d for d, _ in entries]
        if len(set(digests)) != len(digests):
            raise CredentialError("admin tokens: two entries have the same token; give each principal its own")
        self._entries = tuple(entries)

    @classmethod
    def load(cls, *, token_file: str | None = None, env: Mapping[str, str] | None = None,
             tokens_file: TokensFile | None = None) -> AdminAuth:
        """Every admin credential configured: the admin token file (else ``MERIDIAN_ADMIN_TOKEN``)
        and the tokens file's ``admins`` list. At least one is required."""
        env = os.environ if env is None else env
        entries: list[tuple[bytes, access.Principal]] = []
        if token_file:
            entries += read_admin_token_file(token_file)
        elif env.get(ADMIN_TOKEN_ENV):
            entries.append((parse_secret(env[ADMIN_TOKEN_ENV], ADMIN_TOKEN_ENV),
                            access.Principal("admin", access.Role.ADMIN)))
        if tokens_file is not None:
            entries += tokens_file.admins
        if not entries:
            raise CredentialError(f"the admin API needs a token: set {ADMIN_TOKEN_ENV}, pass --admin-token-file, "
                                  "or list 'admins' in the tokens file")
        return cls(principals=entries)

    @property
    def principals(self) -> tuple[access.Principal, ...]:
        return tuple(p for _, p in self._entries)

    def identify(self, authorization: str | None) -> access.Principal | None:
        """The principal a ``Bearer`` header's token stands for, or None. Every entry is compared
        (constant time, no early exit), so the answer's timing does not depend on which matched."""
        if not authorization or not authorization.startswith("Bearer "):
            hmac.compare_digest(_DUMMY, _DUMMY)
            return None
        presented = digest(authorization[len("Bearer "):].strip())
        found = None
        for expected, principal in self._entries:
            if hmac.compare_digest(presented, expected) and found is None:
                found = principal
        return found

    def check(self, authorization: str | None) -> bool:
        return self.identify(authorization) is not None
