"""A local instance metadata service speaking the three clouds' dialects, so interruption notices
can be exercised without a cloud VM: AWS IMDSv2 (token, ``instance-id``,
``spot/instance-action``), GCE (``Metadata-Flavor: Google``; ``instance/name``,
``instance/preempted``) and Azure Scheduled Events (``Metadata: true``)."""

from __future__ import annotations

import datetime
import email.utils
import json
import uuid

from aiohttp import web


class MetadataFake:
    def __init__(self, *, host: str = "127.0.0.1", instance: str = "i-0123456789abcdef0"):
        self.host = host
        self.instance = instance
        self.spot_action: tuple[str, float] | None = None  # AWS: (action, Unix time)
        self.preempted = False  # GCE
        self.azure_events: list[dict] = []
        self._token = uuid.uuid4().hex
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def notify_spot(self, deadline: float, action: str = "terminate") -> None:
        self.spot_action = (action, deadline)

    def preempt_azure(self, vm_name: str, not_before: float) -> None:
        self.azure_events.append({
            "EventId": str(uuid.uuid4()), "EventType": "Preempt", "ResourceType": "VirtualMachine",
            "Resources": [vm_name], "EventStatus": "Scheduled", "EventSource": "Platform", "DurationInSeconds": -1,
            "NotBefore": email.utils.formatdate(not_before, usegmt=True), "Description": "Spot eviction"})

    async def start(self) -> str:
        app = web.Application()
        app.router.add_put("/latest/api/token", self._aws_token)
        app.router.add_get("/latest/meta-data/instance-id", self._aws_instance_id)
        app.router.add_get("/latest/meta-data/spot/instance-action", self._aws_action)
        app.router.add_get("/computeMetadata/v1/instance/name", self._gce_name)
        app.router.add_get("/computeMetadata/v1/instance/preempted", self._gce_preempted)
        app.router.add_get("/metadata/scheduledevents", self._azure_events)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _aws_ok(self, request: web.Request) -> bool:
        return request.headers.get("X-aws-ec2-metadata-token") == self._token

    async def _aws_token(self, request: web.Request) -> web.Response:
        if "X-aws-ec2-metadata-token-ttl-seconds" not in request.headers:
            return web.Response(status=400)
        return web.Response(text=self._token)

    async def _aws_instance_id(self, request: web.Request) -> web.Response:
        return web.Response(text=self.instance) if self._aws_ok(request) else web.Response(status=401)

    async def _aws_action(self, request: web.Request) -> web.Response:
        if not self._aws_ok(request):
            return web.Response(status=401)
        if self.spot_action is None:
            return web.Response(status=404, text="Not Found")
        action, when = self.spot_action
        stamp = datetime.datetime.fromtimestamp(when, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return web.Response(text=json.dumps({"action": action, "time": stamp}), content_type="text/plain")

    def _gce_ok(self, request: web.Request) -> bool:
        return request.headers.get("Metadata-Flavor") == "Google"

    async def _gce_name(self, request: web.Request) -> web.Response:
        return web.Response(text=self.instance) if self._gce_ok(request) else web.Response(status=403)

    async def _gce_preempted(self, request: web.Request) -> web.Response:
        if not self._gce_ok(request):
            return web.Response(status=403)
        return web.Response(text="TRUE" if self.preempted else "FALSE")

    async def _azure_events(self, request: web.Request) -> web.Response:
        if request.headers.get("Metadata") != "true":
            return web.Response(status=400)
        return web.json_response({"DocumentIncarnation": len(self.azure_events), "Events": self.azure_events})
