"""Fixtures for the fake Kubernetes cluster's tests: a started ``FakeCluster`` on a free loopback port
and the real ``kubernetes_asyncio`` client configured from the kubeconfig the fake writes. Every
cluster is stopped (and checked to leave no process behind) in the fixture's finally."""

from __future__ import annotations

import sys

import kube_helpers as h
import pytest
from kubernetes_asyncio import client, config

from agents.testing import kube


@pytest.fixture
async def cluster(tmp_path):
    """A started fake cluster with fast restart backoff and short bookmarks; stopped afterwards."""
    fake = kube.FakeCluster(workdir=tmp_path / "kube", restart_backoff_scale=0.02, bookmark_interval_s=0.5,
                            command_map={"meridian/http-server:1": [sys.executable, str(h.write_server(tmp_path))]})
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def core(cluster, tmp_path):
    """A CoreV1Api of the real client, loaded from the cluster's kubeconfig."""
    path = cluster.kubeconfig(tmp_path / "kubeconfig")
    api_client = await config.new_client_from_config(config_file=str(path))
    try:
        yield client.CoreV1Api(api_client)
    finally:
        await api_client.close()
