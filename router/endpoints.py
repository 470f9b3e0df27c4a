"""Runtime state the router keeps per replica (``Endpoint``) and per served model (``ModelEntry``).

An ``Endpoint`` outlives routing-table updates (keyed by replica id) so its connection pool, latency
estimate, in-flight count and health history survive the scheduler re-sending the table. Times are
``time.monotonic()`` seconds unless a name says otherwise."""

from __future__ import annotations

import math
import urllib.parse

from meridian.catalog import gpus
from meridian.fleet import models as fm

# Prefill estimate: FLOPs per prompt token of a reference 8B dense model (2 x parameters) at 40%
# model FLOPs utilisation. The router does not know each model's size; what matters for routing is
# the relative speed of GPU types serving the same model, which this preserves.
_REF_FLOPS_PER_TOKEN = 2 * 8e9
_MFU = 0.4
_DEFAULT_PREFILL_MS_PER_TOKEN = 0.04


def prefill_ms_per_token(gpu_type: str) -> float:
    """Approximate prefill time per prompt token on ``gpu_type`` (ms); a mid-range default if unknown."""
    try:
        spec = gpus.gpu(gpu_type)
    except KeyError:
        return _DEFAULT_PREFILL_MS_PER_TOKEN
    return _REF_FLOPS_PER_TOKEN / (spec.bf16_tflops * 1e12 * _MFU) * 1e3


class PeakEwma:
    """Finagle's peak-sensitive moving average of a latency (ms).

    A sample above the current value replaces it at once (the peak); lower samples are blended
    with weight ``1 - exp(-dt / decay_s)``, so the estimate reacts to slowdowns immediately and
    forgets them over ``decay_s``. Reading the value decays it toward zero with time since the last
    sample, which lets an idle replica be probed again."""

    __slots__ = ("cost_ms", "stamp", "decay_s", "observed")

    def __init__(self, initial_ms: float, decay_s: float = 10.0, now: float = 0.0):
        self.cost_ms = initial_ms
        self.stamp = now
        self.decay_s = decay_s
        self.observed = False

    def observe(self, sample_ms: float, now: float) -> None:
        dt = now - self.stamp
        if dt < 0:
            dt = 0.0
        if sample_ms > self.cost_ms or not self.observed:
            self.cost_ms = sample_ms  # a peak, or the first real figure replacing the prior
        else:
            w = math.exp(-dt / self.decay_s)
            self.cost_ms = self.cost_ms * w + sample_ms * (1.0 - w)
        self.stamp = now
        self.observed = True

    def value(self, now: float) -> float:
        dt = now - self.stamp
        if dt <= 0:
            return self.cost_ms
        return self.cost_ms * math.exp(-dt / self.decay_s)


