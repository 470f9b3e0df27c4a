"""The kubernetes_asyncio client for the backend: which credentials (the spec's kubeconfig and
context; else the pod's service account when the agent runs in the cluster; else
``~/.kube/config``), and the API calls the backend makes, with the API server's errors turned
into what the agent reports (``KubeError``: the operation, the HTTP status and the server's
message; never a credential)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Awaitable, Mapping
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client import exceptions as kube_exceptions
from kubernetes_asyncio.config import config_exception

from meridian.spec import replicas as replicas_spec

log = logging.getLogger(__name__)

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
REQUEST_TIMEOUT_S = 30.0


class KubeConfigError(RuntimeError):
    """No usable Kubernetes credentials; the message says which were tried."""


class KubeError(RuntimeError):
    """An API call failed: ``operation``, ``status`` (0: the server could not be reached), the reason."""

    def __init__(self, operation: str, status: int, reason: str):
        super().__init__(f"{operation}: " + (f"HTTP {status} {reason}" if status else f"API server unreachable: {reason}"))
        self.operation = operation
        self.status = status
        self.reason = reason


def _reason(exc: kube_exceptions.ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
        return str(body.get("reason") or "") + (f": {body['message']}" if body.get("message") else "")
    except (ValueError, TypeError, AttributeError):
        return str(exc.reason or "")


def classify(operation: str, exc: BaseException) -> KubeError:
    if isinstance(exc, kube_exceptions.ApiException):
        return KubeError(operation, int(exc.status or 0), _reason(exc))
    return KubeError(operation, 0, f"{type(exc).__name__}: {exc}")


ERRORS = (kube_exceptions.ApiException, aiohttp.ClientError, OSError, asyncio.TimeoutError)


async def connect(settings: replicas_spec.KubernetesReplicas) -> client.ApiClient:
    """An ApiClient from the spec's kubeconfig (and context), else the in-cluster service account,
    else the default kubeconfig (``$KUBECONFIG`` or ``~/.kube/config``)."""
    tried = []
    if settings.kubeconfig:
        path = os.path.expanduser(settings.kubeconfig)
        try:
            return await config.new_client_from_config(config_file=path, context=settings.context,
                                                       persist_config=False)
        except (config_exception.ConfigException, OSError, ValueError) as exc:
            raise KubeConfigError(f"spec.replicas.kubernetes.kubeconfig: cannot use {path}"
                                  + (f" (context {settings.context})" if settings.context else "") + f": {exc}") from None
    if os.path.exists(IN_CLUSTER_TOKEN):
        cfg = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=cfg)
            return client.ApiClient(configuration=cfg)
        except config_exception.ConfigException as exc:
            tried.append(f"in-cluster service account: {exc}")
    else:
        tried.append("in-cluster service account: not running in a pod")
    default = os.path.expanduser(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0])
    try:
        return await config.new_client_from_config(config_file=default, context=settings.context, persist_config=False)
    except (config_exception.ConfigException, OSError, ValueError) as exc:
        tried.append(f"{default}: {exc}")
    raise KubeConfigError("no Kubernetes credentials: " + "; ".join(tried)
                          + " (set spec.replicas.kubernetes.kubeconfig, or run the agent in the cluster)")


class Api:
    """The calls the backend makes (CoreV1Api), each classified on failure."""

    def __init__(self, api_client: client.ApiClient, namespace: str):
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace

    async def _call(self, operation: str, coro: Awaitable[Any]) -> Any:
        try:
            return await coro
        except ERRORS as exc:
            raise classify(operation, exc) from exc

    async def create_pod(self, body: Mapping) -> dict:
        resp = await self._call("create pod", self.core.create_namespaced_pod(
            self.namespace, cast(Any, body), _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S))
        return await self._json("create pod", resp)

    async def get_pod(self, name: str) -> dict | None:
        resp = await self._call("get pod", self.core.read_namespaced_pod(
            name, self.namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S))
        if getattr(resp, "status", 200) == 404:
            resp.release()
            return None
        return await self._json("get pod", resp)

    async def delete_pod(self, name: str, grace_s: int) -> bool:
        """Delete with a grace period; False when the pod was already gone."""
        try:
            await self._call("delete pod", self.core.delete_namespaced_pod(
                name, self.namespace, grace_period_seconds=grace_s, _request_timeout=REQUEST_TIMEOUT_S))
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def annotate_pod(self, name: str, annotations: Mapping[str, str]) -> None:
        await self._call("annotate pod", self.core.patch_namespaced_pod(
            name, self.namespace, {"metadata": {"annotations": dict(annotations)}}, _request_timeout=REQUEST_TIMEOUT_S))

    async def create_service(self, body: Mapping) -> dict:
        resp = await self._call("create service", self.core.create_namespaced_service(
            self.namespace, cast(Any, body), _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S))
        return await self._json("create service", resp)

    async def delete_service(self, name: str) -> bool:
        try:
            await self._call("delete service", self.core.delete_namespaced_service(
                name, self.namespace, _request_timeout=REQUEST_TIMEOUT_S))
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def create_event(self, body: Mapping) -> None:
        await self._call("create event", self.core.create_namespaced_event(
            self.namespace, cast(Any, body), _request_timeout=REQUEST_TIMEOUT_S))

    async def _json(self, operation: str, resp: Any) -> dict:
        try:
            body = await resp.read()
        finally:
            resp.release()
        if not 200 <= resp.status <= 299:
            try:
                data = json.loads(body)
                reason = str(data.get("reason") or "") + (f": {data['message']}" if data.get("message") else "")
            except ValueError:
                reason = body[:200].decode(errors="replace")
            raise KubeError(operation, resp.status, reason)
        return json.loads(body)

    async def close(self) -> None:
        await self.api_client.close()


__all__ = ["Api", "ERRORS", "KubeConfigError", "KubeError", "classify", "connect"]
