"""A fault-injecting proxy in front of an AWS endpoint (moto): every request is forwarded, except
those matching a rule, which get the rule's answer in the service's own wire format (EC2 XML,
query-protocol XML, or JSON). So the real boto3 client parses real-shaped errors (Throttling,
InsufficientInstanceCapacity, AccessDenied) and failed scaling activities that moto cannot produce.

Run it on the caller's event loop: ``proxy = AwsFaultProxy(moto_url); url = await proxy.start()``."""

from __future__ import annotations

import dataclasses
import datetime
import re
import urllib.parse
import uuid
from xml.sax.saxutils import escape

import aiohttp
from aiohttp import web

_SCOPE = re.compile(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/aws4_request")
_QUERY_NS = {"autoscaling": "http://autoscaling.amazonaws.com/doc/2011-01-01/"}


@dataclasses.dataclass
class Rule:
    service: str
    action: str
    status: int
    body: str
    content_type: str
    remaining: int | None  # None: forever
    match: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Seen:
    service: str
    action: str
    params: dict[str, str]
    injected: bool


class AwsFaultProxy:
    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0):
        self.upstream = upstream.rstrip("/")
        self.host = host
        self.port = port
        self.rules: list[Rule] = []
        self.seen: list[Seen] = []
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self._http = aiohttp.ClientSession(auto_decompress=False)
        return self.url

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ------------------------------------------------------------------ rules

    def respond(self, service: str, action: str, body: str, *, status: int = 200, times: int | None = 1,
                content_type: str = "text/xml", match: dict[str, str] | None = None) -> Rule:
        rule = Rule(service, action, status, body, content_type, times, dict(match or {}))
        self.rules.append(rule)
        return rule

    def fail(self, service: str, action: str, code: str, message: str, *, status: int = 400,
             times: int | None = 1, match: dict[str, str] | None = None) -> Rule:
        """Answer ``action`` of ``service`` with the AWS error ``code`` in that service's format."""
        request_id = str(uuid.uuid4())
        if service == "ec2":
            body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>{escape(code)}</Code>"
                    f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{request_id}</RequestID></Response>")
            ctype = "text/xml"
        elif service in _QUERY_NS:
            body = (f"<ErrorResponse xmlns=\"{_QUERY_NS[service]}\"><Error><Type>Sender</Type><Code>{escape(code)}</Code>"
                    f"<Message>{escape(message)}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>")
            ctype = "text/xml"
        else:
            body = f'{{"__type": "{code}", "message": "{message}"}}'
            ctype = "application/x-amz-json-1.1"
        return self.respond(service, action, body, status=status, times=times, content_type=ctype, match=match)

    def failed_scaling_activity(self, group: str, status_message: str, *, times: int | None = None) -> Rule:
        """Make DescribeScalingActivities of ``group`` report a failed launch with ``status_message``
        (what AWS says when, e.g., a zone has no capacity for the instance type)."""
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        body = (
            f"<DescribeScalingActivitiesResponse xmlns=\"{_QUERY_NS['autoscaling']}\"><DescribeScalingActivitiesResult>"
            f"<Activities><member><ActivityId>{uuid.uuid4()}</ActivityId><AutoScalingGroupName>{escape(group)}"
            f"</AutoScalingGroupName><Description>Launching a new EC2 instance.  Status Reason: {escape(status_message)}"
            f"</Description><Cause>At {now} an instance was started in response to a difference between desired and "
            f"actual capacity.</Cause><StartTime>{now}</StartTime><EndTime>{now}</EndTime><StatusCode>Failed</StatusCode>"
            f"<StatusMessage>{escape(status_message)}</StatusMessage><Progress>100</Progress></member></Activities>"
            f"</DescribeScalingActivitiesResult><ResponseMetadata><RequestId>{uuid.uuid4()}</RequestId>"
            f"</ResponseMetadata></DescribeScalingActivitiesResponse>")
        return self.respond("autoscaling", "DescribeScalingActivities", body, times=times,
                            match={"AutoScalingGroupName": group})

    def clear(self) -> None:
        self.rules.clear()

    def count(self, action: str, *, injected: bool | None = None) -> int:
        return sum(1 for s in self.seen if s.action == action and (injected is None or s.injected == injected))

    # ------------------------------------------------------------------ serving

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        scope = _SCOPE.search(request.headers.get("Authorization", ""))
        service = scope.group(1) if scope else ""
        target = request.headers.get("X-Amz-Target", "")
        params: dict[str, str] = {}
        if target:
            action = target.rsplit(".", 1)[-1]
        else:
            params = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode(errors="replace")).items()}
            params.update({k: v for k, v in request.query.items()})
            action = params.get("Action", "")
        rule = self._match(service, action, params)
        self.seen.append(Seen(service, action, params, rule is not None))
        if rule is not None:
            return web.Response(status=rule.status, body=rule.body.encode(), content_type=rule.content_type.split(";")[0])
        assert self._http is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length",
                                                                                 "transfer-encoding")}
        async with self._http.request(request.method, self.upstream + request.path_qs, data=body,
                                      headers=headers) as upstream:
            payload = await upstream.read()
            out_headers = {k: v for k, v in upstream.headers.items()
                           if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding")}
            return web.Response(status=upstream.status, body=payload, headers=out_headers)

    def _match(self, service: str, action: str, params: dict[str, str]) -> Rule | None:
        for rule in self.rules:
            if rule.action != action or (rule.service and service and rule.service != service):
                continue
            if any(params.get(k) != v for k, v in rule.match.items()):
                continue
            if rule.remaining is not None:
                if rule.remaining <= 0:
                    continue
                rule.remaining -= 1
            return rule
        return None