class Endpoint:
    """One replica as the router sees it: where it is, what it reported, and what the router saw."""

    __slots__ = (
        "replica_id", "url", "tls", "host", "port", "authority", "host_header", "cloud", "region", "zone", "state", "weight",
        "load", "gpu_type", "revision", "pool", "pending", "ewma", "prefill_ms_per_token",
        "active_up", "active_failures", "active_successes", "consecutive_failures", "ejected_until",
        "ejections", "last_ejected_at", "model", "failures", "share",
    )

    def __init__(self, route: fm.RouteReplica, model: str, *, ewma_decay_s: float, default_cost_ms: float,
                 now: float):
        self.replica_id = route.replica_id
        self.model = model
        self.url = route.endpoint
        self.tls, self.host, self.port = parse_endpoint(route.endpoint)
        self.authority = f"{self.host}:{self.port}"
        self.host_header = self.authority.encode("idna")
        self.pool = None  # router.upstream.Pool, attached by the routing state
        self.pending = 0
        initial = route.load.ttft.p50_ms or default_cost_ms
        self.ewma = PeakEwma(initial, ewma_decay_s, now)
        self.active_up = True
        self.active_failures = 0
        self.active_successes = 0
        self.consecutive_failures = 0
        self.ejected_until = 0.0
        self.ejections = 0
        self.last_ejected_at = -math.inf
        self.failures = 0
        self.share = 1.0
        self.update(route)

    def update(self, route: fm.RouteReplica) -> None:
        """Take the scheduler's latest view (state, weight, reported load) of this replica."""
        self.cloud = route.cloud
        self.region = route.region
        self.zone = route.zone
        self.state = route.state
        self.weight = route.weight
        self.load = route.load
        self.gpu_type = route.gpu_type
        self.revision = route.revision
        self.prefill_ms_per_token = prefill_ms_per_token(route.gpu_type)

    @property
    def queued(self) -> int:
        """Requests the replica reported waiting in its own queue."""
        return self.load.queued_requests

    def ejected(self, now: float) -> bool:
        return self.ejected_until > now

    def available(self, now: float) -> bool:
        """Passes active health checks and is not ejected by outlier detection."""
        return self.active_up and self.ejected_until <= now

    def __repr__(self) -> str:
        return f"Endpoint({self.replica_id!r}, {self.url!r}, {self.region!r}, pending={self.pending})"


def parse_endpoint(endpoint: str) -> tuple[bool, str, int]:
    """``http://host:port``, ``https://host:port`` (or ``host:port``) -> (TLS, host, port); raises
    ValueError naming the endpoint."""
    text = endpoint if "://" in endpoint else f"http://{endpoint}"
    parsed = urllib.parse.urlsplit(text)
    if parsed.scheme not in ("http", "https"):
        raise ValueError(f"replica endpoint {endpoint!r}: use http:// or https:// (TLS) between router and replicas")
    if not parsed.hostname:
        raise ValueError(f"replica endpoint {endpoint!r} has no host")
    tls = parsed.scheme == "https"
    try:
        port = parsed.port or (443 if tls else 80)
    except ValueError:
        raise ValueError(f"replica endpoint {endpoint!r} has an invalid port") from None
    return tls, parsed.hostname, port


class ModelEntry:
    """One served model: its replicas, its policy instance, and its admission (bounded queue)."""

    __slots__ = ("name", "deployment", "policy_name", "policy", "endpoints", "is_embedding", "context_length",
                 "max_rtt_ms", "ttft_p99_ms", "tpot_p99_ms", "first_byte_s", "token_s", "prompt_s", "admission",
                 "panic", "routable")

    def __init__(self, routes: fm.ModelRoutes, endpoints: list[Endpoint], policy_name: str, policy, admission):
        self.name = routes.served_model_name
        self.deployment = routes.deployment
        self.is_embedding = routes.is_embedding
        self.context_length = routes.context_length
        self.max_rtt_ms = routes.max_rtt_ms
        self.ttft_p99_ms = routes.ttft_p99_ms
        self.tpot_p99_ms = routes.tpot_p99_ms
        # Per-try limits (router.pertry), set by the routing state from its settings.
        self.first_byte_s = 0.0
        self.token_s = 0.0
        self.prompt_s = 0.0
        self.endpoints = endpoints
        self.policy_name = policy_name
        self.policy = policy
        self.admission = admission
        self.panic = False
        self.routable: list[Endpoint] = []
        self.refresh()

    def refresh(self) -> None:
        """Recompute the replicas that may take new requests by the scheduler's word: READY with a
        traffic share (draining, starting and failed replicas get none). Each one's ``share`` is its
        weight; an all-zero table means the scheduler left weights unset (proto3 default), so all
        READY replicas then get an equal share."""
        ready = [e for e in self.endpoints if e.state is fm.ReplicaState.READY]
        weighted = [e for e in ready if e.weight > 0]
        if weighted:
            for e in weighted:
                e.share = e.weight
            self.routable = weighted
        else:
            for e in ready:
                e.share = 1.0
            self.routable = ready
