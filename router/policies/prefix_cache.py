"""``prefix_cache``: send a prompt where its prefix is likely still in the KV cache (as SGLang's
cache-aware router), unless that would pile requests onto one replica.

Per model, an approximate radix tree of recent prompts remembers which replicas saw which prefixes
(``router.policies.prefix_tree``). For each request:
1. if load is imbalanced (max - min outstanding > ``balance_abs_threshold`` and
   max > min x ``balance_rel_threshold``), the least-loaded replica wins: cache affinity must not
   pile requests onto an overloaded replica;
2. otherwise the replicas holding the longest cached prefix win if what they hold *beyond what
   every candidate holds* covers more than ``cache_threshold`` of the prompt. A prefix every
   replica has (a shared system prompt) is reused wherever the request goes, so it binds the
   request nowhere; short prompts that only share it are spread by load. Among those replicas the
   least loaded is taken, unless it is itself out of balance against the least-loaded candidate
   (more than ``cache_balance_abs_threshold`` outstanding above it and more than
   ``balance_rel_threshold`` times it) *and* the prefill its extra requests queue ahead is more
   than the request would reuse there: the extra requests times the prompt a routed request
   leaves uncached on average (a decayed mean over recent requests), against the cached prefix
   beyond what every candidate holds. So a short prompt first seen by one replica spills to others
   instead of piling up there while they warm, while a long conversation's follow-up waits for
   the replica that holds its history: recomputing that history costs more than the queue;
3. otherwise, among the replicas within ``work_balance_slack`` outstanding requests of the least
   loaded, the one sent the least uncached prompt lately wins (its cache starts warming with this
   prompt). Balancing prompt characters, not only requests, keeps long prompts from crowding one
   replica's KV memory, where running requests shrink the room of the prefix cache and evict the
   histories that later follow-ups would have reused.
"Least loaded" is the fewest outstanding requests (the router's in flight plus the replica's
reported queue); "sent lately" is a sum of uncached prompt characters (plus one block per request)
decayed by ``TIE_DECAY`` per routed request; equal figures go to a random replica, never to the
lowest replica id. The chosen replica's tree is updated with the prompt after routing."""

from __future__ import annotations

from collections.abc import Sequence

import pydantic

from router import endpoints
from router.policies import base, prefix_tree, simple

# Per routed request, every replica's recent prompt sum is multiplied by this (a memory of about
# 1 / (1 - TIE_DECAY) = 200 requests), so a replica back from an absence is not sent every new
# prompt until it catches up with sums from long ago.
TIE_DECAY = 0.995


class PrefixCacheArgs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    cache_threshold: float = pydantic.Field(
        default=0.3, ge=0, le=1,
        description="Share of the prompt that must be cached on a replica, beyond what every replica holds, to follow it.")
    balance_abs_threshold: int = pydantic.Field(default=32, ge=0,
                                                description="Outstanding-request gap that counts as imbalance.")
    balance_rel_threshold: float = pydantic.Field(default=1.5, ge=1,
                                                  description="Max/min outstanding ratio that counts as imbalance.")
    cache_balance_abs_threshold: int = pydantic.Field(
        default=8, ge=0,
        description="A cached replica is passed over when it has more outstanding requests than this above the "
                    "least loaded (and more than balance_rel_threshold times it) and those extra requests stand "
                    "for more prefill than its cache saves the request.")
    work_balance_slack: int = pydantic.Field(
        default=2, ge=0,
        description="A prompt that follows no replica's cache goes to the replica sent the least uncached prompt "
                    "lately among those within this many outstanding requests of the least loaded.")
    block_chars: int = pydantic.Field(default=64, ge=8, le=4096, description="Tree granularity (characters).")
    max_blocks: int = pydantic.Field(default=1 << 18, ge=16, description="Blocks remembered per model (LRU).")


