"""What the scheduler persists, built on the ``StateStore`` primitives:

- ``SpecStore``: applied spec documents (canonical JSON) and a generation that changes with them;
- ``DirectiveLog``: every directive, claimed (fenced) before it is sent, with its outcome, so that a
  directive is sent at most once even across leader changes;
- ``TrafficLog``: router traffic per (model, client region, router[, revision]), the autoscaler's
  demand input and, per revision, a rollout's health signal;
- ``RoutingStore``: the routing-table version counter and the last table, shared by all nodes so the
  version keeps increasing across leader changes and a standby can serve WatchRoutes;
- ``RolloutLog``: each deployment's rollout record (``scheduler.rollout`` encodes it), so a rollout
  resumes where it was after a restart or a leader change."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable

from google.protobuf import json_format

from meridian import spec
from meridian.fleet import models as fm
from meridian.fleet import wire
from meridian.v1 import capacity_pb2, routing_pb2
from scheduler.state import base

SPECS, META, DIRECTIVES, TRAFFIC, ROUTING, ROLLOUTS = "specs", "meta", "directives", "traffic", "routing", "rollouts"


# ---------------------------------------------------------------- specs


@dataclasses.dataclass(frozen=True)
class StoredSpec:
    kind: str
    name: str
    body: str  # canonical JSON of the validated document
    generation: int
    updated_at: float
    source: str = ""  # file:line it was applied from

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> StoredSpec:
        return cls(**json.loads(text))


def canonical_body(doc: spec.Document) -> str:
    return json.dumps(doc.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"))


def spec_key(kind: str, name: str) -> str:
    return f"{kind}/{name}"


class SpecStore:
    def __init__(self, store: base.StateStore):
        self._store = store

    @property
    def store(self) -> base.StateStore:
        """The state store the specs live in (records kept beside them, such as rollouts, use it too)."""
        return self._store

    async def generation(self) -> int:
        raw = await self._store.get(META, "spec_generation")
        return int(raw) if raw else 0

    async def all(self) -> list[StoredSpec]:
        items = await self._store.items(SPECS)
        return sorted((StoredSpec.from_json(v) for v in items.values()), key=lambda s: (s.kind, s.name))

    async def get(self, kind: str, name: str) -> StoredSpec | None:
        raw = await self._store.get(SPECS, spec_key(kind, name))
        return StoredSpec.from_json(raw) if raw else None

    async def apply(self, loaded: Iterable[spec.Loaded], now_s: float) -> list[tuple[str, str, str]]:
        """Store validated documents in one atomic write; returns (kind, name, action) with action one of
        created / configured / unchanged. The generation moves only when something changed."""
        current = {(s.kind, s.name): s for s in await self.all()}
        changes: list[tuple[spec.Loaded, str]] = []
        result = []
        for item in loaded:
            body = canonical_body(item.doc)
            old = current.get((item.kind, item.name))
            action = "created" if old is None else ("unchanged" if old.body == body else "configured")
            result.append((item.kind, item.name, action))
            if action != "unchanged":
                changes.append((item, body))
        if changes:
            gen = await self._store.incr("spec_generation")
            ops: list[base.Op] = [
                base.Put(SPECS, spec_key(item.kind, item.name),
                         StoredSpec(item.kind, item.name, body, gen, now_s, f"{item.file}:{item.line}").to_json())
                for item, body in changes]
            ops.append(base.Put(META, "spec_generation", str(gen)))
            await self._store.write(ops)
        return result

    async def delete(self, kind: str, name: str) -> bool:
        if await self.get(kind, name) is None:
            return False
        gen = await self._store.incr("spec_generation")
        await self._store.write([base.Delete(SPECS, spec_key(kind, name)), base.Put(META, "spec_generation", str(gen))])
        return True


def spec_set(stored: Iterable[StoredSpec], context: spec.Context | None = None) -> spec.SpecSet:
    """Validate stored documents again as one set (they were valid when applied; this also catches a
    catalog or model change between versions). Raises ``meridian.spec.SpecError``."""
    return spec.load_texts([(f"stored:{s.kind}/{s.name}", s.body) for s in stored], context)


# ---------------------------------------------------------------- directives


class DirectiveStatus(str, enum.Enum):
    CLAIMED = "claimed"  # recorded by the leader, about to be sent
    SENT = "sent"
    ACCEPTED = "accepted"
    SUCCEEDED = "succeeded"
    REFUSED = "refused"
    FAILED = "failed"
    DUPLICATE = "duplicate"  # the agent had done it already
    EXPIRED = "expired"  # no outcome in time; the reconciler decides afresh from reports


OPEN = frozenset({DirectiveStatus.CLAIMED, DirectiveStatus.SENT, DirectiveStatus.ACCEPTED})

OUTCOME_STATUS = {
    fm.DirectiveOutcome.ACCEPTED: DirectiveStatus.ACCEPTED,
    fm.DirectiveOutcome.SUCCEEDED: DirectiveStatus.SUCCEEDED,
    fm.DirectiveOutcome.REFUSED: DirectiveStatus.REFUSED,
    fm.DirectiveOutcome.FAILED: DirectiveStatus.FAILED,
    fm.DirectiveOutcome.DUPLICATE: DirectiveStatus.DUPLICATE,
}


def action_name(action: fm.Action) -> str:
    return {fm.StartReplica: "start_replica", fm.DrainReplica: "drain_replica",
            fm.ResizePool: "resize_pool"}[type(action)]


@dataclasses.dataclass(frozen=True)
class DirectiveRecord:
    directive: fm.Directive
    cluster_id: str
    status: DirectiveStatus
    created_at: float
    updated_at: float
    reason: str = ""

    @property
    def directive_id(self) -> str:
        return self.directive.directive_id

    @property
    def is_open(self) -> bool:
        return self.status in OPEN

    def with_status(self, status: DirectiveStatus, now_s: float, reason: str = "") -> DirectiveRecord:
        return dataclasses.replace(self, status=status, updated_at=now_s, reason=reason or self.reason)

    def to_json(self) -> str:
        # The directive is stored in its wire form: exactly what the agent received.
        return json.dumps({
            "directive": json_format.MessageToDict(wire.directive_to_pb(self.directive)),
            "cluster_id": self.cluster_id, "status": self.status.value, "created_at": self.created_at,
            "updated_at": self.updated_at, "reason": self.reason,
        })

    @classmethod
    def from_json(cls, text: str) -> DirectiveRecord:
        data = json.loads(text)
        pb = json_format.ParseDict(data["directive"], capacity_pb2.Directive())
        return cls(wire.directive_from_pb(pb), data["cluster_id"], DirectiveStatus(data["status"]),
                   float(data["created_at"]), float(data["updated_at"]), data.get("reason", ""))


class DirectiveLog:
    def __init__(self, store: base.StateStore):
        self._store = store

    async def claim(self, record: DirectiveRecord, fence: int) -> bool:
        """Record a directive before sending it. False if its id exists (never send it again); raises
        ``FencedOut`` if this node no longer holds the lease with ``fence``."""
        return await self._store.insert(DIRECTIVES, record.directive_id, record.to_json(), fence=fence)

    async def update(self, record: DirectiveRecord, fence: int) -> None:
        await self._store.write([base.Put(DIRECTIVES, record.directive_id, record.to_json())], fence=fence)

    async def update_many(self, records: Iterable[DirectiveRecord], fence: int) -> None:
        ops = [base.Put(DIRECTIVES, r.directive_id, r.to_json()) for r in records]
        if ops:
            await self._store.write(ops, fence=fence)

    async def get(self, directive_id: str) -> DirectiveRecord | None:
        raw = await self._store.get(DIRECTIVES, directive_id)
        return DirectiveRecord.from_json(raw) if raw else None

    async def all(self) -> list[DirectiveRecord]:
        items = await self._store.items(DIRECTIVES)
        return sorted((DirectiveRecord.from_json(v) for v in items.values()), key=lambda r: r.created_at)

    async def prune(self, before_s: float, fence: int) -> int:
        """Forget closed directives last updated before ``before_s``; returns how many."""
        old = [r for r in await self.all() if not r.is_open and r.updated_at < before_s]
        if old:
            await self._store.write([base.Delete(DIRECTIVES, r.directive_id) for r in old], fence=fence)
        return len(old)


# ---------------------------------------------------------------- traffic


@dataclasses.dataclass(frozen=True)
class RevisionTraffic:
    """One router's last traffic window for one replica revision of a served model: ``key`` names the
    (model, client region, router, revision) it came from, ``at_s`` when the scheduler received it, so
    a reader can tell a window it has counted from the next one."""

    model: str
    revision: str
    key: str
    at_s: float
    requests: int
    errors: int
    ttft_p99_ms: float


@dataclasses.dataclass(frozen=True)
class Demand:
    """Traffic of one model from one client region, summed over routers. Rates per second."""

    model: str
    client_region: str
    requests_per_s: float
    errors_per_s: float
    in_flight: int
    ttft_p99_ms: float
    prompt_tokens_per_request: float
    completion_tokens_per_request: float
    observed_at: float


class TrafficLog:
    def __init__(self, store: base.StateStore):
        self._store = store

    async def record(self, report: fm.TrafficReport, received_at: float) -> int:
        """Keep each sample as the last window of its (model, client region, router[, revision])."""
        window_s = max(1e-3, report.window_end - report.window_start)
        ops: list[base.Op] = []
        for s in report.samples:
            parts = [s.model, s.client_region, report.router_id] + ([s.revision] if s.revision else [])
            key = json.dumps(parts)
            ops.append(base.Put(TRAFFIC, key, json.dumps({
                "requests": s.requests, "errors": s.errors, "in_flight": s.in_flight, "ttft_p99_ms": s.ttft_p99_ms,
                "prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion_tokens,
                "window_s": window_s, "at": received_at})))
        if ops:
            await self._store.write(ops)
        return len(ops)

    async def demand(self, now_s: float, max_age_s: float) -> list[Demand]:
        """Current demand per (model, client region), summed over routers and revisions; reports older
        than ``max_age_s`` are dropped."""
        items = await self._store.items(TRAFFIC)
        sums: dict[tuple[str, str], dict] = {}
        stale: list[base.Op] = []
        for key, raw in items.items():
            model, region = json.loads(key)[:2]
            v = json.loads(raw)
            if now_s - v["at"] > max_age_s:
                stale.append(base.Delete(TRAFFIC, key))
                continue
            acc = sums.setdefault((model, region), {"rps": 0.0, "eps": 0.0, "in_flight": 0, "ttft": 0.0,
                                                    "req": 0, "prompt": 0, "completion": 0, "at": 0.0})
            acc["rps"] += v["requests"] / v["window_s"]
            acc["eps"] += v["errors"] / v["window_s"]
            acc["in_flight"] += v["in_flight"]
            acc["ttft"] = max(acc["ttft"], v["ttft_p99_ms"])
            acc["req"] += v["requests"]
            acc["prompt"] += v["prompt_tokens"]
            acc["completion"] += v["completion_tokens"]
            acc["at"] = max(acc["at"], v["at"])
        if stale:
            await self._store.write(stale)
        return [Demand(model, region, a["rps"], a["eps"], a["in_flight"], a["ttft"],
                       a["prompt"] / a["req"] if a["req"] else 0.0, a["completion"] / a["req"] if a["req"] else 0.0,
                       a["at"])
                for (model, region), a in sorted(sums.items())]

    async def revision_windows(self, models: Iterable[str]) -> list[RevisionTraffic]:
        """The last window of every (client region, router, revision) of ``models`` that names its
        revision (stale ones included: a reader skips what it has counted by ``at_s``)."""
        wanted = set(models)
        out = []
        for key, raw in (await self._store.items(TRAFFIC)).items():
            parts = json.loads(key)
            if len(parts) < 4 or parts[0] not in wanted:
                continue
            v = json.loads(raw)
            out.append(RevisionTraffic(parts[0], parts[3], key, float(v["at"]), int(v["requests"]), int(v["errors"]),
                                       float(v["ttft_p99_ms"])))
        return sorted(out, key=lambda w: (w.model, w.key))


# ---------------------------------------------------------------- rollouts


class RolloutLog:
    """Rollout records by deployment name, as the JSON text ``scheduler.rollout`` writes (this module
    only stores them). Writes are fenced: only the leader moves a rollout."""

    def __init__(self, store: base.StateStore):
        self._store = store

    async def all(self) -> dict[str, str]:
        return await self._store.items(ROLLOUTS)

    async def get(self, deployment: str) -> str | None:
        return await self._store.get(ROLLOUTS, deployment)

    async def save(self, records: dict[str, str], removed: Iterable[str], fence: int) -> None:
        """Store ``records`` and forget ``removed`` in one atomic write."""
        ops: list[base.Op] = [base.Put(ROLLOUTS, name, text) for name, text in sorted(records.items())]
        ops += [base.Delete(ROLLOUTS, name) for name in sorted(set(removed))]
        if ops:
            await self._store.write(ops, fence=fence)


# ---------------------------------------------------------------- routing


class RoutingStore:
    def __init__(self, store: base.StateStore):
        self._store = store

    async def next_version(self) -> int:
        return await self._store.incr("routing_version")

    async def save(self, table: fm.RoutingTable, fence: int | None = None) -> None:
        body = json_format.MessageToJson(wire.table_to_pb(table), indent=None)
        await self._store.write([base.Put(ROUTING, "table", body)], fence=fence)

    async def load(self) -> fm.RoutingTable | None:
        raw = await self._store.get(ROUTING, "table")
        if not raw:
            return None
        return wire.table_from_pb(json_format.Parse(raw, routing_pb2.RoutingTable()))
