"""Supported fakes for testing and demos (the agent's tests, the demo and end-to-end tests reuse
them): a real CapacityService test scheduler, moto in server mode, a fault-injecting AWS proxy,
local GKE and Azure ARM fakes the real SDK clients talk to, an instance metadata fake, and a fake
Kubernetes cluster (`kube`) the real kubernetes_asyncio client talks to.

Modules are imported on demand (``from agents.testing import gke_fake``): each pulls in only what
it fakes."""

__all__ = ["arm_fake", "aws_proxy", "gke_fake", "kube", "metadata_fake", "moto", "scheduler"]
