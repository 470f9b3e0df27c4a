"""``latency`` (the default): send each request where its first token should come back soonest.

Expected time to first token at replica r for a client in region c:

    ttft_ms(r) = rtt_ms(c, region(r))                      network, from the latency map
               + cost_ms(r) x (pending(r) + queued(r) + 1)  queueing: Finagle/Linkerd peak-EWMA load
               + prompt_tokens x prefill_ms_per_token(r)    prefill on r's GPU type

``cost_ms`` is the peak-EWMA of the replica's server-side latency as the router observed it (RTT
taken out); ``pending`` is the router's own in-flight count and ``queued`` the replica's reported
queue. The score is divided by the replica's traffic share so rollout weights are respected.

To avoid herding (every router sending its next request to the same best replica), the choice is a
power of two choices among the near-best: replicas within ``slack_ratio`` / ``slack_ms`` of the best
score form the pool, two are drawn at random and the lower score wins."""

from __future__ import annotations

from collections.abc import Sequence

import pydantic

from router import endpoints
from router.policies import base


class LatencyArgs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    slack_ratio: float = pydantic.Field(default=0.1, ge=0, le=10,
                                        description="Near-best pool: score within this share of the best.")
    slack_ms: float = pydantic.Field(default=2.0, ge=0, le=10_000,
                                     description="Near-best pool: or within this many ms of the best.")


class Latency(base.Policy):
    name = "latency"
    Args = LatencyArgs

    def score_ms(self, e: endpoints.Endpoint, request: base.RouteRequest, now: float) -> float:
        """Expected time to first token at ``e`` for ``request``, per unit of traffic share (ms)."""
        rtt = self.rtt_ms(request.client_region, e.region)
        queue = e.ewma.value(now) * (e.pending + e.load.queued_requests + 1)
        prefill = request.prompt_tokens_estimate * e.prefill_ms_per_token
        return (rtt + queue + prefill) / e.share

    def select(self, candidates: Sequence[endpoints.Endpoint], request: base.RouteRequest,
               now: float) -> endpoints.Endpoint:
        if len(candidates) == 1:
            return candidates[0]
        scored = [(self.score_ms(e, request, now), e) for e in candidates]
        best = min(s for s, _ in scored)
        bound = max(best * (1.0 + self.args.slack_ratio), best + self.args.slack_ms)
        near = [pair for pair in scored if pair[0] <= bound]
        n = len(near)
        if n == 1:
            return near[0][1]
        if n == 2:
            a, b = near
        else:  # two distinct draws (cheaper than rng.sample on the hot path)
            i = int(self.rng.random() * n)
            j = int(self.rng.random() * (n - 1))
            a, b = near[i], near[j + 1 if j >= i else j]
        if a[0] == b[0]:
            return a[1] if self.rng.random() < 0.5 else b[1]
        return a[1] if a[0] < b[0] else b[1]
