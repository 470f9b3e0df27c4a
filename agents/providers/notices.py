"""Interruption notices from each cloud's instance metadata service, as seen from the agent's own
instance: AWS IMDSv2 ``spot/instance-action`` (about two minutes' warning), GCE
``instance/preempted`` (about 30 seconds), Azure Scheduled Events ``Preempt`` (at least 30 s).

Pure parsers for the documented bodies plus small async pollers (one aiohttp session, owned by the
provider). A provider maps the node name to its pool."""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import json
import time
import urllib.request
from collections.abc import Callable

import aiohttp

AWS_IMDS_URL = "http://169.254.169.254"
GCE_METADATA_URL = "http://metadata.google.internal"
AZURE_IMDS_URL = "http://169.254.169.254"
GCE_NOTICE_S = 30.0
AZURE_EVENTS_API = "2020-07-01"


@dataclasses.dataclass(frozen=True)
class NodeNotice:
    """A notice about one node (instance id / VM name), ``deadline`` in Unix seconds."""

    notice_id: str
    node: str
    deadline: float
    action: str


def parse_instance_action(body: str) -> tuple[float, str]:
    """AWS ``spot/instance-action``: {"action": "terminate"|"stop"|"hibernate", "time": "...Z"}."""
    data = json.loads(body)
    when = datetime.datetime.strptime(data["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    return when.timestamp(), str(data.get("action", "terminate"))


def parse_scheduled_events(body: str) -> list[NodeNotice]:
    """Azure Scheduled Events: every ``Preempt`` event, one notice per VM it names."""
    data = json.loads(body)
    out = []
    for ev in data.get("Events", []):
        if ev.get("EventType") != "Preempt":
            continue
        not_before = ev.get("NotBefore") or ""
        deadline = email.utils.parsedate_to_datetime(not_before).timestamp() if not_before else time.time()
        for vm in ev.get("Resources", []):
            out.append(NodeNotice(f"{ev.get('EventId', '')}/{vm}", vm, deadline, "preempt"))
    return out


class MetadataWatcher:
    """Polls one cloud's metadata service. ``flavour``: "aws", "gcp" or "azure"."""

    def __init__(self, flavour: str, base_url: str, *, clock: Callable[[], float] = time.time,
                 timeout_s: float = 2.0):
        if flavour not in ("aws", "gcp", "azure"):
            raise ValueError(f"unknown metadata flavour {flavour!r}; valid: aws, gcp, azure")
        self.flavour = flavour
        self.base_url = base_url.rstrip("/")
        self._clock = clock
        self._timeout_s = timeout_s
        self._http: aiohttp.ClientSession | None = None
        self._token = ""
        self._token_at = -1e18
        self._first_seen: dict[str, float] = {}

    async def poll(self) -> list[NodeNotice]:
        """Notices in effect now; raises aiohttp.ClientError / ValueError when the service fails."""
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        if self.flavour == "aws":
            return await self._aws()
        if self.flavour == "gcp":
            return await self._gcp()
        return await self._azure()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _get(self, path: str, headers: dict[str, str]) -> tuple[int, str]:
        assert self._http is not None
        async with self._http.get(self.base_url + path, headers=headers) as resp:
            return resp.status, await resp.text()

    async def _aws(self) -> list[NodeNotice]:
        assert self._http is not None
        if not self._token or self._clock() - self._token_at > 3000:
            async with self._http.put(f"{self.base_url}/latest/api/token",
                                      headers={"X-aws-ec2-metadata-token-ttl-seconds": "3600"}) as resp:
                if resp.status != 200:
                    raise ValueError(f"IMDS token request answered {resp.status}")
                self._token, self._token_at = (await resp.text()).strip(), self._clock()
        headers = {"X-aws-ec2-metadata-token": self._token}
        status, instance_id = await self._get("/latest/meta-data/instance-id", headers)
        if status != 200:
            raise ValueError(f"IMDS instance-id answered {status}")
        status, body = await self._get("/latest/meta-data/spot/instance-action", headers)
        if status == 404:
            return []
        if status != 200:
            raise ValueError(f"IMDS spot/instance-action answered {status}")
        deadline, action = parse_instance_action(body)
        node = instance_id.strip()
        return [NodeNotice(f"{node}@{deadline:.0f}", node, deadline, action)]

    async def _gcp(self) -> list[NodeNotice]:
        headers = {"Metadata-Flavor": "Google"}
        status, body = await self._get("/computeMetadata/v1/instance/preempted", headers)
        if status != 200:
            raise ValueError(f"GCE metadata instance/preempted answered {status}")
        if body.strip().upper() != "TRUE":
            self._first_seen.clear()
            return []
        status, name = await self._get("/computeMetadata/v1/instance/name", headers)
        if status != 200:
            raise ValueError(f"GCE metadata instance/name answered {status}")
        node = name.strip()
        first = self._first_seen.setdefault(node, self._clock())
        return [NodeNotice(f"{node}@preempted", node, first + GCE_NOTICE_S, "preempt")]

    async def _azure(self) -> list[NodeNotice]:
        status, body = await self._get(f"/metadata/scheduledevents?api-version={AZURE_EVENTS_API}", {"Metadata": "true"})
        if status != 200:
            raise ValueError(f"Azure Scheduled Events answered {status}")
        return parse_scheduled_events(body)


def probe(flavour: str, base_url: str, timeout_s: float = 1.0) -> bool:
    """Whether the metadata service answers (the agent runs on that cloud's instance). One short
    blocking try, made once when the provider is created."""
    if flavour == "aws":
        req = urllib.request.Request(f"{base_url}/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    elif flavour == "gcp":
        req = urllib.request.Request(f"{base_url}/computeMetadata/v1/instance/name", headers={"Metadata-Flavor": "Google"})
    else:
        req = urllib.request.Request(f"{base_url}/metadata/scheduledevents?api-version={AZURE_EVENTS_API}",
                                     headers={"Metadata": "true"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status == 200
    except OSError:
        return False


def resolve(flavour: str, url: str | None, default: str) -> str | None:
    """``url`` "auto": the cloud's standard address when it answers, else None (no notices)."""
    if url == "auto":
        return default if probe(flavour, default) else None
    return url
