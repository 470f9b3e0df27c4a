"""``prefix_cache``: send a prompt where its prefix is likely still in the KV cache (as SGLang's
cache-aware router), unless load is out of balance.

Per model, an approximate radix tree of recent prompts remembers which replicas saw which prefixes
(``router.policies.prefix_tree``). For each request:
1. if load is imbalanced (max - min outstanding > ``balance_abs_threshold`` and
   max > min x ``balance_rel_threshold``), the least-loaded replica wins: cache affinity must not
   pile requests onto an overloaded replica;
2. otherwise the replica with the longest cached prefix wins if it covers more than
   ``cache_threshold`` of the prompt and is not itself overloaded;
3. otherwise the least-loaded replica wins (its cache starts warming with this prompt).
The chosen replica's tree is updated with the prompt after routing."""

from __future__ import annotations

from collections.abc import Sequence

import pydantic

from router import endpoints
from router.policies import base, prefix_tree, simple


class PrefixCacheArgs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")

    cache_threshold: float = pydantic.Field(default=0.3, ge=0, le=1,
                                            description="Share of the prompt that must be cached to follow it.")
    balance_abs_threshold: int = pydantic.Field(default=32, ge=0,
                                                description="Outstanding-request gap that counts as imbalance.")
    balance_rel_threshold: float = pydantic.Field(default=1.5, ge=1,
                                                  description="Max/min outstanding ratio that counts as imbalance.")
    block_chars: int = pydantic.Field(default=64, ge=8, le=4096, description="Tree granularity (characters).")
    max_blocks: int = pydantic.Field(default=1 << 18, ge=16, description="Blocks remembered per model (LRU).")


class PrefixCache(base.Policy):
    name = "prefix_cache"
    Args = PrefixCacheArgs

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tree = prefix_tree.PrefixTree(self.args.block_chars, self.args.max_blocks)

    def _least_loaded(self, candidates: Sequence[endpoints.Endpoint]) -> endpoints.Endpoint:
        best = candidates[0]
        best_value = simple.outstanding(best)
        ties = [best]
        for e in candidates[1:]:
            value = simple.outstanding(e)
            if value < best_value:
                best, best_value, ties = e, value, [e]
            elif value == best_value:
                ties.append(e)
        return ties[0] if len(ties) == 1 else self.rng.choice(ties)

    def select(self, candidates: Sequence[endpoints.Endpoint], request: base.RouteRequest,
               now: float) -> endpoints.Endpoint:
        if len(candidates) == 1:
            return candidates[0]
        loads = [simple.outstanding(e) for e in candidates]
        low, high = min(loads), max(loads)
        a = self.args
        imbalanced = high - low > a.balance_abs_threshold and high > low * a.balance_rel_threshold
        if imbalanced:
            return self._least_loaded(candidates)
        prompt = request.prompt_text()
        if prompt:
            matched = self.tree.match(prompt, {e.replica_id for e in candidates})
            if matched is not None:
                replica_id, matched_chars = matched
                if matched_chars > a.cache_threshold * len(prompt):
                    for e in candidates:
                        if e.replica_id == replica_id:
                            return e
        return self._least_loaded(candidates)

    def on_routed(self, chosen: endpoints.Endpoint, request: base.RouteRequest) -> None:
        prompt = request.prompt_text()
        if prompt:
            self.tree.insert(prompt, chosen.replica_id)

    def forget(self, replica_ids: set[str]) -> None:
        self.tree.forget(replica_ids)
