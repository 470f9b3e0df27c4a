"""Meridian's shared kernel: spec models, the gRPC contract's generated stubs, the GPU catalog,
the latency map and the capacity model. It imports no component (scheduler, router, agents,
runtime_adapter); the CLI in ``meridian.cli`` is the only place that wires components together."""

__version__ = "0.2.0"
