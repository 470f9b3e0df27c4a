"""Who may do what on the admin API: roles as data and one authorization function.

A principal is what an admin token stands for (``scheduler.server.auth.AdminAuth`` finds it): a
name (shown in logs and refusals, never the token), a role and, for model owners, the teams they
own. ``authorize(principal, verb, kind, team)`` is the only place that decides; every admin route
asks it, and a refusal carries the reason and what the role may do, for the 403 body.

| role | may |
|---|---|
| ``admin`` | everything |
| ``infra`` | read everything; apply, delete and plan ``CapacityPolicy``, ``Cluster`` and ``LatencyMap`` |
| ``owner`` (teams) | read everything; apply, delete and plan ``ModelDeployment``s whose ``metadata.team`` is one of its teams |
| ``viewer`` | read everything (specs, status, dry-run plans of the stored specs) |

A model owner's check covers both sides of a change: the submitted document's team and, when it
replaces a stored one, the stored document's team, so nobody takes over another team's deployment
by applying one of the same name. Reading (``read``) is open to every role: specs hold no secrets
(agents' tokens are referenced by environment variable name or file path, never inline)."""

from __future__ import annotations

import dataclasses
import enum

READ, APPLY, DELETE, PLAN = "read", "apply", "delete", "plan"
VERBS = (READ, APPLY, DELETE, PLAN)
INFRA_KINDS = ("CapacityPolicy", "Cluster", "LatencyMap")
OWNER_KINDS = ("ModelDeployment",)


class Role(str, enum.Enum):
    ADMIN = "admin"
    INFRA = "infra"
    OWNER = "owner"
    VIEWER = "viewer"


ROLE_NAMES = tuple(r.value for r in Role)


@dataclasses.dataclass(frozen=True)
class Principal:
    """What an admin token stands for. ``teams`` matters only to the ``owner`` role."""

    name: str
    role: Role
    teams: frozenset[str] = frozenset()

    def describe(self) -> str:
        teams = f", teams {', '.join(sorted(self.teams))}" if self.role is Role.OWNER else ""
        return f"{self.name!r} (role {self.role.value}{teams})"

    def to_dict(self) -> dict:
        return {"name": self.name, "role": self.role.value, "teams": sorted(self.teams), "may": may(self)}


@dataclasses.dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.allowed


ALLOW = Decision(True)


def may(principal: Principal) -> str:
    """What the principal's role may do, in words (for refusals, ``/v1/whoami`` and the docs)."""
    if principal.role is Role.ADMIN:
        return "everything"
    if principal.role is Role.INFRA:
        return f"read everything; apply, delete and plan {', '.join(INFRA_KINDS)}"
    if principal.role is Role.OWNER:
        teams = ", ".join(sorted(principal.teams)) or "(none)"
        return f"read everything; apply, delete and plan ModelDeployments of team(s) {teams}"
    return "read everything (specs, status, dry-run plans of the stored specs); change nothing"


def authorize(principal: Principal, verb: str, kind: str | None = None, team: str | None = None) -> Decision:
    """May ``principal`` do ``verb`` (read, apply, delete, plan) on a document of ``kind`` owned by
    ``team``? ``kind`` None means the verb as a whole (``read`` of status, ``plan`` of the stored
    specs). Pure: the same answer for the same question, everywhere."""
    if verb not in VERBS:
        raise ValueError(f"unknown verb {verb!r}; one of {', '.join(VERBS)}")
    role = principal.role
    if role is Role.ADMIN or verb == READ or (verb == PLAN and kind is None):
        return ALLOW
    what = f"{verb} {kind}" if kind else verb
    if role is Role.INFRA:
        if kind in INFRA_KINDS:
            return ALLOW
        return Decision(False, f"{principal.describe()} may not {what}: infrastructure roles manage "
                               f"{', '.join(INFRA_KINDS)}, not {kind}s")
    if role is Role.OWNER:
        if kind not in OWNER_KINDS:
            return Decision(False, f"{principal.describe()} may not {what}: model owners manage ModelDeployments "
                                   f"only; {kind} belongs to the infrastructure team")
        if not team:
            return Decision(False, f"{principal.describe()} may not {what} without metadata.team: a model owner's "
                                   f"deployments must name one of its teams ({', '.join(sorted(principal.teams))})")
        if team not in principal.teams:
            return Decision(False, f"{principal.describe()} may not {what} of team {team!r}: it owns "
                                   f"{', '.join(sorted(principal.teams)) or 'no team'}")
        return ALLOW
    return Decision(False, f"{principal.describe()} may not {what}: viewers only read")
