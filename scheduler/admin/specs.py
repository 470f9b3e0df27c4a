"""Applying and deleting specs: every change is validated with ``meridian.spec`` as part of the whole
set it would produce (stored documents plus the new ones), before anything is stored. A rejected
apply or delete stores nothing and returns every problem, each with its file, line and field.

Kinds may be named as in YAML (``ModelDeployment``) or by a short alias (``deployment``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Mapping, Sequence

from meridian import spec
from meridian.spec import advisories
from scheduler.control import planner
from scheduler.server import auth
from scheduler.solver import feasibility
from scheduler.state import records

ALIASES: dict[str, str] = {k.lower(): k for k in spec.KINDS}
ALIASES.update({
    "deployment": "ModelDeployment", "deployments": "ModelDeployment", "modeldeployments": "ModelDeployment",
    "policy": "CapacityPolicy", "policies": "CapacityPolicy", "capacitypolicies": "CapacityPolicy",
    "cluster": "Cluster", "clusters": "Cluster", "latencymaps": "LatencyMap", "latency": "LatencyMap",
})


class UnknownKind(ValueError):
    """A kind name (or alias) that is not a spec kind; the message lists the valid ones."""


def canonical_kind(word: str) -> str:
    kind = ALIASES.get(word.lower())
    if kind is None:
        raise UnknownKind(f"unknown kind {word!r}; use one of: {', '.join(spec.KINDS)} "
                          "(or deployment, policy, cluster, latencymap)")
    return kind


@dataclasses.dataclass(frozen=True)
class Proposal:
    """A validated change: the submitted documents and the whole spec set it would leave."""

    submitted: tuple[spec.Loaded, ...]
    merged: spec.SpecSet


@dataclasses.dataclass(frozen=True)
class Header:
    """What a document says it is, read before validation: enough to authorize and to know which
    stored document it replaces."""

    kind: str
    name: str
    team: str | None


def declared(files: Sequence[tuple[str, str]]) -> list[Header]:
    """The documents the files declare, read leniently (validation reports what is wrong), under the
    loader's limits (a file over them declares nothing here and fails validation)."""
    out = []
    for name, text in files:
        try:
            docs = spec.loader.read_documents(text, name)
        except spec.SpecError:
            continue
        for d in docs:
            if isinstance(d, dict) and isinstance(d.get("metadata"), dict):
                team = d["metadata"].get("team")
                out.append(Header(str(d.get("kind")), str(d["metadata"].get("name")),
                                  team.strip() if isinstance(team, str) else None))
    return out


def _declared(files: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    return {(h.kind, h.name) for h in declared(files)}


def propose(stored: Sequence[records.StoredSpec], files: Sequence[tuple[str, str]],
            removed: frozenset[tuple[str, str]] = frozenset()) -> Proposal:
    """Validate ``files`` together with the stored documents they do not replace (minus ``removed``).
    Raises ``meridian.spec.SpecError`` with every issue."""
    replaced = _declared(files) | set(removed)
    keep = [(f"stored:{s.kind}/{s.name}", s.body) for s in stored if (s.kind, s.name) not in replaced]
    merged = spec.load_texts(list(files) + keep)
    names = {name for name, _ in files}
    return Proposal(tuple(d for d in merged.documents if d.file in names), merged)


def actions(stored: Sequence[records.StoredSpec], submitted: Sequence[spec.Loaded], *, dry_run: bool = False) -> list[dict]:
    """What applying ``submitted`` does to each document: created, configured or unchanged; for a
    dry run (``meridian plan``), what it would do: would create, would configure, unchanged."""
    have = {(s.kind, s.name): s.body for s in stored}
    out = []
    for item in submitted:
        old = have.get((item.kind, item.name))
        body = records.canonical_body(item.doc)
        action = "created" if old is None else ("unchanged" if old == body else "configured")
        if dry_run and action != "unchanged":
            action = {"created": "would create", "configured": "would configure"}[action]
        out.append({"kind": item.kind, "name": item.name, "action": action, "file": item.file, "line": item.line})
    return out


@dataclasses.dataclass(frozen=True)
class Judgement:
    """What ``judge`` finds in a proposal: ``unmet``, the client regions whose SLA no declared
    capacity could meet (an apply refuses them unless allowed), and ``warnings``, what
    ``meridian validate`` would warn of in the submitted documents (``meridian.spec.advisories``,
    and a region whose TTFT tail or embedding queue breaks the target under load), one line each."""

    unmet: list[spec.SpecIssue]
    warnings: list[str]


def judge(stored: Sequence[records.StoredSpec], proposal: Proposal,
          settings: feasibility.problem.SolverSettings | None = None) -> Judgement:
    """The client regions whose SLA no declared capacity could meet once ``proposal`` is applied
    (``scheduler.solver.feasibility``), among its submitted deployments and the stored ones it
    would break (a stored deployment already unmet before is not held against this apply); none
    when no Cluster spec declares capacity. With them, the submitted documents' warnings."""
    submitted = {d.name for d in proposal.submitted if d.kind == "ModelDeployment"}
    files = {d.file for d in proposal.submitted}
    warnings = [str(i) for i in advisories.advisories(proposal.merged) if i.file in files]
    after = _verdicts(proposal.merged, settings)
    warnings += [line for v in after or [] if v.deployment in submitted for line in v.warnings()]
    unmet = [v for v in after or [] if not v.ok]
    if not unmet:
        return Judgement([], warnings)
    before_ok: set[tuple[str, str]] = set()
    if any(v.deployment not in submitted for v in unmet):
        try:
            before = _verdicts(records.spec_set(stored), settings) or []
        except spec.SpecError:
            before = []
        before_ok = {(v.deployment, v.client_region) for v in before if v.ok}
        known_before = {v.deployment for v in before}
    else:
        known_before = set()
    held = [v for v in unmet if v.deployment in submitted or (v.deployment, v.client_region) in before_ok
            or v.deployment not in known_before]
    return Judgement(feasibility.issues(held, proposal.merged.documents), warnings)


def _verdicts(spec_set: spec.SpecSet, settings: feasibility.problem.SolverSettings | None = None
              ) -> list[feasibility.Verdict] | None:
    view = planner.SpecView.of(spec_set, 0)
    return feasibility.check_documents(view.deployments.values(), view.clusters.values(), view.policy,
                                       view.latency_map, settings)


async def token_warnings(submitted: Sequence[spec.Loaded], tokens: auth.TokenBook,
                         env: Mapping[str, str] | None = None) -> list[str]:
    """Clusters whose agent token the scheduler cannot find (the agent would be refused)."""
    clusters = [d.doc for d in submitted if d.kind == "Cluster"]
    if not clusters:
        return []
    _found, problems = await asyncio.to_thread(auth.resolve_cluster_tokens, clusters,
                                               env if env is not None else os.environ)
    known = tokens.known_clusters()
    return [f"{why}; its agent will be refused until the token is available" for name, why in sorted(problems.items())
            if name not in known]


def item(s: records.StoredSpec) -> dict:
    return {"kind": s.kind, "name": s.name, "generation": s.generation, "updated_at": s.updated_at,
            "source": s.source, "document": json.loads(s.body)}
