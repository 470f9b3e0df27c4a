"""The load-oblivious and load-aware baselines: ``round_robin``, ``random`` and ``least_request``."""

from __future__ import annotations

from collections.abc import Sequence

from router import endpoints
from router.policies import base


class RoundRobin(base.Policy):
    """Smooth weighted round robin (nginx's): over any window, each replica gets its share of
    requests, interleaved rather than in bursts. Replicas missing from a call's candidates (failed,
    excluded) are skipped without disturbing the others' turns."""

    name = "round_robin"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._current: dict[str, float] = {}

    def select(self, candidates: Sequence[endpoints.Endpoint], request: base.RouteRequest,
               now: float) -> endpoints.Endpoint:
        if len(candidates) == 1:
            return candidates[0]
        current = self._current
        total = 0.0
        best = None
        best_value = 0.0
        for e in candidates:
            value = current.get(e.replica_id, 0.0) + e.share
            current[e.replica_id] = value
            total += e.share
            if best is None or value > best_value:
                best, best_value = e, value
        current[best.replica_id] = best_value - total
        return best

    def forget(self, replica_ids: set[str]) -> None:
        for rid in replica_ids:
            self._current.pop(rid, None)


class Random(base.Policy):
    """A random replica, weighted by traffic share."""

    name = "random"

    def select(self, candidates: Sequence[endpoints.Endpoint], request: base.RouteRequest,
               now: float) -> endpoints.Endpoint:
        return base.weighted_choice(candidates, self.rng)


def outstanding(e: endpoints.Endpoint) -> float:
    """Requests ahead of a new one at ``e``: the router's own in flight plus the replica's reported
    queue, per unit of traffic share."""
    return (e.pending + e.load.queued_requests) / e.share


class LeastRequest(base.Policy):
    """The replica with the fewest outstanding requests (own in-flight + reported queue, per unit of
    share); ties broken at random so equal replicas share the traffic."""

    name = "least_request"

    def select(self, candidates: Sequence[endpoints.Endpoint], request: base.RouteRequest,
               now: float) -> endpoints.Endpoint:
        best: list[endpoints.Endpoint] = []
        best_value = 0.0
        for e in candidates:
            value = outstanding(e)
            if not best or value < best_value:
                best, best_value = [e], value
            elif value == best_value:
                best.append(e)
        return best[0] if len(best) == 1 else self.rng.choice(best)
