"""Cloud API errors, classified the same way for every cloud.

Each provider turns its SDK's exceptions into a ``CloudError`` with a ``kind``; the agent acts on
the kind alone: throttled -> back off and retry later (the SDKs already retried with their own
policy), quota exceeded and insufficient capacity -> the pool cannot grow here (the scheduler gets
an event and re-plans elsewhere), auth failure -> reported and surfaced in status and metrics."""

from __future__ import annotations

import enum
import re

from meridian.fleet import models


class CloudErrorKind(str, enum.Enum):
    THROTTLED = "throttled"
    QUOTA_EXCEEDED = "quota_exceeded"
    INSUFFICIENT_CAPACITY = "insufficient_capacity"
    AUTH_FAILURE = "auth_failure"
    NOT_FOUND = "not_found"
    INVALID_REQUEST = "invalid_request"
    UNAVAILABLE = "unavailable"
    UNKNOWN = "unknown"


# The event the scheduler receives for each kind (kinds without one are only logged and counted).
EVENT_OF_KIND: dict[CloudErrorKind, models.EventKind] = {
    CloudErrorKind.THROTTLED: models.EventKind.THROTTLED,
    CloudErrorKind.QUOTA_EXCEEDED: models.EventKind.QUOTA_EXCEEDED,
    CloudErrorKind.INSUFFICIENT_CAPACITY: models.EventKind.STOCK_OUT,
    CloudErrorKind.AUTH_FAILURE: models.EventKind.AUTH_FAILURE,
}


class CloudError(Exception):
    """A classified failure of a cloud API call. ``code`` is the cloud's own error code, kept for
    operators; ``pool_id`` names the pool concerned when there is one."""

    def __init__(self, kind: CloudErrorKind, message: str, *, code: str = "", pool_id: str = "",
                 operation: str = ""):
        super().__init__(message)
        self.kind = CloudErrorKind(kind)
        self.message = message
        self.code = code
        self.pool_id = pool_id
        self.operation = operation

    def __str__(self) -> str:
        where = f" pool={self.pool_id}" if self.pool_id else ""
        op = f" op={self.operation}" if self.operation else ""
        code = f" code={self.code}" if self.code else ""
        return f"{self.kind.value}{code}{op}{where}: {self.message}"

    @property
    def event_kind(self) -> models.EventKind | None:
        return EVENT_OF_KIND.get(self.kind)

    def with_pool(self, pool_id: str, operation: str = "") -> CloudError:
        return CloudError(self.kind, self.message, code=self.code, pool_id=pool_id,
                          operation=operation or self.operation)


# Phrases the clouds use in free-text messages (scaling activities, operation errors), most specific
# first. Codes are checked before messages by each provider; these catch what only a message says.
_MESSAGE_RULES: tuple[tuple[re.Pattern[str], CloudErrorKind], ...] = (
    (re.compile(r"insufficient\w*capacity|not have (sufficient|enough) .*capacity|"
                r"resource_pool_exhausted|does not have enough resources|allocationfailed|"
                r"zonalallocationfailed|skunotavailable|overconstrainedallocation|"
                r"stockout|out of capacity", re.I), CloudErrorKind.INSUFFICIENT_CAPACITY),
    (re.compile(r"rate exceeded|throttl|too many requests|rate limit|requests per|per (minute|second|100 seconds)",
                re.I),
     CloudErrorKind.THROTTLED),
    (re.compile(r"quota|limitexceeded|limit exceeded|vcpulimit|exceed\w* .*limit", re.I),
     CloudErrorKind.QUOTA_EXCEEDED),
    (re.compile(r"unauthori[sz]ed|not authori[sz]ed|authentication|access ?denied|forbidden|"
                r"invalid ?client ?token|expired ?token|permission", re.I), CloudErrorKind.AUTH_FAILURE),
)


def classify_message(message: str) -> CloudErrorKind | None:
    """The kind a free-text cloud error message indicates, or None when it says nothing known."""
    for pattern, kind in _MESSAGE_RULES:
        if pattern.search(message):
            return kind
    return None
