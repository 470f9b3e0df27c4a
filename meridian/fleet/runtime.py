"""From a ModelDeployment to what one replica runs: the runtime spec and the spec revision."""

from __future__ import annotations

import hashlib
import json

from meridian.fleet import models
from meridian.spec import deployment


def revision_of(dep: deployment.ModelDeployment) -> str:
    """A short content hash of the deployment's spec: replicas started from an equal spec share it,
    so a changed spec is visible as a new revision (rollouts key on it)."""
    canonical = json.dumps(dep.spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def runtime_spec(dep: deployment.ModelDeployment, gpu_type: str) -> models.RuntimeSpec:
    """The engine launch parameters for a replica of ``dep`` on ``gpu_type``."""
    s = dep.spec
    r = s.runtime
    return models.RuntimeSpec(
        engine=r.engine,
        model_path=s.model.source,
        model_revision=s.model.revision,
        served_model_name=s.model.served_name,
        tp_size=s.tp_size_for(gpu_type),
        context_length=r.context_length or 0,
        mem_fraction_static=r.mem_fraction_static,
        quantization="" if r.quantization == "none" else r.quantization,
        extra_args=tuple(r.extra_args),
        max_running_requests=r.max_running_requests or 0,
        max_queued_requests=r.max_queued_requests or 0,
        is_embedding=r.is_embedding,
    )
