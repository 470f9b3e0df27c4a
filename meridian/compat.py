"""Version skew between the scheduler and its agents and routers: the gRPC contract's rule.

The contract (``proto/meridian/v1/``) evolves the proto3 way: fields and messages are only added,
never renumbered, retyped or reused (a removed field's number is ``reserved``); a receiver ignores
fields it does not know, and a missing field reads as its zero value. So a peer one minor version
away understands everything it needs. The scheduler enforces the rest at connect time:

- an agent or router of the same major version and at most one minor version older or newer than
  the scheduler connects (a fleet is upgraded in any order, one minor step at a time);
- anything else — two or more minors apart, another major version, or a version that does not parse
  — is refused with ``FAILED_PRECONDITION`` and a message naming both versions and what to upgrade.

Agents send ``Hello.agent_version`` (``meridian-agent/0.2.0``). Routers send
``WatchRoutesRequest.router_version`` and ``TrafficReport.router_version``, fields added in 0.2: a
router that leaves them empty is one from before they existed, read as ``LEGACY_ROUTER_VERSION``."""

from __future__ import annotations

import dataclasses
import re

import meridian

LEGACY_ROUTER_VERSION = "0.1.0"
MAX_MINOR_SKEW = 1
_VERSION = re.compile(r"^(?:[A-Za-z0-9_.-]+/)?v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?[0-9A-Za-z.+-]*)?$")


@dataclasses.dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int
    patch: int = 0

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def parse(text: str) -> Version | None:
    """``MAJOR.MINOR[.PATCH]`` with an optional ``name/`` prefix and pre-release or local suffix
    (``meridian-agent/0.2.0``, ``0.2.0.dev1``); None when it names no version."""
    m = _VERSION.match(text.strip())
    if m is None:
        return None
    return Version(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def refusal(peer_version: str, *, peer: str, own_version: str = meridian.__version__) -> str | None:
    """None when a ``peer`` ("agent", "router") at ``peer_version`` may talk to this side at
    ``own_version``; else the reason, as the refused peer should read it."""
    own = parse(own_version)
    if own is None:  # a development build of this side: nothing to judge against
        return None
    theirs = parse(peer_version)
    if theirs is None:
        return (f"{peer} version {peer_version!r} names no version (expected MAJOR.MINOR.PATCH, e.g. "
                f"meridian-{peer}/{own}); this scheduler is {own}")
    if theirs.major != own.major:
        return (f"{peer} version {theirs} has another major version than this scheduler ({own}): "
                f"upgrade every part to the same major version (see docs/operations.md, version skew)")
    if abs(theirs.minor - own.minor) > MAX_MINOR_SKEW:
        side = "older" if theirs.minor < own.minor else "newer"
        fix = (f"upgrade the {peer} to {own.major}.{own.minor - MAX_MINOR_SKEW} or later" if side == "older"
               else f"upgrade the scheduler to {theirs.major}.{theirs.minor - MAX_MINOR_SKEW} or later first")
        return (f"{peer} version {theirs} is {abs(theirs.minor - own.minor)} minor versions {side} than this "
                f"scheduler ({own}); at most {MAX_MINOR_SKEW} apart is supported: {fix}")
    return None