class PrefixCache(base.Policy):
    name = "prefix_cache"
    Args = PrefixCacheArgs

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tree = prefix_tree.PrefixTree(self.args.block_chars, self.args.max_blocks)
        # Uncached prompt characters sent lately per replica, decayed lazily: sum = stored value x
        # _scale, and _scale shrinks by TIE_DECAY per routed request, so decaying every replica is
        # one multiplication.
        self._recent: dict[str, float] = {}
        self._scale = 1.0
        # The block keys of the request last selected for and its match, reused by on_routed
        # (hashing a long prompt is the policy's main cost; it is done once per request).
        self._keys_for: tuple[object, list[int], prefix_tree.Match | None] | None = None
        # Characters a routed request leaves uncached on its replica, a mean decayed by
        # TIE_DECAY per request (sum and weight both decayed, so the first requests count in
        # full): the prefill one queued request stands for.
        self._uncached_sum = 0.0
        self._uncached_weight = 0.0

    def _recent_count(self, replica_id: str) -> float:
        return self._recent.get(replica_id, 0.0) * self._scale

    def _least_loaded(self, candidates: Sequence[endpoints.Endpoint], slack: float = 0.0) -> endpoints.Endpoint:
        """Among the candidates within ``slack`` outstanding requests of the fewest, the one sent
        the least uncached prompt lately (per unit of share); then random."""
        loads = [simple.outstanding(e) for e in candidates]
        limit = min(loads) + slack
        best: list[endpoints.Endpoint] = []
        best_key = 0.0
        for e, load in zip(candidates, loads, strict=True):
            if load > limit:
                continue
            key = self._recent_count(e.replica_id) / e.share
            if not best or key < best_key:
                best, best_key = [e], key
            elif key == best_key:
                best.append(e)
        return best[0] if len(best) == 1 else self.rng.choice(best)

    def _queued_chars(self, requests: float) -> float:
        """The prefill ``requests`` queued requests stand for, in prompt characters."""
        if not self._uncached_weight:
            return 0.0
        return requests * self._uncached_sum / self._uncached_weight

    def _imbalanced(self, high: float, low: float, abs_threshold: int) -> bool:
        return high - low > abs_threshold and high > low * self.args.balance_rel_threshold

    def select(self, candidates: Sequence[endpoints.Endpoint], request: base.RouteRequest,
               now: float) -> endpoints.Endpoint:
        if len(candidates) == 1:
            return candidates[0]
        loads = [simple.outstanding(e) for e in candidates]
        low, high = min(loads), max(loads)
        a = self.args
        if self._imbalanced(high, low, a.balance_abs_threshold):
            return self._least_loaded(candidates)
        prompt = request.prompt_text()
        if prompt:
            keys = self.tree.keys(prompt)
            matched = self.tree.match(keys, {e.replica_id for e in candidates})
            self._keys_for = (request, keys, matched)
            if matched is not None and matched.gain_chars > a.cache_threshold * len(prompt):
                holders = [e for e in candidates if e.replica_id in matched.replicas]
                chosen = self._least_loaded(holders)
                if (not self._imbalanced(simple.outstanding(chosen), low, a.cache_balance_abs_threshold)
                        or self._queued_chars(simple.outstanding(chosen) - low) <= matched.gain_chars):
                    return chosen
        return self._least_loaded(candidates, a.work_balance_slack)

    def on_routed(self, chosen: endpoints.Endpoint, request: base.RouteRequest) -> None:
        prompt = request.prompt_text()
        if self._keys_for is not None and self._keys_for[0] is request:
            keys, matched = self._keys_for[1], self._keys_for[2]
        else:
            keys = self.tree.keys(prompt) if prompt else []
            matched = None
        self._keys_for = None
        cached = 0
        if matched is not None:
            cached = matched.chars if chosen.replica_id in matched.replicas else matched.shared_chars
        uncached = len(prompt) - cached
        if prompt:
            self._uncached_sum = self._uncached_sum * TIE_DECAY + uncached
            self._uncached_weight = self._uncached_weight * TIE_DECAY + 1.0
        self._scale *= TIE_DECAY
        if self._scale < 1e-100:  # renormalise long before the stored values overflow
            self._recent = {k: v * self._scale for k, v in self._recent.items()}
            self._scale = 1.0
        work = uncached + self.args.block_chars  # a prompt all cached still costs a request
        self._recent[chosen.replica_id] = self._recent.get(chosen.replica_id, 0.0) + work / self._scale
        if keys:
            self.tree.insert(keys, chosen.replica_id)

    def forget(self, replica_ids: set[str]) -> None:
        self.tree.forget(replica_ids)
        for rid in replica_ids:
            self._recent.pop(rid, None)
