"""Meridian agents: one per GPU cluster, the scheduler's eyes (GPU inventory from the cloud's own
API, replica load) and hands (replicas started and drained through the runtime adapter, pools
resized), over the ``meridian.v1.CapacityService.Connect`` stream.

    cluster = agents.config.load_cluster(["cluster.yaml"], "aws-use1")
    agent = agents.build(cluster, token=..., state_dir=..., replica_settings=agents.config.replica_settings(cluster))
    await agent.run(stop_event)

Providers (``sim``, ``aws``, ``gcp``, ``azure``) live in ``agents.providers``, replica backends
(``local``, ``kubernetes``) in ``agents.backends``; fakes of the cloud APIs, of Kubernetes and a
small test scheduler in ``agents.testing``."""

from agents import allocation, backends, config, directives, metrics, outbox, providers, state, stream
from agents.agent import AGENT_VERSION, Agent, AgentOptions, build
from agents.config import ConfigError

__all__ = ["AGENT_VERSION", "Agent", "AgentOptions", "ConfigError", "allocation", "backends", "build",
           "config", "directives", "metrics", "outbox", "providers", "state", "stream"]
